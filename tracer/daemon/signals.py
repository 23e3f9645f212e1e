# SPDX-License-Identifier: Apache-2.0
"""What the daemon's signals ask of its main loop: stop (SIGTERM, SIGINT)
and reload (SIGHUP).

A handler only sets a flag. Python runs signal handlers in the main thread
between bytecodes, so a handler that takes a lock deadlocks when the signal
lands while the main thread holds that very lock. threading.Event.set()
takes the lock of the Event's condition, which the main loop holds for a
moment each time its Event.wait() times out, and the daemon's handler
called it: a SIGTERM in that moment hung the daemon for good
(tests/live/test_daemon_signals.py makes it happen at will). Two lab guests'
daemons hung so, SIGTERM taken and nothing logged after it, which this
fits; it was not caught there. The loop is woken instead through
signal.set_wakeup_fd(): the interpreter's C-level handler writes the
signal's number to a socket the loop waits on, which takes no lock and
wakes the wait at once.
"""
from __future__ import annotations

import select
import signal
import socket

from nttrace.tracing.tracer import STOP_SIGNALS


class Requests:
    def __init__(self):
        self.stop = False
        self._hups = 0       # written by the handler only
        self._hups_seen = 0  # written by the main loop only: no SIGHUP is lost between a read and a reset
        self._r, self._w = socket.socketpair()
        for s in (self._r, self._w):
            s.setblocking(False)
        self._old: dict = {}
        self._old_wakeup = None

    def _on_stop(self, signum, frame):
        self.stop = True

    def _on_hup(self, signum, frame):
        self._hups += 1

    def install(self) -> "Requests":
        """Take SIGTERM, SIGINT and SIGHUP (from the main thread)."""
        self._old_wakeup = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._old = {sig: signal.signal(sig, self._on_stop) for sig in STOP_SIGNALS}
        self._old[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hup)
        return self

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds or until a signal arrives; whether
        a stop has been asked for."""
        if not self.stop:
            select.select([self._r], [], [], timeout)
            try:
                while self._r.recv(512):
                    pass
            except BlockingIOError:
                pass
        return self.stop

    def take_reload(self) -> bool:
        """Whether a reload has been asked for since the last call."""
        hups = self._hups
        asked, self._hups_seen = hups != self._hups_seen, hups
        return asked

    def close(self) -> None:
        """Put back the handlers and wakeup fd there were before install()."""
        for sig, old in self._old.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        self._old = {}
        if self._old_wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        self._r.close()
        self._w.close()
