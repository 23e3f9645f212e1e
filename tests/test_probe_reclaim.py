"""The reclaim probe on this host's kernel: memcg reclaim episodes of a
scratch cgroup, counted as the cgroup counts them; its table and metrics."""
import io
import json

import pytest

from conftest import bpftool_prog_ids, run_nttrace
from nttrace.probes import capabilities
from nttrace.kernel import metadata as kernel_meta
from nttrace.workloads import triggers
from nttrace.probes import PROBES
from nttrace.kernel.sysroot import Sysroot
from nttrace.trace_cmd import print_table
from nttrace.probes.tracer import Tracer


@pytest.fixture(scope="module")
def reclaimed():
    """One scratch-cgroup reclaim traced by the reclaim probe: (run, snapshot)."""
    caps = capabilities.report()
    with Tracer(["reclaim"], caps=caps, meta=kernel_meta.load(Sysroot("/"))) as t:
        run = triggers.memcg_reclaim(scratch_mib=32)
        snap = t.snapshot()["reclaim"]
    return run, snap


@pytest.mark.needs("root", "tracefs", "bcc", "memcg")
def test_memcg_reclaim_pages_are_the_cgroups_own_count(reclaimed):
    run, snap = reclaimed
    assert snap["status"] == "attached" and snap["via"] == "tracepoint"
    rows = {r["kind"]: r for r in snap["rows"]}
    assert list(rows) == ["direct", "memcg", "node", "kswapd"]
    memcg = rows["memcg"]
    # the file's 32 MiB were cached in the cgroup and reclaimed from it
    assert run["cached_pages"] >= 32 * 256 and memcg["episodes"] >= 1
    expected = run["pgsteal"] if run["pgsteal"] is not None else run["usage_drop_pages"]
    assert 32 * 256 <= memcg["reclaimed"] <= run["cached_pages"]
    assert abs(memcg["reclaimed"] - expected) <= max(0.05 * expected, 32), (memcg, run)
    lat = memcg["latency_ns"]
    assert lat["count"] == memcg["episodes"] and 0 < lat["p50"] <= lat["max"]
    assert sum(int(v) for v in lat["log2_buckets"].values()) == memcg["episodes"]
    # nothing here demotes (one NUMA node), and no episode ended unseen
    assert all(r["demoted"] == 0 for r in rows.values()) and memcg["unpaired"] == 0


@pytest.mark.needs("root", "tracefs", "bcc", "memcg")
def test_reclaim_rows_print_under_the_probes_columns(reclaimed):
    _run, snap = reclaimed
    out = io.StringIO()
    print_table({"reclaim": snap}, 1.0, out)
    lines = out.getvalue().splitlines()
    assert lines[1] == "  reclaim (via tracepoint)"
    assert lines[2].split() == ["KIND", "EPISODES", "RECLAIMED", "DEMOTED", "P50", "us", "MAX", "us"]
    memcg = next(line.split() for line in lines[3:] if line.split()[0] == "memcg")
    row = next(r for r in snap["rows"] if r["kind"] == "memcg")
    assert memcg[1:4] == [str(row["episodes"]), str(row["reclaimed"]), "0"]


@pytest.mark.needs("root", "tracefs", "bcc", "memcg", "bpftool")
def test_validate_reclaim_check_passes_and_detaches():
    before = bpftool_prog_ids()
    proc = run_nttrace("validate", "--check", "kernel.reclaim_observed", "--json", timeout=180)
    report = json.loads(proc.stdout)
    (c,) = report["checks"]
    assert c["id"] == "kernel.reclaim_observed" and c["status"] == "pass", c
    assert c["evidence"]["memcg"]["reclaimed"] > 0
    assert {p for p in bpftool_prog_ids() - before if p[1].startswith("nttrace")} == set()


def test_reclaim_declares_what_it_attaches_to_and_exports():
    probe = PROBES["reclaim"]
    events = {e for _s, e in probe.tracepoints}
    for kind in ("direct_reclaim", "memcg_reclaim", "node_reclaim"):
        assert {f"mm_vmscan_{kind}_begin", f"mm_vmscan_{kind}_end"} <= events
    assert {"mm_vmscan_kswapd_wake", "mm_vmscan_kswapd_sleep", "mm_migrate_pages"} <= events
    assert {m.name for m in probe.metrics} == {
        "nttrace_reclaim_episodes", "nttrace_reclaim_pages", "nttrace_reclaim_demoted_pages",
        "nttrace_reclaim_unpaired", "nttrace_reclaim_duration_seconds"}
    assert all(dict(m.labels) == {"kind": "kind"} for m in probe.metrics)
