# SPDX-License-Identifier: Apache-2.0
"""nttrace.tracing.stop_guard: a stop signal ends the process while its main
thread is inside a C call that does not return (here libc's sleep with the
signal blocked in that thread, as a compile or bcc's drain holds it), at
once before the probes are attached and after the grace once they are. The
control: with Python's own handling alone the process is still there."""
import signal
import subprocess
import sys
import textwrap
import time

CHILD = """
    import ctypes, signal, sys
    from nttrace.tracing.stop_guard import StopGuard
    if sys.argv[1] != "no-guard":
        guard = StopGuard(grace_s=0.5).install()
        guard.attached = sys.argv[1] == "attached"
        if guard.attached:      # the Tracer's handler, holding the stop for a poll that does not return
            signal.signal(signal.SIGTERM, lambda *a: None)
    else:
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})   # this thread only: the guard's has it
    print("in C", flush=True)
    ctypes.CDLL(None).sleep(30)
"""


def run(variant: str) -> tuple[int | None, float, str]:
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), variant], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "in C\n", p.stderr.read()
        time.sleep(0.2)          # inside the C call
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=3 if variant == "no-guard" else 20)
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - t0, ""
        return p.returncode, time.monotonic() - t0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_without_the_guard_the_signal_waits_for_the_c_call():
    rc, _took, _err = run("no-guard")
    assert rc is None


def test_before_attach_the_guard_exits_at_once_with_one_line():
    rc, _took, err = run("starting")
    assert rc == 143 and err in ("nttrace: SIGTERM: stopped before the probes were attached\n",
                                 "nttrace: SIGTERM: stopped (no probe attached)\n"), err


def test_once_attached_the_guard_waits_its_grace_then_exits():
    rc, took, err = run("attached")
    assert rc == 143 and took >= 0.5, took
    assert "had not stopped 0.5 s after it" in err
