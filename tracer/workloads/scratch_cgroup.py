# SPDX-License-Identifier: Apache-2.0
"""A scratch memory cgroup: made for one workload and removed after it,
whatever happens (with the memory controller switched back off in its
parent's subtree_control when nttrace switched it on). On cgroup v2 when
its root offers the memory controller, else on v1's memory hierarchy.

Its parent: the hierarchy's root; or, where the service manager delegated
this process's own cgroup to it (a systemd unit with Delegate=memory, which
says so with NTTRACE_DELEGATED_CGROUP=1: nttrace-validate.service), that
cgroup, so that the unit needs write access to its own subtree only, never
to the root's (systemd's "i-like-islands" delegation: the delegated cgroup
then holds no process itself, cgroup v2's no-internal-process rule, so this
process moves into a leaf of it, DELEGATED_LEAF, first)."""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")
OWN_CGROUP = Path("/proc/self/cgroup")
DELEGATED = "NTTRACE_DELEGATED_CGROUP"
DELEGATED_LEAF = "nttrace"


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


def own_cgroup(root: Path, own: str | None = None) -> Path:
    """This process's cgroup v2 directory under the hierarchy mounted at ROOT
    (from /proc/self/cgroup's "0::/path" line, or OWN's text)."""
    own = own if own is not None else OWN_CGROUP.read_text()
    for line in own.splitlines():
        if line.startswith("0::"):
            return root / line[3:].strip().lstrip("/")
    raise NoMemoryCgroup("no cgroup v2 entry in /proc/self/cgroup")


def scratch_parent(root: Path, version: int, environ=None, own: str | None = None) -> Path:
    """Where a scratch cgroup goes: this process's own cgroup when its
    service manager delegated it (DELEGATED set, cgroup v2), else the root."""
    environ = os.environ if environ is None else environ
    if version == 2 and environ.get(DELEGATED) == "1":
        parent = own_cgroup(root, own)
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            raise NoMemoryCgroup(f"the delegated cgroup {parent} has no memory controller (the unit's Delegate=)")
        return parent
    return root


class ScratchCgroup:
    """with ScratchCgroup("reclaim") as cg: ... cg.path, cg.version."""

    def __init__(self, purpose: str, need_v2: bool = False):
        self.root, self.version = memory_hierarchy(need_v2=need_v2)
        self.parent = scratch_parent(self.root, self.version)
        self.path = self.parent / f"nttrace-{purpose}-{os.getpid()}"
        self._enabled_memory = False

    def __enter__(self) -> "ScratchCgroup":
        if self.parent != self.root:
            self._leave_delegated_cgroup()
        if self.version == 2:
            subtree = self.parent / "cgroup.subtree_control"
            if "memory" not in subtree.read_text().split():
                subtree.write_text("+memory")
                self._enabled_memory = True
        try:
            self.path.mkdir()
        except BaseException:
            self._restore()
            raise
        return self

    def _leave_delegated_cgroup(self) -> None:
        """Every process of the delegated cgroup (this one, and any child it
        has) into its leaf DELEGATED_LEAF, so that the delegated cgroup may
        enable a controller for its children; they stay there."""
        leaf = self.parent / DELEGATED_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (self.parent / "cgroup.procs").read_text().split():
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except ProcessLookupError:
                pass      # exited meanwhile

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
                (self.parent / "cgroup.subtree_control").write_text("-memory")
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
