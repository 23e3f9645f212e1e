# SPDX-License-Identifier: Apache-2.0
"""systemd's notification protocol (sd_notify(3)) without libsystemd: one
datagram per message to $NOTIFY_SOCKET. A no-op outside systemd.

A send never blocks the daemon for long: a datagram socket whose reader has
stopped reading fills up (net.unix.max_dgram_qlen, 10 by default) and a
blocking send would then hang the main loop, reloads and SIGTERM included.
So a message that cannot be queued within SEND_TIMEOUT_S is dropped and the
call returns False. systemd reads its socket at once; only a stuck or absent
reader loses messages."""
from __future__ import annotations

import os
import socket

SEND_TIMEOUT_S = 0.25


def notify(message: str) -> bool:
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        s.settimeout(SEND_TIMEOUT_S)
        try:
            s.connect(path)
            s.sendall(message.encode())
        except OSError:
            return False
    return True


def watchdog_interval_s() -> float | None:
    """Half of WatchdogSec when systemd asks for pings (WATCHDOG_USEC), for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1e6 / 2
