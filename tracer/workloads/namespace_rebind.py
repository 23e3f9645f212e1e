# SPDX-License-Identifier: Apache-2.0
"""Rebinding a pmem namespace's driver, the seeds' memmap-init procedure:
unbind and bind nd_pmem (fsdax) or dax_pmem (devdax) and let the kernel run
memmap_init_zone_device() on each bind.

Refuses, before touching anything, a namespace whose block or dax device is
mounted, held or open: unbinding it would pull storage out from under a
user. After an error the device is bound back to its driver.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from nttrace.errors import CapabilityError, UsageError


@dataclass
class BindTarget:
    namespace: str
    device: str        # what the driver binds: namespaceX.Y, pfnX.Y or daxX.Y
    driver: str        # nd_pmem or dax_pmem
    mode: str          # fsdax or devdax (or raw)
    dev_nodes: list[str]


# The namespace's sysfs `mode` uses the kernel's older names; ndctl's (and
# the user's) are fsdax and devdax.
KERNEL_MODE_NAMES = {"memory": "fsdax", "dax": "devdax", "safe": "sector"}


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""


def resolve(namespace: str, sys_root: Path = Path("/sys")) -> BindTarget:
    nd = sys_root / "bus/nd/devices"
    ns = nd / namespace
    if not ns.is_dir():
        raise UsageError(f"--rebind {namespace}: no such namespace under {nd}")
    mode = _read(ns / "mode") or "raw"
    mode = KERNEL_MODE_NAMES.get(mode, mode)
    candidates = [ns] + [d for d in sorted(nd.iterdir())
                         if d.name.startswith(("pfn", "dax")) and _read(d / "namespace") == namespace]
    for dev in candidates:
        drv = dev / "driver"
        if drv.exists():
            driver = os.path.basename(os.path.realpath(drv))
            nodes = []
            for block in sorted((dev / "block").glob("*")) if (dev / "block").is_dir() else []:
                nodes.append(f"/dev/{block.name}")
            for dax in sorted((dev.glob("dax*/dax*"))) if dev.name.startswith("dax") else []:
                nodes.append(f"/dev/{dax.name}")
            return BindTarget(namespace, dev.name, driver, mode, nodes)
    raise UsageError(f"--rebind {namespace}: no device of this namespace is bound to a driver")


def in_use(target: BindTarget, proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> str | None:
    """Why the namespace must not be unbound, or None."""
    names = {os.path.basename(n) for n in target.dev_nodes}
    mounts = _read(proc_root / "mounts")
    for line in mounts.splitlines():
        src = line.split(" ", 1)[0]
        base = os.path.basename(src)
        if any(base == n or (base.startswith(n) and base[len(n):].lstrip("p").isdigit()) for n in names):
            return f"{src} is mounted"
    for n in names:
        holders = sys_root / "class/block" / n / "holders"
        if holders.is_dir() and any(holders.iterdir()):
            return f"/dev/{n} is held by {', '.join(h.name for h in holders.iterdir())}"
    for pid_dir in proc_root.iterdir() if proc_root.is_dir() else []:
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                try:
                    dest = os.readlink(fd)
                except OSError:
                    continue
                if os.path.basename(dest) in names:
                    return f"{dest} is open by pid {pid_dir.name}"
            maps = _read(pid_dir / "maps")
            if any(f"/dev/{n}" in maps for n in names):
                return f"/dev/{next(n for n in names if f'/dev/{n}' in maps)} is mapped by pid {pid_dir.name}"
        except OSError:
            continue
    return None


class Rebinder:
    def __init__(self, target: BindTarget, sys_root: Path = Path("/sys")):
        self.target = target
        self.driver_dir = sys_root / "bus/nd/drivers" / target.driver

    def _write(self, what: str) -> None:
        try:
            (self.driver_dir / what).write_text(self.target.device)
        except PermissionError as exc:
            raise CapabilityError(f"cannot {what} {self.target.device}: {exc.strerror}") from None
        except OSError as exc:
            raise UsageError(f"{what} {self.target.device} via {self.target.driver} failed: {exc.strerror}") from None

    def bound(self) -> bool:
        return (self.driver_dir / self.target.device).exists()

    def rebind(self) -> float:
        """Unbind and bind once; returns the bind's wall time in seconds."""
        self._write("unbind")
        t0 = time.monotonic()
        try:
            self._write("bind")
        finally:
            if not self.bound():
                try:
                    self._write("bind")
                except Exception:
                    pass
        return time.monotonic() - t0


# memmap_init_zone_device()'s own pr_debug line (dynamic debug turns it on:
# /proc/dynamic_debug/control): the descriptors it initialised (nr_pages less
# the altmap) and the jiffies between its start and end, in ms.
KERNEL_LINE = re.compile(r"memmap_init_zone_device initialised (\d+) pages in (\d+)ms")


def kernel_lines(text: str) -> list[dict]:
    """The kernel's memmap lines in a log, in order."""
    return [{"pages": int(m[1]), "ms": int(m[2])} for m in KERNEL_LINE.finditer(text)]


def kmsg_during(fn) -> tuple[object, str]:
    """fn()'s result and the kernel log records written while it ran
    (/dev/kmsg from its end; empty when the log is unreadable)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return fn(), ""
    try:
        os.lseek(fd, 0, os.SEEK_END)
        result = fn()
        records = []
        while True:
            try:
                records.append(os.read(fd, 8192).decode(errors="replace"))
            except BlockingIOError:
                break
            except OSError:   # EPIPE: records overwritten while we read; keep what came
                continue
        return result, "".join(r.split(";", 1)[-1] for r in records)
    finally:
        os.close(fd)


def rebind(namespace: str) -> dict:
    """One unbind and bind of a namespace not in use, as the memmap probe's
    workload: the bind's wall time and the descriptors the kernel's own line
    says it initialised (None where the kernel prints no such line)."""
    target = resolve(namespace)
    busy = in_use(target)
    if busy:
        raise UsageError(f"refusing to rebind {target.namespace}: {busy}")
    bind_s, log = kmsg_during(Rebinder(target).rebind)
    lines = kernel_lines(log)
    return {"namespace": target.namespace, "bind_s": bind_s, "kernel_lines": lines,
            "kernel_line_pages": sum(line["pages"] for line in lines) if lines else None}
