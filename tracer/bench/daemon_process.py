# SPDX-License-Identifier: Apache-2.0
"""Running `nttrace daemon` as a child process, the way systemd would: a
free loopback port, a NOTIFY_SOCKET this side reads, bounded waits for
READY and friends. Used by `nttrace bench daemon`, the lab's guest
scenarios and the tests."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from nttrace.probes import DEFAULT

NTTRACE = str(Path(sys.executable).with_name("nttrace"))


def free_port() -> int:
    """A free loopback port, for a daemon started to listen on one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kernel_stacks(pid: int) -> str:
    """Each thread of `pid`: its name, state, wait channel and kernel stack
    (/proc/PID/task/TID/{comm,stat,wchan,stack}; the stack needs root), or
    what could not be read."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*"), key=lambda t: int(t.name)):
        def read(name: str) -> str:
            try:
                return (task / name).read_text(errors="replace").strip()
            except OSError as exc:
                return f"({name}: {exc.strerror})"
        state = read("stat").rpartition(")")[2].split()[:1]
        out.append(f"thread {task.name} {read('comm')} state {''.join(state)} wchan {read('wchan')}\n{read('stack')}")
    return "\n".join(out) or f"(no /proc/{pid}/task)"


class DaemonProcess:
    def __init__(self, tmp: Path, config_text: str | None = None, prefix: list[str] | None = None,
                 watchdog_usec: int | None = None):
        self.tmp = tmp
        self.port = free_port()
        self.context = None       # an ssl.SSLContext: get() speaks HTTPS with it
        self.auth_headers: dict = {}   # sent by get() when it is given no headers
        self.config = tmp / "nttrace.toml"
        self.config.write_text(config_text if config_text is not None else self.default_config())
        self.notify_path = str(tmp / "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._closing = False
        self.stuck: str | None = None   # kernel_stacks() of a daemon that did not stop in time
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path)
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        self.log = open(tmp / "daemon.log", "w+")
        self.started = time.monotonic()
        self.proc = subprocess.Popen((prefix or []) + [NTTRACE, "daemon", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        # Read the notify socket all the time, as systemd does: a reader that
        # stops reading lets the socket's queue fill.
        self._reader = threading.Thread(target=self._read_notify, name="notify-reader", daemon=True)
        self._reader.start()

    def _read_notify(self) -> None:
        while not self._closing:
            try:
                data = self.notify.recv(4096).decode()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._cond:
                self.messages.append((time.monotonic(), data))
                self._cond.notify_all()

    def default_config(self, probes=DEFAULT, perf=()) -> str:
        return (f'listen = "127.0.0.1:{self.port}"\nlog_level = "info"\n'
                f"probes = {list(probes)!r}\nperf = {list(perf)!r}\n").replace("'", '"')

    def wait_message(self, prefix: str, timeout: float = 60.0) -> float:
        """Seconds from start until a notify message starting with `prefix`."""
        deadline = time.monotonic() + timeout
        exited_at = None
        with self._cond:
            while True:
                for t, m in self.messages:
                    if m.startswith(prefix):
                        return t - self.started
                now = time.monotonic()
                if self.proc.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > 0.5:   # what it sent before exiting has been read
                        raise AssertionError(f"daemon exited {self.proc.returncode} before {prefix}: {self.read_log()}")
                if now >= deadline:
                    raise AssertionError(f"no {prefix} within {timeout}s: {self.read_log()}")
                self._cond.wait(min(0.1, deadline - now))

    def get(self, path: str, headers: dict | None = None, timeout: float = 5.0) -> tuple[int, str]:
        scheme = "https" if self.context is not None else "http"
        req = urllib.request.Request(f"{scheme}://127.0.0.1:{self.port}{path}", headers=self.auth_headers if headers is None else headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.context) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name: str, **labels) -> float | None:
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                series, _, value = line.rpartition(" ")
                got = series[len(name):].strip("{}")
                if all(f'{k}="{v}"' in got.split(",") for k, v in labels.items()) or (not labels and not got):
                    return float(value)
        return None

    def read_log(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=None, timeout: float = 10.0) -> float:
        """Signal the daemon (SIGTERM) and wait for it to exit; the seconds
        that took. One that outlives `timeout` has its threads' kernel
        stacks read into self.stuck (where it waits), then is killed, and
        subprocess.TimeoutExpired is raised."""
        if self.proc.poll() is None:
            t0 = time.monotonic()
            self.proc.send_signal(sig or signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stuck = kernel_stacks(self.proc.pid)
                self.proc.kill()
                self.proc.wait()
                raise
            return time.monotonic() - t0
        return 0.0

    def close(self):
        try:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        finally:
            self._closing = True
            self._reader.join(timeout=2)
            self.notify.close()
            self.log.close()
