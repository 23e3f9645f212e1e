# SPDX-License-Identifier: Apache-2.0
"""The probes on this host's real kernel: tracepoints, uprobes, compaction."""
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import bpftool_prog_ids, held_by, one_line_error, programs_left, run_nttrace
from nttrace.capabilities import report as capabilities
from nttrace.probes import PROBES
from nttrace.kernel import vmstat
from nttrace.kernel import metadata as kernel_meta
from nttrace.reference import native
from nttrace.workloads import triggers
from nttrace.kernel.sysroot import Sysroot
from nttrace.tracing.tracer import Tracer
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.page_ref import PageRefProbe


@pytest.fixture(scope="module")
def caps():
    return capabilities.report()


@pytest.fixture(scope="module")
def meta():
    return kernel_meta.load(Sysroot("/"))


@pytest.mark.needs("root", "tracepoint", "bcc")
def test_migrate_probe_pages_equal_vmstat_delta(caps, meta):
    with Tracer([MigrateProbe.name], caps=caps, meta=meta) as t:
        before = vmstat.read()
        for _attempt in range(3):   # pages to compare: whether a compaction finds any to move is the host's state
            triggers.compaction()
            after = vmstat.read()
            if after["pgmigrate_success"] > before["pgmigrate_success"]:
                break
        snap = t.snapshot()[MigrateProbe.name]
    delta = after["pgmigrate_success"] - before["pgmigrate_success"]
    assert delta > 0, "three compactions migrated no page: nothing to compare the probe's count with"
    assert snap["status"] == "attached" and snap["via"] == "tracepoint"
    assert not meta.btf_parsed  # released once the programs loaded (the daemon keeps running)
    rows = snap["rows"]
    assert sum(r["succeeded"] for r in rows) == delta
    assert sum(r["failed"] for r in rows) == after["pgmigrate_fail"] - before["pgmigrate_fail"]
    compaction = [r for r in rows if r["reason"] == "MR_COMPACTION"]
    assert compaction and compaction[0]["mode"] == "MIGRATE_SYNC" and compaction[0]["nt"] is False
    lat = compaction[0]["latency_ns"]
    assert lat["count"] == compaction[0]["calls"] >= 1
    assert 0 < lat["p50"] <= lat["max"] and lat["p99"] <= lat["max"]


def wait_attached(proc, probe=MigrateProbe, timeout: float = 60) -> None:
    """Until the trace process holds a program on each of the probe's
    tracepoints (bpftool's list of perf-event attachments, by process), not
    a sleep that hopes so."""
    want = {event for _system, event in probe.tracepoints}
    held: set = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"trace ended, attached to {sorted(held)} of {sorted(want)}: {proc.communicate()}"
        out = subprocess.run(["bpftool", "-j", "perf"], capture_output=True, text=True, check=True).stdout
        held = {a.get("tracepoint") for a in json.loads(out or "[]") if a["pid"] == proc.pid}
        if want <= held:
            return
        time.sleep(0.05)
    raise AssertionError(f"nttrace trace attached to {sorted(held)} of {sorted(want)} within the bound")


@contextlib.contextmanager
def attached_trace(*args: str):
    """`nttrace trace ARGS` started, waited for until its programs are loaded;
    yields (the process, the programs before it). A trace still running when
    the block ends (a test failed, or it ignored its signal) is killed, so
    none outlives its test."""
    before = bpftool_prog_ids()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("nttrace")), "trace", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_attached(proc)
        yield proc, before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_trace_cli_json_during_compaction():
    with attached_trace("--probes", MigrateProbe.name, "--duration", "5", "--json") as (proc, _before):
        triggers.compaction()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["duration_s"] >= 5
    mig = report["probes"][MigrateProbe.name]
    assert mig["status"] == "attached"
    row = next(r for r in mig["rows"] if r["reason"] == "MR_COMPACTION")
    assert row["mode"] == "MIGRATE_SYNC" and row["nt"] is False and row["calls"] >= 1
    for key in ("count", "p50", "p99", "max"):
        assert row["latency_ns"][key] is not None
    for key in ("succeeded", "failed"):
        assert isinstance(row[key], int)


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_trace_record_writes_json_lines(tmp_path):
    rec = tmp_path / "calls.jsonl"
    with attached_trace("--probes", MigrateProbe.name, "--duration", "4", "--json", "--record", str(rec)) as (proc, _):
        triggers.compaction()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    summary = json.loads(out)["probes"][MigrateProbe.name]
    assert len(lines) == sum(r["calls"] for r in summary["rows"]) >= 1
    assert {"ts_ns", "pid", "latency_ns", "mode", "reason", "nt", "succeeded", "failed"} <= set(lines[0])
    assert sum(x["succeeded"] for x in lines) == sum(r["succeeded"] for r in summary["rows"] if r["calls"])


