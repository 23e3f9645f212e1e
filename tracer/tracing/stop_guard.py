# SPDX-License-Identifier: Apache-2.0
"""StopGuard: a stop signal ends `nttrace trace` within STOP_GRACE_S,
whatever its main thread is doing.

Python runs a signal's handler in the main thread, between bytecodes: while
that thread is inside one C call (bcc compiling a program, clang under a
kernel build: seconds; bcc draining a perf buffer) the handler waits for the
call to return. The interpreter's C-level handler, though, writes the
signal's number to the wakeup fd (signal.set_wakeup_fd) at once, and a
thread waiting on that fd wakes:

* before the probes are attached (compiling, loading, attaching), nothing the
  process holds outlives it (nothing is pinned: its programs and links go
  with its descriptors), so the guard exits the process at once, 128 +
  the signal, after its cleanups (a half-written --record-maps file);
* once attached, the main thread's own handling (Tracer: detach, the summary)
  normally ends the process; if it has not within STOP_GRACE_S, the guard
  exits it, and the kernel detaches what its descriptors held.

The handlers it installs exist so the wakeup fd is written (the C handler
runs only for signals with a Python handler) and so a SIGINT ignored by the
shell that started the process (a background job) still stops it.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE_S = 1.5


class StopGuard:
    def __init__(self, grace_s: float = STOP_GRACE_S, cleanups=()):
        self.grace_s = grace_s
        self.cleanups = list(cleanups)
        self.attached = False          # set by the caller once its probes are attached
        self._exiting = threading.Lock()
        self._r = self._w = None
        self._old_wakeup = None
        self._old: dict = {}

    def install(self) -> "StopGuard":
        """From the main thread, before anything is compiled."""
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)
        self._old_wakeup = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._old = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        threading.Thread(target=self._watch, name="nttrace-stop-guard", daemon=True).start()
        return self

    def _on_signal(self, signum, frame):
        # the main thread, in Python code, before a Tracer took the signal over
        self._exit(signum, "(no probe attached)")

    def _watch(self) -> None:
        while True:
            try:
                data = self._r.recv(64)
            except OSError:
                return
            if not data:
                return
            stops = [b for b in data if b in STOP_SIGNALS]
            if not stops:
                continue
            if not self.attached:
                self._exit(stops[0], "before the probes were attached")
            time.sleep(self.grace_s)     # the main thread's own stop normally ends the process first
            if self._w is None:          # closed: the command ended on its own (a caller that goes on)
                return
            self._exit(stops[0], f"the main thread had not stopped {self.grace_s:.1f} s after it")

    def _exit(self, signum: int, why: str) -> None:
        if not self._exiting.acquire(blocking=False):
            return
        for cleanup in self.cleanups:
            try:
                cleanup()
            except Exception:
                pass
        os.write(2, f"nttrace: {signal.Signals(signum).name}: stopped {why}\n".encode())
        os._exit(128 + signum)

    def close(self) -> None:
        """Put back the wakeup fd and the handlers there were (a normal end)."""
        if self._w is None:
            return
        signal.set_wakeup_fd(self._old_wakeup if self._old_wakeup is not None else -1)
        for sig, old in self._old.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, signal.SIG_DFL if old is None else old)
        self._w.close()        # the watching thread sees EOF and ends
        self._w = None
