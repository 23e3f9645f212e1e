# SPDX-License-Identifier: Apache-2.0
"""The daemon's child processes: die_with_parent (a child the daemon starts,
its loader, is killed when the daemon dies, however it dies)."""
from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """In a child before exec (preexec_fn): SIGKILL it when its parent dies,
    however the parent dies (PR_SET_PDEATHSIG)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