@pytest.mark.needs("root", "uprobe", "bcc", "bpftool")
def test_latency_machinery_agrees_with_the_models_own_clock(caps, meta):
    # The memmap probe's program, attached by uprobe to the native model: the
    # same entry/exit pairing, maps and records the kernel attach uses.
    nr = 1 << 20
    before = bpftool_prog_ids()
    with native.Buffer(nr * 64, fill=0) as buf:
        with Tracer([MemmapProbe.name], options={MemmapProbe.name: {"target": "native"}}, caps=caps, meta=meta) as t:
            assert t.status[MemmapProbe.name] == {"status": "attached", "via": "uprobe"}
            own = []
            for i in range(20):
                run = native.memmap_init(buf, nr, 64, "FS_DAX", 9 if i % 2 else 0,
                                         "slow" if i % 3 == 0 else "template_nt")
                own.append(run.elapsed_ns)
            records = []
            for _ in range(20):
                t.poll(timeout_ms=100)
                records.extend(t.records())
                if len(records) >= 20:
                    break
            snap = t.snapshot()[MemmapProbe.name]
    assert t.detach_errors == {}            # bcc's cleanup ran through
    assert programs_left(before) == set()   # the Tracer's exit let its uprobe and uretprobe programs go
    assert len(records) == 20
    # in time order: records come CPU buffer by CPU buffer, so a run that
    # migrated between the two CPUs of a loaded host arrives out of turn
    records.sort(key=lambda r: r["ts_ns"])
    for rec, mine in zip(records, own):
        assert rec["nr_pages"] == nr and rec["pgmap_type"] == "FS_DAX"
        assert abs(rec["latency_ns"] - mine) <= 0.10 * mine, (rec["latency_ns"], mine)
    assert {r["vmemmap_shift"] for r in records} == {0, 9}
    row = snap["rows"][0]
    assert row["calls"] == 20 and row["pages"] == 20 * nr
    assert abs(row["latency_ns"]["mean"] - sum(own) / 20) <= 0.10 * sum(own) / 20
    assert sum(row["latency_ns"]["log2_buckets"].values()) == 20    # the row's hist[] counted every call


