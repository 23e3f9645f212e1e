# SPDX-License-Identifier: Apache-2.0
"""The reclaim probe on this host's kernel: memcg reclaim episodes of a
scratch cgroup, counted as the cgroup counts them; its table and metrics."""
import io
import json

import pytest

from conftest import bpftool_prog_ids, programs_left, run_nttrace
from nttrace.capabilities import report as capabilities
from nttrace.kernel import metadata as kernel_meta
from nttrace.workloads import triggers
from nttrace import bpf as bpf_sources
from nttrace.probe_framework.contract import row_value
from nttrace.probe_framework.exercise import compare
from nttrace.kernel.sysroot import Sysroot
from nttrace.trace_cmd import print_table
from nttrace.tracing.tracer import Tracer
from nttrace.probes.reclaim import ReclaimProbe


@pytest.fixture(scope="module")
def reclaimed():
    """One scratch-cgroup reclaim traced by the reclaim probe: (run, snapshot)."""
    caps = capabilities.report()
    with Tracer([ReclaimProbe.name], caps=caps, meta=kernel_meta.load(Sysroot("/"))) as t:
        run = triggers.memcg_reclaim(scratch_mib=32)
        snap = t.snapshot()[ReclaimProbe.name]
    return run, snap


@pytest.mark.needs("root", "tracefs", "bcc", "memcg")
def test_memcg_reclaim_pages_are_the_cgroups_own_count(reclaimed):
    run, snap = reclaimed
    assert snap["status"] == "attached" and snap["via"] == "tracepoint"
    rows = {r["kind"]: r for r in snap["rows"]}
    # a row for each kind the program counts, named as its RECLAIM_* #defines
    assert list(rows) == [k.removeprefix("RECLAIM_").lower() for k, _v in sorted(
        ((k, v) for k, v in bpf_sources.defines(ReclaimProbe.source).items() if k.startswith("RECLAIM_")), key=lambda kv: kv[1])]
    memcg = rows["memcg"]
    # the file's 32 MiB were cached in the cgroup and reclaimed from it
    assert run["cached_pages"] >= 32 * 256 and memcg["episodes"] >= 1
    assert 32 * 256 <= memcg["reclaimed"] <= run["cached_pages"]
    # the probe's count against the cgroup's, as the probe's contract compares them
    obs = compare(ReclaimProbe.name, ReclaimProbe.exercise, run, snap)
    assert obs.seen == memcg["reclaimed"] and obs.truth is not None and obs.agrees, (obs.describe(), run)
    lat = memcg["latency_ns"]
    assert lat["count"] == memcg["episodes"] and 0 < lat["p50"] <= lat["max"]
    assert sum(int(v) for v in lat["log2_buckets"].values()) == memcg["episodes"]
    # nothing here demotes (one NUMA node), and no episode ended unseen
    assert all(r["demoted"] == 0 for r in rows.values()) and memcg["unpaired"] == 0


@pytest.mark.needs("root", "tracefs", "bcc", "memcg")
def test_reclaim_rows_print_under_the_probes_columns(reclaimed):
    _run, snap = reclaimed
    out = io.StringIO()
    print_table({ReclaimProbe.name: snap}, 1.0, out)
    lines = out.getvalue().splitlines()
    assert lines[1] == "  reclaim (via tracepoint)"
    assert lines[2].split() == ["KIND", "EPISODES", "RECLAIMED", "DEMOTED", "P50", "us", "MAX", "us"]
    memcg = next(line.split() for line in lines[3:] if line.split()[0] == "memcg")
    row = next(r for r in snap["rows"] if r["kind"] == "memcg")
    assert memcg[1:4] == [str(row["episodes"]), str(row["reclaimed"]), "0"]


@pytest.mark.needs("root", "tracefs", "bcc", "memcg", "bpftool")
def test_validate_reclaim_check_passes_and_detaches():
    before = bpftool_prog_ids()
    proc = run_nttrace("validate", "--check", "probe.reclaim", "--json", timeout=180)
    report = json.loads(proc.stdout)
    (c,) = report["checks"]
    assert c["id"] == "probe.reclaim" and c["status"] == "pass", c
    assert next(r for r in c["evidence"]["rows"] if r["kind"] == "memcg")["reclaimed"] > 0
    assert {p for p in programs_left(before) if p[1].startswith("nttrace")} == set()


@pytest.mark.needs("root", "tracefs", "bcc", "memcg")
def test_reclaim_declarations_hold_on_this_kernel(reclaimed):
    """What the probe declares is what it does here: each declared
    tracepoint is in this kernel's tracefs, and each metric and column reads
    a key every row of its snapshot carries."""
    _run, snap = reclaimed
    tracefs = Sysroot("/").tracefs()
    assert all((tracefs / "events" / s / e / "format").exists() for s, e in ReclaimProbe.tracepoints)
    for row in snap["rows"]:
        for m in ReclaimProbe.metrics:
            assert row_value(row, m.value) is not None and all(row_value(row, k) is not None for _l, k in m.labels), m
        assert all(row_value(row, c.key) is not None or c.key.startswith("latency_ns.") for c in ReclaimProbe.columns)


@pytest.mark.needs("root", "tracefs", "bcc", "memcg")
def test_the_reclaim_check_gives_the_figure_an_ab_tests():
    """`validate --exercise reclaim` as a loop's boot runs it: probe.reclaim
    gives its primary figure, the memcg episodes' median latency, which is
    the probe's own histogram's. Fails if the check's primary figure rests
    on per-call records this probe never keeps (every boot of a loop with
    --exercise reclaim a failed measurement)."""
    from nttrace.ab import measured
    from nttrace.validate import evidence
    proc = run_nttrace("validate", "--check", "probe.reclaim", "--exercise", "reclaim", "--json", timeout=300)
    check = json.loads(proc.stdout)["checks"][0]
    assert check["status"] == "pass", check["summary"]
    assert measured.unmeasured({"checks": [check]}, ["probe.reclaim"]) is None
    primary = [f for f in evidence.of(check).figures() if f.role == "primary"]
    memcg = next(r for r in check["evidence"]["rows"] if r["kind"] == "memcg")
    assert [(f.metric, f.value) for f in primary] == [("episodes.p50_ms", memcg["latency_ns"]["p50"] / 1e6)]
