# SPDX-License-Identifier: Apache-2.0
"""The native reference's quick plan (validate --quick's native.nt_benefit)
is bounded by its budget whatever LLC /sys reports, and makes its cells cold
another way where the budget cannot exceed the LLC (the plan run on this
host: tests/live/test_native_quick_plan_live.py)."""
from pathlib import Path

import pytest

from nttrace.kernel import cache_topology
from nttrace.reference import measurements

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sysfs"
BUDGET = measurements.QUICK_BUDGET_BYTES


def _sysfs_llc(tmp_path: Path, size: str) -> Path:
    d = tmp_path / size / cache_topology.CACHE_DIR / "index3"
    d.mkdir(parents=True)
    (d / "level").write_text("3\n")
    (d / "type").write_text("Unified\n")
    (d / "size").write_text(f"{size}\n")
    return tmp_path / size


def _within_budget(plan: measurements.Plan):
    assert plan.memmap_descriptors * 64 <= BUDGET
    assert 2 * plan.page_copy_bytes <= BUDGET
    assert plan.largest_buffers() <= BUDGET
    assert plan.evict == "flush" and plan.budget_bytes == BUDGET
    # a folio of 512 pages fits, so "per folio" drains more than once
    assert plan.page_copy_bytes >= 2 * 512 * 4096


@pytest.mark.parametrize("size", ["256K", "8192K", "32768K", "491520K", "1966080K", "16777216K"])
def test_the_quick_plan_stays_within_its_budget_whatever_sysfs_reports(tmp_path, size):
    llc = cache_topology.last_level_cache(_sysfs_llc(tmp_path, size), environ={})
    assert llc.bytes == cache_topology.parse_size(size)
    plan = measurements.Plan.quick(llc.bytes)
    _within_budget(plan)
    cold = plan.cold_method("clflushopt")
    if 4 * llc.bytes > plan.page_copy_bytes:   # the buffers cannot evict it: the flush must
        assert "CLFLUSHOPT" in cold and f"{llc.bytes >> 20} MiB LLC" in cold
    else:
        assert "4x the" in cold


@pytest.mark.parametrize("tree", ["cache-xeon-480m", "cache-epyc-32m"])
def test_the_quick_plan_of_the_fixture_hosts_and_of_an_unknown_llc(tree):
    _within_budget(measurements.Plan.quick(cache_topology.last_level_cache(FIXTURES / tree, environ={}).bytes))
    _within_budget(measurements.Plan.quick(None))


def test_the_full_plan_is_not_the_quick_one():
    full = measurements.Plan()
    assert full.evict == "sweep" and full.memmap_descriptors * 64 > BUDGET and full.page_copy_bytes >= 1 << 30
