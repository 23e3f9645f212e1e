# SPDX-License-Identifier: Apache-2.0
"""A scratch memory cgroup: made for one workload and removed after it,
whatever happens (with the memory controller switched back off in the root's
subtree_control when nttrace switched it on). On cgroup v2 when its root
offers the memory controller, else on v1's memory hierarchy."""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")


class NoMemoryCgroup(Exception):
    """No hierarchy with the memory controller is usable; the message says why."""


def memory_hierarchy(mounts: str | None = None, need_v2: bool = False) -> tuple[Path, int]:
    """(mount point, version) of a hierarchy with the memory controller."""
    mounts = mounts if mounts is not None else MOUNTS.read_text()
    v1 = None
    why = "no cgroup v2 mount"
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, fstype, opts = Path(parts[1]), parts[2], parts[3].split(",")
        if fstype == "cgroup2":
            try:
                if "memory" in (where / "cgroup.controllers").read_text().split():
                    return where, 2
            except OSError:
                continue
            why = f"cgroup v2 at {where} has no memory controller (it is on cgroup v1 here)"
        elif fstype == "cgroup" and "memory" in opts and v1 is None:
            v1 = (where, 1)
    if need_v2:
        raise NoMemoryCgroup(why)
    if v1 is None:
        raise NoMemoryCgroup(f"no cgroup hierarchy has the memory controller ({why}; no v1 memory hierarchy)")
    return v1


class ScratchCgroup:
    """with ScratchCgroup("reclaim") as cg: ... cg.path, cg.version."""

    def __init__(self, purpose: str, need_v2: bool = False):
        self.root, self.version = memory_hierarchy(need_v2=need_v2)
        self.path = self.root / f"nttrace-{purpose}-{os.getpid()}"
        self._enabled_memory = False

    def __enter__(self) -> "ScratchCgroup":
        if self.version == 2:
            subtree = self.root / "cgroup.subtree_control"
            if "memory" not in subtree.read_text().split():
                subtree.write_text("+memory")
                self._enabled_memory = True
        try:
            self.path.mkdir()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for _ in range(100):   # its tasks have exited; the cgroup empties at once, or within moments
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
        self._restore()

    def _restore(self) -> None:
        if self._enabled_memory:
            try:
                (self.root / "cgroup.subtree_control").write_text("-memory")
            except OSError:
                pass
            self._enabled_memory = False

    def join(self) -> None:
        """Move the calling process in (from a child, before its work)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def usage(self) -> int:
        """Bytes charged to the cgroup."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text())

    def stat(self, key: str) -> int | None:
        for line in (self.path / "memory.stat").read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return None

    def reclaim(self, nbytes: int) -> str | None:
        """Have the kernel reclaim up to nbytes from the cgroup (v2:
        memory.reclaim; v1: memory.force_empty, which reclaims all of it).
        None, or the kernel's reason when it could not reclaim everything
        asked (EAGAIN), which still counts what it did."""
        try:
            if self.version == 2:
                (self.path / "memory.reclaim").write_text(f"{nbytes}\n")
            else:
                (self.path / "memory.force_empty").write_text("0\n")
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                raise
            return exc.strerror
        return None

    @property
    def interface(self) -> str:
        return "memory.reclaim" if self.version == 2 else "memory.force_empty"
