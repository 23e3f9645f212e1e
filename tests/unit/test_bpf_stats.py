# SPDX-License-Identifier: Apache-2.0
"""nttrace.kernel.bpf_stats without a kernel: the sysctl fallback where
BPF_ENABLE_STATS is missing restores the old value on close, and a run
killed while holding it on leaves a state file the next start restores."""
import errno

from nttrace.kernel import bpf_stats


def missing():
    raise OSError(errno.EINVAL, "Invalid argument")


def refused():
    raise OSError(errno.EPERM, "Operation not permitted")


def test_sysctl_fallback_restores_on_close(tmp_path):
    sysctl, state = tmp_path / "bpf_stats_enabled", tmp_path / "run" / "state.json"
    sysctl.write_text("0\n")
    hold = bpf_stats.enable(sysctl, state, missing)
    assert hold.method == "sysctl" and sysctl.read_text() == "1" and state.exists()
    hold.close()
    assert sysctl.read_text() == "0" and not state.exists() and not hold.on


def test_a_killed_run_s_sysctl_is_restored_at_the_next_start(tmp_path):
    sysctl, state = tmp_path / "bpf_stats_enabled", tmp_path / "state.json"
    sysctl.write_text("0")
    bpf_stats.enable(sysctl, state, missing)     # never closed: the process was killed
    assert sysctl.read_text() == "1"
    fd_hold = bpf_stats.enable(sysctl, state, lambda: 99)   # the next run, on a kernel with the command
    assert "restored" in fd_hold.restored and sysctl.read_text() == "0" and not state.exists()
    assert fd_hold.method == "bpf_enable_stats" and fd_hold.fd == 99


def test_a_sysctl_someone_else_turned_on_is_left_alone(tmp_path):
    sysctl, state = tmp_path / "bpf_stats_enabled", tmp_path / "state.json"
    sysctl.write_text("1")
    hold = bpf_stats.enable(sysctl, state, missing)
    assert not hold.on and "on already" in hold.reason
    hold.close()
    assert sysctl.read_text() == "1" and not state.exists()


def test_no_privilege_is_a_reason_not_an_exception(tmp_path):
    sysctl, state = tmp_path / "bpf_stats_enabled", tmp_path / "state.json"
    sysctl.write_text("0")
    hold = bpf_stats.enable(sysctl, state, refused)
    assert not hold.on and "refused" in hold.reason and sysctl.read_text() == "0"


def test_fdinfo_parsing(tmp_path):
    (tmp_path / "fdinfo").mkdir()
    (tmp_path / "fdinfo" / "7").write_text("pos:\t0\nprog_type:\t5\nrun_time_ns:\t1500\nrun_cnt:\t3\n")
    (tmp_path / "fdinfo" / "8").write_text("pos:\t0\nflags:\t02\n")
    st = bpf_stats.program_stats(7, tmp_path)
    assert (st.run_time_ns, st.run_cnt, st.ns_per_run) == (1500, 3, 500.0)
    assert bpf_stats.program_stats(8, tmp_path) is None and bpf_stats.program_stats(9, tmp_path) is None


def test_the_collector_exports_each_program_s_run_time_and_runs():
    from prometheus_client import CollectorRegistry, generate_latest

    from nttrace.exporters.bpf_program_collector import BpfProgramCollector

    class FakeTracer:
        def program_stats(self):
            return {"probe_a": {"nttrace_migrate_done": bpf_stats.ProgramStats(3_000_000_000, 12),
                                "nttrace_migrate_start": bpf_stats.ProgramStats(500, 12)}}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BpfProgramCollector(FakeTracer(), bpf_stats.Hold("bpf_enable_stats", fd=-1)))
    text = generate_latest(reg).decode()
    assert 'nttrace_bpf_program_run_seconds_total{probe="probe_a",program="nttrace_migrate_done"} 3.0' in text
    assert 'nttrace_bpf_program_runs_total{probe="probe_a",program="nttrace_migrate_start"} 12.0' in text
    assert 'nttrace_bpf_stats_enabled{method="bpf_enable_stats"} 1.0' in text
