# SPDX-License-Identifier: Apache-2.0
"""The daemon's signal handling (nttrace.daemon.signals) against the
deadlock it replaced: a handler that calls threading.Event.set() while the
main thread is inside Event.wait() holding the Event's lock waits for
itself forever. A main loop that waits with no timeout at all holds that
lock most of the time, so a SIGTERM sent at any moment lands in it often:
the old way hangs within a few tries (the control: this harness can see a
hang), the daemon's way exits every time."""
import signal
import subprocess
import sys
import textwrap
import time

CHILD = {
    # what service.py did before: stop_event.set() in the handler, the loop in stop_event.wait()
    "event": """
        import signal, threading
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        print("up", flush=True)
        while not stop.wait(0):
            pass
    """,
    # what it does now
    "requests": """
        from nttrace.daemon.signals import Requests
        requests = Requests().install()
        print("up", flush=True)
        while not requests.wait(0):
            pass
        requests.close()
    """,
}


def sigterm_outcomes(kind: str, tries: int, stop_at_first_hang: bool) -> tuple[int, int]:
    """(tries made, tries whose child did not exit within 3 s of SIGTERM)."""
    hung = 0
    for n in range(1, tries + 1):
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD[kind])], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline() == "up\n"
            time.sleep(0.02)
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=3)
            assert p.returncode == 0, p.returncode
        except subprocess.TimeoutExpired:
            hung += 1
            if stop_at_first_hang:
                return n, hung
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return tries, hung


def test_a_handler_that_sets_an_event_can_deadlock_the_main_thread():
    tries, hung = sigterm_outcomes("event", 60, stop_at_first_hang=True)
    assert hung == 1, f"no hang in {tries} tries: the harness cannot tell the fix from the bug"


def test_the_daemons_handlers_never_deadlock_the_main_thread():
    tries, hung = sigterm_outcomes("requests", 150, stop_at_first_hang=False)
    assert hung == 0, f"{hung} of {tries} children did not exit within 3 s of SIGTERM"


def test_a_sighup_between_two_looks_is_taken_once_and_none_is_lost():
    from nttrace.daemon.signals import Requests
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    r = Requests().install()
    try:
        assert not r.take_reload()
        signal.raise_signal(signal.SIGHUP)
        signal.raise_signal(signal.SIGHUP)
        t0 = time.monotonic()
        assert not r.wait(5.0) and time.monotonic() - t0 < 1.0   # the wakeup fd ends the wait at once
        assert r.take_reload() and not r.take_reload()
        signal.raise_signal(signal.SIGTERM)
        assert r.wait(0) and r.stop
        assert signal.set_wakeup_fd(-1) == r._w.fileno()
    finally:
        r.close()
    # what there was before is back: the handlers, and no wakeup fd (-1 set above and restored by close())
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert signal.set_wakeup_fd(-1) == -1
