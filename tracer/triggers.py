"""Workloads that make the kernel run the traced paths.

compaction() is the only trigger validate runs by default: it fragments a
scratch mapping of its own (so there is movable memory to migrate) and
writes /proc/sys/vm/compact_memory, which makes the kernel call
migrate_pages() with reason MR_COMPACTION. Nothing else is changed.
"""
from __future__ import annotations

import mmap
import time
from pathlib import Path

PAGE = 4096
COMPACT = Path("/proc/sys/vm/compact_memory")


def vmstat(path: str | Path = "/proc/vmstat") -> dict[str, int]:
    """A vmstat file (/proc/vmstat or a node's) as {counter: value}. The one
    parser of these files: the daemon's vmstat collector reads through it."""
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    return out


def compaction(scratch_mib: int = 128, settle_s: float = 0.3) -> dict:
    """Fragment `scratch_mib` of our own memory, compact all zones, and
    return the /proc/vmstat deltas of the pgmigrate/compact counters."""
    size = scratch_mib << 20
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_NOHUGEPAGE)
        for off in range(0, size, PAGE):
            m[off] = 1
        # Free every other page: the survivors are movable pages scattered
        # between free ones, which compaction migrates.
        for off in range(0, size, 2 * PAGE):
            m.madvise(mmap.MADV_DONTNEED, off, PAGE)
        before = vmstat()
        COMPACT.write_text("1\n")
        time.sleep(settle_s)
        after = vmstat()
    finally:
        m.close()
    keys = ("pgmigrate_success", "pgmigrate_fail", "compact_migrate_scanned", "compact_isolated")
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}
