# SPDX-License-Identifier: Apache-2.0
"""The kernel's run-time statistics while nttrace runs: the daemon holds
them on by BPF_ENABLE_STATS, exports each program's run time and runs, and
they go back to what they were when it stops, by SIGTERM or SIGKILL."""
import signal
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nttrace.bench.daemon_process import DaemonProcess
from nttrace.kernel import bpf_stats
from nttrace.probes.migrate import MigrateProbe
from nttrace.workloads import triggers

LIVE = ("root", "tracepoint", "bcc")


def samples(d: DaemonProcess) -> dict:
    code, body = d.get("/metrics")
    assert code == 200
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.fixture
def prior():
    return bpf_stats.sysctl_value()


@pytest.fixture
def witness():
    """A probe of the test's own on the migrate tracepoints, with nothing
    holding statistics on for it: whether its run_cnt grows over a
    compaction says whether anyone has the kernel's statistics on (the
    sysctl does not show a BPF_ENABLE_STATS hold)."""
    from nttrace.tracing.tracer import Tracer
    t = Tracer([MigrateProbe.name], handle_signals=False).attach()

    def stats_on() -> bool:
        def runs():
            return sum(st.run_cnt for progs in t.program_stats().values() for st in progs.values())
        before = runs()
        for _ in range(3):
            triggers.compaction(scratch_mib=32, settle_s=0.05)
            if runs() > before:
                return True
        return False
    try:
        if stats_on():
            pytest.skip("something else holds BPF run-time statistics on: nothing to see turn off")
        yield stats_on
    finally:
        t.detach()


@pytest.mark.needs(*LIVE)
def test_scrape_after_a_compaction_has_each_program_s_runs_and_the_events_they_saw(tmp_path, prior, witness):
    d = DaemonProcess(tmp_path)   # the default probes: the migrate probe
    try:
        d.wait_message("READY=1")
        assert witness()          # the daemon holds them on
        triggers.compaction()
        m = samples(d)
        assert [v for labels, v in m["nttrace_bpf_stats_enabled"] if labels["method"] == "bpf_enable_stats"] == [1.0]
        runs = {l["program"]: v for l, v in m["nttrace_bpf_program_runs_total"] if l["probe"] == MigrateProbe.name}
        secs = {l["program"]: v for l, v in m["nttrace_bpf_program_run_seconds_total"] if l["probe"] == MigrateProbe.name}
        assert set(runs) == {fn for _s, _e, fn in MigrateProbe.programs} == set(secs)
        assert all(v > 0 for v in runs.values()) and all(v > 0 for v in secs.values()), (runs, secs)
        # every run of the done program lands in one row, as a paired call or
        # an unpaired one; the maps are read before the programs' counters
        done = MigrateProbe.programs[-1][2]
        events = sum(v for _l, v in m["nttrace_migrate_calls_total"]) + \
            sum(v for _l, v in m["nttrace_migrate_unpaired_total"])
        assert events > 0
        assert events <= runs[done] <= events * 1.05 + 10, (events, runs)
        assert runs[MigrateProbe.programs[0][2]] >= 0.95 * events - 10      # a start for (nearly) every done
        per_run_ns = secs[done] * 1e9 / runs[done]
        assert 1 < per_run_ns < 1e6, per_run_ns
    finally:
        d.stop()
        d.close()
    assert not witness()          # off again with the daemon
    assert bpf_stats.sysctl_value() == prior


@pytest.mark.needs(*LIVE)
def test_statistics_go_back_off_after_sigkill(tmp_path, prior, witness):
    d = DaemonProcess(tmp_path)   # the default probes: the migrate probe
    try:
        d.wait_message("READY=1")
        assert witness()
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
        time.sleep(0.5)           # its loader child, if any, dies with it (PDEATHSIG)
        assert not witness()
        assert bpf_stats.sysctl_value() == prior
    finally:
        d.close()
