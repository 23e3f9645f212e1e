# SPDX-License-Identifier: Apache-2.0
"""The daemon's child processes: die_with_parent (a child the daemon starts,
its loader, is killed when the daemon dies, however it dies) and free_port
(a free loopback port, for a daemon started to listen on one)."""
from __future__ import annotations

import ctypes
import signal
import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In a child before exec (preexec_fn): SIGKILL it when its parent dies,
    however the parent dies (PR_SET_PDEATHSIG)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
