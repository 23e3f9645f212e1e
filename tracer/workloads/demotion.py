# SPDX-License-Identifier: Apache-2.0
"""A scratch demotion: a child process in its own cgroup v2 touches
anonymous memory, and `memory.reclaim` pushes it out; with
demotion_enabled=1 and a lower memory tier, reclaim demotes it
(migrate_pages() with MR_DEMOTION) instead of swapping or dropping it.
Only run on request (validate --demote); everything it changes is restored.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from nttrace.kernel import vmstat
from nttrace.workloads.scratch_cgroup import (
    NoMemoryCgroup,
    ScratchCgroup,
    memory_hierarchy,
)

DEMOTION_ENABLED = Path("/sys/kernel/mm/numa/demotion_enabled")
# /proc/vmstat's demoted-page counters, by who reclaimed (memory.reclaim is "proactive" from 6.x)
DEMOTE_COUNTERS = ("pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged", "pgdemote_proactive")


def demoted_pages(before: dict[str, int], after: dict[str, int]) -> int:
    """Pages demoted between two /proc/vmstat readings."""
    return sum(after.get(k, 0) - before.get(k, 0) for k in DEMOTE_COUNTERS)



CHILD = r"""
import mmap, os, sys
size = int(sys.argv[1]) << 20
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, size, 4096):
    m[off] = 1
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.read()
"""


class DemotionUnavailable(Exception):
    """The host cannot run the scratch demotion; the message says why."""


def cgroup2_root(mounts: str | None = None) -> Path:
    """The cgroup v2 hierarchy with the memory controller (memory.reclaim)."""
    try:
        return memory_hierarchy(mounts, need_v2=True)[0]
    except NoMemoryCgroup as exc:
        raise DemotionUnavailable(str(exc)) from None


def demote_scratch(mib: int = 256, timeout_s: float = 60.0) -> dict:
    try:
        scratch = ScratchCgroup("demote", need_v2=True)   # found before anything is changed
    except NoMemoryCgroup as exc:
        raise DemotionUnavailable(str(exc)) from None
    old_demotion = DEMOTION_ENABLED.read_text().strip() if DEMOTION_ENABLED.exists() else None
    before = vmstat.read()
    child = None
    try:
        if old_demotion is not None and old_demotion not in ("1", "true"):
            DEMOTION_ENABLED.write_text("1")
        with scratch as cg:
            try:
                child = subprocess.Popen([sys.executable, "-c", CHILD, str(mib)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, preexec_fn=cg.join)
                deadline = time.monotonic() + timeout_s
                line = child.stdout.readline()
                if line.strip() != "ready" or time.monotonic() > deadline:
                    raise DemotionUnavailable("scratch process did not start")
                current_before = cg.usage()
                t0 = time.monotonic()
                partial = cg.reclaim(mib << 20)
                elapsed = time.monotonic() - t0
                current_after = cg.usage()
            finally:
                if child is not None:
                    child.kill()
                    child.wait(timeout=10)
        # Demoted pages stay charged to the cgroup, so memory.current need
        # not drop: the pgdemote_* counters and the probe say what moved.
        return {"cgroup": str(cg.path), "scratch_mib": mib, "memory_current_delta_bytes": current_before - current_after,
                "pgdemote": demoted_pages(before, vmstat.read()),
                "reclaim_s": elapsed, "reclaim_error": partial}
    finally:
        if old_demotion is not None and old_demotion not in ("1", "true"):
            DEMOTION_ENABLED.write_text("0")
