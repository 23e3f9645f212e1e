# SPDX-License-Identifier: Apache-2.0
"""Workloads that make the kernel run the traced paths.

compaction() fragments a scratch mapping of its own (so there is movable
memory to migrate) and writes /proc/sys/vm/compact_memory, which makes the
kernel call migrate_pages() with reason MR_COMPACTION.

memcg_reclaim() fills a memory cgroup of its own with the page cache of a
scratch file and has the kernel reclaim it (cgroup v2: memory.reclaim; v1:
memory.force_empty), which runs memcg reclaim episodes. The cgroup and the
file are removed afterwards, whatever happens. Nothing else is changed.
"""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

from nttrace.kernel import PAGE, vmstat

COMPACT = Path("/proc/sys/vm/compact_memory")


def compaction(scratch_mib: int = 128, settle_s: float = 0.3) -> dict:
    """Fragment `scratch_mib` of our own memory, compact all zones, and
    return the /proc/vmstat deltas of the pgmigrate/compact counters over
    the whole call, and how long the compact_memory write took (it compacts
    every zone in the writing task before it returns)."""
    size = scratch_mib << 20
    before = vmstat.read()
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_NOHUGEPAGE)
        for off in range(0, size, PAGE):
            m[off] = 1
        # Free every other page: the survivors are movable pages scattered
        # between free ones, which compaction migrates.
        for off in range(0, size, 2 * PAGE):
            m.madvise(mmap.MADV_DONTNEED, off, PAGE)
        t0, c0 = time.perf_counter(), time.thread_time()
        COMPACT.write_text("1\n")
        compact_s, compact_cpu_s = time.perf_counter() - t0, time.thread_time() - c0
        time.sleep(settle_s)
        after = vmstat.read()
    finally:
        m.close()
    keys = ("pgmigrate_success", "pgmigrate_fail", "compact_migrate_scanned", "compact_isolated")
    return {**{k: after.get(k, 0) - before.get(k, 0) for k in keys}, "compact_s": compact_s,
            "compact_cpu_s": compact_cpu_s}


READER = "import sys\nf = open(sys.argv[1], 'rb')\nwhile f.read(1 << 20):\n    pass\n"   # the child that caches the file


def memcg_reclaim(scratch_dir: str | Path = "/var/tmp", scratch_mib: int = 64) -> dict:
    """Cache `scratch_mib` of a new file from a child process inside a scratch
    memory cgroup, then have the kernel reclaim that cgroup. Returns what the
    kernel says it reclaimed: "pgsteal" (cgroup v2: the cgroup's memory.stat
    pgsteal delta) and "usage_drop_pages" (charged bytes before less after,
    in pages). Raises scratch_cgroup.NoMemoryCgroup when there is none."""
    from nttrace.workloads.scratch_cgroup import ScratchCgroup

    scratch = Path(scratch_dir) / f".nttrace-reclaim-{os.getpid()}"
    with ScratchCgroup("reclaim") as cg:
        try:
            with open(scratch, "wb") as f:
                block = os.urandom(1 << 20)
                for _ in range(scratch_mib):
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)   # read back below, charged to cg
            subprocess.run([sys.executable, "-c", READER, str(scratch)], preexec_fn=cg.join, check=True, timeout=120)
            before, steal_before = cg.usage(), cg.stat("pgsteal")
            t0 = time.monotonic()
            partial = cg.reclaim(before)
            elapsed = time.monotonic() - t0
            after, steal_after = cg.usage(), cg.stat("pgsteal")
        finally:
            try:
                scratch.unlink()
            except OSError:
                pass
    return {"cgroup_version": cg.version, "interface": cg.interface, "cached_pages": before // PAGE,
            "usage_drop_pages": (before - after) // PAGE, "reclaim_s": round(elapsed, 4), "reclaim_error": partial,
            "pgsteal": (steal_after - steal_before) if steal_before is not None and steal_after is not None else None}
