# SPDX-License-Identifier: Apache-2.0
"""perf_event_open(2) through ctypes: the counting path used when the `perf`
Python binding has no counting API (Debian 12's binding has `evsel.open` but
no `evsel.read`)."""
from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT, PERF_TYPE_HW_CACHE, PERF_TYPE_RAW = 0, 1, 2, 3, 4

PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS = 0, 1
PERF_COUNT_HW_CACHE_REFERENCES, PERF_COUNT_HW_CACHE_MISSES = 2, 3
PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK, PERF_COUNT_SW_PAGE_FAULTS = 0, 1, 2

# Generic cache events: config = id | (op << 8) | (result << 16)
PERF_COUNT_HW_CACHE_LL = 2
PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_OP_WRITE = 0, 1
PERF_COUNT_HW_CACHE_RESULT_MISS = 1

PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING = 1, 2

_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5
_NR_perf_event_open = 298  # x86_64

_FLAG_DISABLED = 1 << 0
_FLAG_INHERIT = 1 << 1
_FLAG_EXCLUDE_HV = 1 << 6

PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401
PERF_EVENT_IOC_RESET = 0x2403

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def cache_config(cache: int, op: int, result: int) -> int:
    return cache | (op << 8) | (result << 16)


@dataclass(frozen=True)
class EventSpec:
    """One perf_event_attr, described the way `perf list` names it."""

    name: str
    type: int
    config: int
    config1: int = 0
    config2: int = 0

    def attr_bytes(self, disabled: bool = True, inherit: bool = True) -> bytes:
        flags = _FLAG_EXCLUDE_HV
        if disabled:
            flags |= _FLAG_DISABLED
        if inherit:
            flags |= _FLAG_INHERIT
        read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
        head = struct.pack(
            "<IIQQQQQIIQQ",
            self.type, _ATTR_SIZE, self.config,
            0,            # sample_period
            0,            # sample_type
            read_format,
            flags,
            0, 0,         # wakeup_events, bp_type
            self.config1, self.config2,
        )
        return head.ljust(_ATTR_SIZE, b"\0")


class PerfOpenError(OSError):
    pass


def open_event(spec: EventSpec, pid: int = 0, cpu: int = -1, disabled: bool = True, inherit: bool = True) -> int:
    """Open a counting event; returns the fd. Raises PerfOpenError with errno."""
    buf = ctypes.create_string_buffer(spec.attr_bytes(disabled, inherit), _ATTR_SIZE)
    fd = _libc.syscall(_NR_perf_event_open, buf, ctypes.c_int(pid), ctypes.c_int(cpu), ctypes.c_int(-1), ctypes.c_ulong(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise PerfOpenError(err, f"perf_event_open({spec.name}): {errno.errorcode.get(err, err)} ({os.strerror(err)})")
    return fd


def ioctl(fd: int, request: int) -> None:
    if _libc.ioctl(ctypes.c_int(fd), ctypes.c_ulong(request), ctypes.c_ulong(0)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def read_counter(fd: int) -> tuple[int, int, int]:
    """(value, time_enabled, time_running) of an fd opened by open_event."""
    data = os.read(fd, 24)
    return struct.unpack("<QQQ", data)


def probe(spec: EventSpec, pid: int = 0, cpu: int = -1) -> str | None:
    """None when the event opens on this host, else the errno reason."""
    try:
        fd = open_event(spec, pid=pid, cpu=cpu)
    except PerfOpenError as exc:
        return exc.strerror
    os.close(fd)
    return None
