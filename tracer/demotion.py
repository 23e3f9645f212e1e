"""A scratch demotion: a child process in its own cgroup v2 touches
anonymous memory, and `memory.reclaim` pushes it out; with
demotion_enabled=1 and a lower memory tier, reclaim demotes it
(migrate_pages() with MR_DEMOTION) instead of swapping or dropping it.
Only run on request (validate --demote); everything it changes is restored.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

DEMOTION_ENABLED = Path("/sys/kernel/mm/numa/demotion_enabled")

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
    mounts = mounts if mounts is not None else Path("/proc/mounts").read_text()
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            root = Path(parts[1])
            if "memory" in (root / "cgroup.controllers").read_text().split():
                return root
            raise DemotionUnavailable(f"cgroup v2 at {root} has no memory controller (it is on cgroup v1 here)")
    raise DemotionUnavailable("no cgroup v2 mount")


def demote_scratch(mib: int = 256, timeout_s: float = 60.0) -> dict:
    root = cgroup2_root()
    group = root / f"nttrace-demote-{os.getpid()}"
    subtree = root / "cgroup.subtree_control"
    added_memory = "memory" not in subtree.read_text().split()
    old_demotion = DEMOTION_ENABLED.read_text().strip() if DEMOTION_ENABLED.exists() else None
    child = None
    try:
        if added_memory:
            subtree.write_text("+memory")
        if old_demotion is not None and old_demotion not in ("1", "true"):
            DEMOTION_ENABLED.write_text("1")
        group.mkdir()
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
        deadline = time.monotonic() + timeout_s
        line = child.stdout.readline()
        if line.strip() != "ready" or time.monotonic() > deadline:
            raise DemotionUnavailable("scratch process did not start")
        current_before = int((group / "memory.current").read_text())
        t0 = time.monotonic()
        try:
            (group / "memory.reclaim").write_text(f"{mib}M")
        except OSError as exc:  # EAGAIN: could not reclaim all of it; what it did counts
            partial = exc.strerror
        else:
            partial = None
        elapsed = time.monotonic() - t0
        current_after = int((group / "memory.current").read_text())
        # Demoted pages stay charged to the cgroup, so memory.current need
        # not drop: the pgdemote_* counters and the probe say what moved.
        return {"cgroup": str(group), "scratch_mib": mib, "memory_current_delta_bytes": current_before - current_after,
                "reclaim_s": elapsed, "reclaim_error": partial}
    finally:
        if child is not None:
            child.kill()
            child.wait(timeout=10)
        if group.exists():
            for _ in range(50):
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
        if old_demotion is not None and old_demotion not in ("1", "true"):
            DEMOTION_ENABLED.write_text("0")
        if added_memory:
            try:
                subtree.write_text("-memory")
            except OSError:
                pass
