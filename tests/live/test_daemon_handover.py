# SPDX-License-Identifier: Apache-2.0
"""The daemon without a compiler: a loader process compiles and attaches the
probes, hands their descriptors over (SCM_RIGHTS) and exits; the daemon
reads the maps with bpf(2). Killed with SIGKILL at any point of start-up,
daemon or loader, nothing stays attached."""
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import held_by, nttrace_programs
from nttrace.bench.daemon_process import DaemonProcess
from nttrace.bench.daemon_process import free_port

from lab.lab_checks import wait_until

LIVE = ("root", "tracepoint", "bcc", "bpftool")
PROBES = '["migrate", "reclaim"]'


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def loader_of(pid: int) -> int | None:
    for child in children(pid):
        try:
            if b"nttrace.daemon.loader" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except OSError:
            pass
    return None


def wait_for(what, timeout: float = 60.0):
    return wait_until(what, timeout, step=0.02)


def detached_within(seconds: float) -> float | None:
    """Seconds until bpftool lists no nttrace program, None if not by then."""
    t0 = time.monotonic()
    while time.monotonic() - t0 <= seconds:
        if not nttrace_programs():
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture
def start(tmp_path):
    made = []

    def go():
        assert not nttrace_programs(), "an nttrace program is attached before the test:\n" + held_by()
        sub = tmp_path / f"d{len(made)}"
        sub.mkdir()
        d = DaemonProcess(sub, config_text=f'listen = "127.0.0.1:{free_port()}"\nprobes = {PROBES}\n')
        made.append(d)
        return d
    yield go
    for d in made:
        d.close()


# Start-up points at which the daemon is killed: what to wait for first.
DAEMON_POINTS = {
    "at exec": lambda d: True,
    "with its loader running": lambda d: loader_of(d.proc.pid),
    "once a program is attached": lambda d: nttrace_programs(),
    "after READY": lambda d: any(m.startswith("READY=1") for _t, m in d.messages),
}


@pytest.mark.needs(*LIVE)
@pytest.mark.parametrize("point", list(DAEMON_POINTS))
def test_kill_9_of_the_daemon_leaves_nothing_attached(start, point):
    d = start()
    assert wait_for(lambda: DAEMON_POINTS[point](d)), f"never reached: {point}\n{d.read_log()}"
    loader = loader_of(d.proc.pid)
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait(timeout=10)
    took = detached_within(2.0)
    assert took is not None, f"{point}:\n{held_by()}"
    if loader is not None:   # the loader dies with the daemon (PR_SET_PDEATHSIG)
        assert wait_for(lambda: not alive(loader), timeout=2.0), f"loader {loader} outlived the daemon"


LOADER_POINTS = {
    "as it starts": lambda d: True,
    "after a program is attached": lambda d: nttrace_programs(),
}


@pytest.mark.needs(*LIVE)
@pytest.mark.parametrize("point", list(LOADER_POINTS))
def test_kill_9_of_the_loader_fails_the_start_and_leaves_nothing_attached(start, point):
    d = start()
    loader = wait_for(lambda: loader_of(d.proc.pid))
    assert loader, d.read_log()
    if not wait_for(lambda: LOADER_POINTS[point](d) and loader_of(d.proc.pid)):
        pytest.fail(f"the loader finished before {point}: {d.read_log()}")
    os.kill(loader, signal.SIGKILL)
    t0 = time.monotonic()
    assert detached_within(2.0) is not None, held_by()
    d.proc.wait(timeout=30)
    log = d.read_log()
    assert d.proc.returncode == 4, log
    assert "the loader exited before it finished" in log and "Traceback" not in log, log
    assert time.monotonic() - t0 < 30 and not nttrace_programs(), held_by()


@pytest.mark.needs(*LIVE)
def test_the_daemon_maps_no_compiler_and_its_loader_is_gone(start):
    d = start()
    d.wait_message("READY=1", timeout=120)
    maps = Path(f"/proc/{d.proc.pid}/maps").read_text()
    assert "libbcc" not in maps and "libLLVM" not in maps and "libclang" not in maps
    assert loader_of(d.proc.pid) is None and children(d.proc.pid) == []
    # the programs are attached and counted by the daemon's descriptors alone
    names = {n for _i, n in nttrace_programs()}
    assert {"nttrace_migrate_start", "nttrace_migrate_done", "nttrace_reclaim_memcg_end"} <= names, names
    fds = {os.readlink(f) for f in Path(f"/proc/{d.proc.pid}/fd").iterdir() if f.exists()}
    assert "anon_inode:bpf-map" in fds and "anon_inode:[perf_event]" in fds, fds
    assert "released): attached migrate, reclaim" in d.read_log()
    d.stop()
    assert detached_within(2.0) is not None, held_by()


@pytest.mark.needs(*LIVE)
def test_bench_daemon_reports_the_daemon_and_its_loader():
    import json

    from conftest import run_nttrace
    proc = run_nttrace("bench", "daemon", "--requests", "40", "--idle", "1", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["ready_s"] > 0 and r["scrapes"] == 40 and 0 < r["scrape_ms"]["p50"] <= r["scrape_ms"]["p99"]
    # the compiler's memory was the loader's, and left with it
    assert r["loader_peak_mib"] * 1024 > 2 * r["rss_kib_after_load"] >= 2 * r["rss_kib_idle"] > 0, r
    assert not nttrace_programs(), held_by()
