# SPDX-License-Identifier: Apache-2.0
"""The CPU's last-level cache, as the kernel reports it under
/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size} (the highest
level that holds data), or as NTTRACE_LLC_SIZE emulates it.

The native reference sizes and describes its cold-cache measurements by the
LLC. NTTRACE_LLC_SIZE (bytes, or with a K/M/G suffix: "32M") stands in for
what /sys reports, so a test or a benchmark can run the plan a smaller or
larger LLC would get. It emulates the size only, not a different CPU: the
caches the copies run through are still this CPU's, and the result says so
(`emulated`, and /sys's own figure beside it).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from nttrace.errors import UsageError

ENV = "NTTRACE_LLC_SIZE"
CACHE_DIR = "devices/system/cpu/cpu0/cache"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class LastLevelCache:
    bytes: int | None           # what the plan uses (None: unknown)
    level: int | None           # the cache level /sys reports for it
    source: str                 # where `bytes` came from, in words
    emulated: bool = False      # True when NTTRACE_LLC_SIZE set it
    reported_bytes: int | None = None  # what /sys reports, emulated or not

    def as_json(self) -> dict:
        return {"bytes": self.bytes, "level": self.level, "source": self.source, "emulated": self.emulated,
                "reported_bytes": self.reported_bytes}


def parse_size(text: str) -> int:
    """'491520K' (sysfs), '32M', '32MiB', '33554432' -> bytes; ValueError otherwise."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def reported(sys_dir: Path | str = "/sys") -> tuple[int, int, str] | None:
    """(bytes, level, directory) of the highest data-holding cache level /sys
    lists for CPU 0, or None where it lists none (containers, some VMs)."""
    base = Path(sys_dir) / CACHE_DIR
    best = None
    try:
        entries = sorted(base.glob("index*"))
    except OSError:
        return None
    for d in entries:
        try:
            level = int((d / "level").read_text())
            size = parse_size((d / "size").read_text())
            kind = (d / "type").read_text().strip() if (d / "type").exists() else "Unified"
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size <= 0:
            continue
        if best is None or level > best[1] or (level == best[1] and size > best[0]):
            best = (size, level, str(d))
    return best


def last_level_cache(sys_dir: Path | str = "/sys", environ=None) -> LastLevelCache:
    """The LLC the native reference plans for: NTTRACE_LLC_SIZE where set
    (emulated), else what /sys reports. A bad NTTRACE_LLC_SIZE is a usage
    error (exit 2), never silently ignored."""
    environ = os.environ if environ is None else environ
    sysfs = reported(sys_dir)
    override = environ.get(ENV)
    if override is not None:
        try:
            size = parse_size(override)
        except ValueError:
            raise UsageError(f"{ENV}={override!r}: not a cache size (bytes, or with K, M or G: 32M)") from None
        if size <= 0:
            raise UsageError(f"{ENV}={override!r}: a cache size must be above 0")
        said = f"{sysfs[0] >> 20} MiB L{sysfs[1]}" if sysfs else "no LLC"
        return LastLevelCache(size, sysfs[1] if sysfs else None,
                              f"{ENV}={override} (emulated: the size only, on this CPU, whose /sys reports {said})",
                              emulated=True, reported_bytes=sysfs[0] if sysfs else None)
    if sysfs is None:
        return LastLevelCache(None, None, f"not reported ({Path(sys_dir) / CACHE_DIR} lists no cache)")
    return LastLevelCache(sysfs[0], sysfs[1], sysfs[2], reported_bytes=sysfs[0])