@pytest.mark.needs("root", "uprobe", "bcc", "bpftool")
@pytest.mark.parametrize("closed_first", [False, True])
def test_a_cleanup_that_fails_part_way_still_unloads_every_program(caps, meta, closed_first):
    """bcc's cleanup stops at the first attachment it cannot close and leaves
    the others, and every program, open: in a daemon that outlives a reload.
    Here its second uprobe detach fails for real reasons' stand-in (a raise
    after the first has gone): the Tracer still unloads both programs and
    says which probe's cleanup failed. closed_first: the failing detach
    closed its perf event before it raised (bcc's bpf_detach_uprobe failing
    after bpf_close_perf_event_fd), and the process reused the number for a
    file of its own: that file stays open."""
    before = bpftool_prog_ids()
    reused = []
    t = Tracer([MemmapProbe.name], options={MemmapProbe.name: {"target": "native"}}, caps=caps, meta=meta)
    t.attach()
    b = t.probes[MemmapProbe.name].bpf
    assert {n for _i, n in bpftool_prog_ids() - before} == {"nttrace_memmap_entry", "nttrace_memmap_return"}
    real, done = b.detach_uprobe_event, []

    def second_fails(ev_name):
        if done:
            if closed_first:
                number = b.uprobe_fds[ev_name]
                os.close(number)
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, number)      # the number, now one of this process's own files
                os.close(null)
                reused.append(number)
            raise Exception("Failed to detach BPF from uprobe")
        done.append(ev_name)
        real(ev_name)

    b.detach_uprobe_event = second_fails
    t.detach()
    assert done and t.detach_errors == {MemmapProbe.name: "Exception: Failed to detach BPF from uprobe"}
    assert programs_left(before) == set()
    assert t.probes[MemmapProbe.name].bpf is None
    assert len(reused) == int(closed_first)
    for number in reused:
        assert os.readlink(f"/proc/self/fd/{number}") == "/dev/null"   # not closed on bcc's behalf
        os.close(number)


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_no_program_stays_attached_after_trace():
    before = bpftool_prog_ids()
    proc = run_nttrace("trace", "--probes", ",".join((MigrateProbe.name, MemmapProbe.name, PageRefProbe.name, CopyProbe.name)), "--duration", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert programs_left(before) == set()


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_a_program_found_attached_is_named_with_the_process_that_holds_it():
    """What a test that finds an nttrace program attached says (conftest's
    held_by, programs_left): each program with the pid, command and command
    line of the process holding it, so that one another run left is named."""
    with attached_trace("--probes", MigrateProbe.name) as (proc, before):
        said = held_by({p for p in bpftool_prog_ids() - before if p[1].startswith("nttrace")})
        proc.terminate()
        proc.wait(timeout=60)
    mine = [line for line in said.splitlines() if f" held by pid {proc.pid} (nttrace): " in line]   # another run's are its own
    assert {line.split()[2] for line in mine} == {"nttrace_migrate_start", "nttrace_migrate_done"}, said
    assert all(line.endswith(f"trace --probes {MigrateProbe.name}") for line in mine), said
    assert held_by(set()) == "no nttrace program loaded"


@pytest.mark.needs("root", "uprobe", "bcc")
def test_a_signal_during_a_record_callback_still_stops_the_poll(caps, meta, monkeypatch):
    """bcc hands each record to Python through a ctypes callback, and ctypes
    prints and drops an exception raised there: a SIGINT whose handler ran
    inside the callback was lost, and `trace --record` ran on attached. The
    Tracer holds it until the poll returns, then raises it."""
    import signal
    handler_before = signal.getsignal(signal.SIGINT)
    delivered = []
    on_record = MemmapProbe._on_record

    def on_record_then_interrupted(self, *args):
        on_record(self, *args)
        os.kill(os.getpid(), signal.SIGINT)
        delivered.append(sum(range(1000)))   # bytecode for the handler to run on, inside the callback

    monkeypatch.setattr(MemmapProbe, "_on_record", on_record_then_interrupted)   # before bcc wraps it
    with native.Buffer(1 << 16, fill=0) as buf:
        with Tracer([MemmapProbe.name], options={MemmapProbe.name: {"target": "native"}}, caps=caps, meta=meta) as t:
            native.memmap_init(buf, 1 << 10, 64, "FS_DAX", 0, "slow")
            with pytest.raises(KeyboardInterrupt):
                for _ in range(50):
                    t.poll(timeout_ms=100)
            assert delivered, "no record reached the callback"
    assert signal.getsignal(signal.SIGINT) is handler_before


@pytest.mark.needs("root", "bcc", "no-kprobe-fentry")   # where they attach: the lab's tests
def test_kernel_function_probes_report_why_they_are_unavailable(caps, meta):
    with Tracer([MigrateProbe.name, MemmapProbe.name, CopyProbe.name, PageRefProbe.name], caps=caps, meta=meta) as t:
        for name in (MemmapProbe.name, CopyProbe.name):
            assert t.status[name]["status"] == "unavailable"
            assert "kprobe" in t.status[name]["reason"]
        if not caps["tracepoint:page_ref:page_ref_set"].available:
            assert "page_ref_set" in t.status[PageRefProbe.name]["reason"]
        assert t.status[MigrateProbe.name]["status"] == "attached"


@pytest.mark.needs("root", "uprobe", "bcc")
def test_memmap_records_carry_the_jiffies_each_call_spans(caps, meta):
    nr = 1 << 23  # 512 MiB of descriptors: tens of milliseconds, several ticks
    with native.Buffer(nr * 64, fill=0) as buf:
        with Tracer([MemmapProbe.name], options={MemmapProbe.name: {"target": "native"}}, caps=caps, meta=meta) as t:
            run = native.memmap_init(buf, nr, 64, "FS_DAX", 0, "slow")
            records = []
            for _ in range(20):
                t.poll(timeout_ms=100)
                records.extend(t.records())
                if records:
                    break
    (rec,) = records
    ms = run.elapsed_ns / 1e6
    # Linux ticks at 100..1000 Hz: a call of `ms` milliseconds spans between
    # ms/10 and ms/1 jiffies, give or take the tick at either end.
    assert ms / 10 - 1 <= rec["jiffies"] <= ms + 1, (rec["jiffies"], ms)


class _FtraceInstance:
    """A private ftrace buffer (tracefs instances/) with the migrate events on:
    the kernel's own record of every call, to hold the probe against."""

    def __init__(self, tracefs, name="nttrace-test"):
        self.dir = tracefs / "instances" / name
        if self.dir.exists():
            self.dir.rmdir()
        self.dir.mkdir()

    def __enter__(self):
        for event in ("mm_migrate_pages_start", "mm_migrate_pages"):
            (self.dir / "events" / "migrate" / event / "enable").write_text("1")
        return self

    def __exit__(self, *exc):
        for event in ("mm_migrate_pages_start", "mm_migrate_pages"):
            (self.dir / "events" / "migrate" / event / "enable").write_text("0")

    def lines(self, pid: int) -> list[str]:
        return [x for x in (self.dir / "trace").read_text().splitlines()
                if not x.startswith("#") and f"-{pid} " in x.split("[")[0] + " "]

    def remove(self):
        self.dir.rmdir()


@pytest.mark.needs("root", "tracepoint", "bcc")
def test_every_call_is_paired_with_its_start(caps, meta):
    """The in-flight table pairs each start with its done: for the calls this
    process makes (compaction runs in the task that writes compact_memory),
    the probe emits one record per call the kernel's own ftrace buffer shows,
    with the same page counts in the same order."""
    instance = _FtraceInstance(Sysroot("/").tracefs())
    try:
        with Tracer([MigrateProbe.name], options={MigrateProbe.name: {"records": True}}, caps=caps, meta=meta) as t:
            with instance:
                triggers.compaction(scratch_mib=32)
            time.sleep(0.2)
            t.poll(200)
            records = [r for r in t.records() if r["pid"] == os.getpid()]
        lines = instance.lines(os.getpid())
    finally:
        instance.remove()
    starts = [x for x in lines if "mm_migrate_pages_start:" in x]
    dones = [x for x in lines if "mm_migrate_pages:" in x]
    assert len(starts) == len(dones) >= 1
    assert len(records) == len(dones)
    kernel_succeeded = [int(x.split("nr_succeeded=")[1].split()[0]) for x in dones]
    assert [r["succeeded"] for r in records] == kernel_succeeded
    assert all(r["latency_ns"] > 0 for r in records)


@pytest.mark.needs("root", "tracepoint", "uprobe", "bcc", "bpftool")
def test_bench_probes_reports_each_program_against_references_measured_alone():
    before = bpftool_prog_ids()
    proc = run_nttrace("bench", "probes", "--events", "200", "--rounds", "1", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    mig = report[MigrateProbe.name]
    assert mig["status"] == "measured"
    (row,) = mig["rounds"]
    assert set(row["order"]) == {"probe", "empty", "clock_only"}
    names = {p["name"] for p in mig["programs"]}
    assert names == {"nttrace_migrate_start", "nttrace_migrate_done"}
    for subject in row["order"]:
        programs = row[f"{subject}_programs"]
        assert sum(p["run_cnt"] for p in programs) >= 2 * 200 and all(p["run_time_ns"] > 0 for p in programs)
        assert row[subject] == sum(p["run_time_ns"] for p in programs) / sum(p["run_cnt"] for p in programs)
    assert mig["ratio_to_clock_only"] == row["probe"] / row["clock_only"]
    mm = report[MemmapProbe.name]   # by uprobe on the native model (its exercise's bench options)
    assert mm["status"] == "measured" and sum(p["run_cnt"] for p in mm["programs"]) >= 200
    # every probe has its row: measured, or why not on this host
    assert set(report) == set(PROBES)
    for name, r in report.items():
        assert r["status"] == "measured" or r["reason"], (name, r)
    assert programs_left(before) == set()


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_bench_overhead_interleaves_probes_and_none_and_detaches():
    """Each run is checked whole. Whether a compaction moves anything is the
    host's state, not the bench's: compaction moves the movable pages below
    the point where its two scanners meet, and the scratch mapping's pages
    can all lie above it. The cold CI run of d95534d (2026-12-03, AMD EPYC
    2-core VM) saw four compactions in a row move 0 pages (and 704 to 70,791
    pages by hand just after); the CI run of e19e9d1 (2026-12-06) saw three
    64 MiB runs move none. So a run that moved nothing is repeated with a
    scratch four times larger (64, 256, 1024 MiB: more of it lands low in
    the zone, and taking it frees page cache for the free scanner), and one
    of the three must move pages."""
    moved = []
    for scratch_mib in (64, 256, 1024):
        moved.append(_bench_overhead_run_checked(scratch_mib=scratch_mib))
        if moved[-1]:
            break
    assert moved[-1] > 0, f"no compaction moved a page in {len(moved)} bench runs (64 to 1024 MiB scratch)"


def _bench_overhead_run_checked(per_round: int = 2, scratch_mib: int = 64) -> int:
    """One `bench overhead` run on compaction, checked; the pages it moved."""
    before = bpftool_prog_ids()
    proc = run_nttrace("bench", "overhead", "--rounds", "2", "--per-round", str(per_round),
                       "--scratch-mib", str(scratch_mib), "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["probes"] == [MigrateProbe.name] and r["attached"] == {MigrateProbe.name: "tracepoint"}
    assert [row["order"] for row in r["rounds"]] == [["probes", "none"], ["none", "probes"]]
    for row in r["rounds"]:
        for cond in ("probes", "none"):
            assert row[cond]["pages"] >= 0 and row[cond]["seconds"] > 0
            assert row[cond]["pages_per_s"] == row[cond]["pages"] / row[cond]["seconds"]
            runs = row[cond]["runs"]
            assert len(runs) == per_round and sum(p for p, _s in runs) == row[cond]["pages"]
            assert sum(s for _p, s in runs) == pytest.approx(row[cond]["seconds"])
        a, b = row["probes"]["pages_per_s"], row["none"]["pages_per_s"]
        # a condition that moved nothing gives no ratio, not a wrong one
        assert row["ratio"] == (a / b if a and b else None)
    ratios = [row["ratio"] for row in r["rounds"] if row["ratio"]]
    assert r["median_ratio"] == (pytest.approx(sum(ratios) / len(ratios)) if ratios else None)
    assert programs_left(before) == set()
    return sum(row[c]["pages"] for row in r["rounds"] for c in ("probes", "none"))


@pytest.mark.needs("root", "bcc")
def test_bench_overhead_on_demotion_runs_where_the_host_can_demote_else_says_why():
    """--work demotion needs a lower memory tier and cgroup v2's
    memory.reclaim: where the host has both it runs (the lab's guest runs it
    at length), where it lacks one the run stops at once with exit 3 and the
    reason, before anything is attached."""
    from nttrace.workloads import demotion
    tiers = capabilities.report(live_probes=False)["numa:tiers"]
    try:
        demotion.cgroup2_root()
        no_v2 = None
    except demotion.DemotionUnavailable as exc:
        no_v2 = str(exc)
    before = bpftool_prog_ids()
    proc = run_nttrace("bench", "overhead", "--work", "demotion", "--rounds", "1", "--per-round", "1",
                       "--scratch-mib", "16", "--json", timeout=600)
    assert programs_left(before) == set()
    if not tiers.available:
        assert proc.returncode == 3 and "no lower memory tier" in one_line_error(proc)
    elif no_v2:
        assert proc.returncode == 3 and no_v2 in one_line_error(proc)
    else:
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout)
        assert r["work"] == "demotion" and all(row[c]["pages"] > 0 for row in r["rounds"] for c in ("probes", "none"))


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_trace_records_its_maps_and_they_replay_to_what_it_printed(tmp_path):
    from nttrace.tracing.tracer import replay
    import signal
    out = tmp_path / "maps.json"
    # stopped by Ctrl-C once it has seen compactions: under load (a guest
    # booting beside the suite) attaching can take longer than any fixed sleep
    with attached_trace("--probes", MigrateProbe.name, "--json", "--record-maps", str(out)) as (proc, _):
        for _ in range(2):
            triggers.compaction(scratch_mib=32)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    printed = json.loads(stdout)["probes"][MigrateProbe.name]
    recording = json.loads(out.read_text())
    assert recording["settled"] and sum(r["calls"] for r in printed["rows"]) > 0
    assert replay(recording)[MigrateProbe.name] == printed
    assert not list(tmp_path.glob("*.tmp"))
