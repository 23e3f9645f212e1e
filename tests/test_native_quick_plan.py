"""The native reference's quick plan (validate --quick's native.nt_benefit)
is bounded by its budget whatever LLC /sys reports, and makes its cells cold
another way where the budget cannot exceed the LLC; `bench native` states
its plan, progress, wall time and peak memory."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import one_line_error, run_nttrace
from nttrace.kernel import cache_topology
from nttrace.reference import measurements

FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
BUDGET = measurements.QUICK_BUDGET_BYTES
# What the whole native.nt_benefit run (Python, bcc's capability report, the
# plan's buffers) may hold at its peak: the 200 MiB for validate --quick.
PEAK_RSS_MIB = 200


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


@pytest.mark.needs("root", "btf", "tracefs", "bcc")
@pytest.mark.parametrize("emulated", [None, "32M"], ids=["this-hosts-llc", "emulated-32MiB-llc"])
def test_nt_benefit_runs_in_budget_and_says_how_its_cells_went_cold(emulated):
    env = dict(os.environ)
    env.pop(cache_topology.ENV, None)
    if emulated:
        env[cache_topology.ENV] = emulated
    exe = str(Path(sys.executable).with_name("nttrace"))
    # a fresh interpreter per measurement, so RUSAGE_CHILDREN holds this run only
    code = ("import resource, subprocess, sys, json; p = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
            "print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr,"
            " 'rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))")
    proc = subprocess.run([sys.executable, "-c", code, exe, "validate", "--quick", "--check", "native.nt_benefit",
                           "--json"], capture_output=True, text=True, env=env, timeout=300)
    res = json.loads(proc.stdout)
    assert res["rc"] == 0, res["err"]
    check = json.loads(res["out"])["checks"][0]
    plan = check["evidence"]["plan"]
    assert plan["budget_bytes"] == BUDGET and plan["memmap_bytes"] <= BUDGET and 2 * plan["page_copy_bytes"] <= BUDGET
    llc = plan["llc"]
    if emulated:
        assert llc["emulated"] and llc["bytes"] == 32 << 20 and "emulated" in llc["source"]
    else:
        assert not llc["emulated"] and llc["bytes"] == cache_topology.last_level_cache(environ={}).bytes
    assert "before every cell" in plan["cold"] and ("CLFLUSH" in plan["cold"])
    assert res["rss"] <= PEAK_RSS_MIB, f"native.nt_benefit peaked at {res['rss']:.0f} MiB"


def test_a_bad_emulated_llc_is_one_line_and_exit_2():
    env = dict(os.environ, **{cache_topology.ENV: "huge"})
    proc = run_nttrace("validate", "--quick", "--check", "native.nt_benefit", env=env)
    assert proc.returncode == 2
    assert cache_topology.ENV in one_line_error(proc)


@pytest.mark.needs("root")
def test_bench_native_prints_progress_wall_time_and_peak_memory():
    proc = run_nttrace("bench", "native", "--quick", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    progress = [line for line in proc.stderr.splitlines() if line.startswith("... ")]
    assert [line.split()[1] for line in progress] == ["correctness", "copy_table", "fixed_size_nt", "memmap_model",
                                                        "page_copy", "store_forwarding", "mixed_nt"]
    assert all("peak RSS" in line for line in progress)
    assert "quick plan" in proc.stderr and "LLC" in proc.stderr
    run = report["run"]
    assert 0 < run["wall_s"] < 600 and PEAK_RSS_MIB >= run["peak_rss_mib"] > 10
    assert report["method"]["evict"] == "flush" and report["method"]["largest_buffers_bytes"] <= BUDGET
    assert report["memmap_model"]["movnti_write_limit_ms"] > 0 and report["memmap_model"]["template_movnti_ms"] > 0
