# SPDX-License-Identifier: Apache-2.0
"""Resolving a pmem namespace to the device its driver binds, and refusing
to unbind one that is in use. Trees are built the way libnvdimm lays out
/sys/bus/nd (namespaceX.Y, pfnX.Y for fsdax map=dev, daxX.Y for devdax).
validate --rebind of a missing namespace on this host: tests/live/test_validate.py."""
import os
from pathlib import Path

import pytest

from nttrace.errors import UsageError
from nttrace.workloads.namespace_rebind import in_use, resolve


def nd_tree(root: Path, mode: str) -> Path:
    sys_root = root / "sys"
    nd = sys_root / "bus/nd"
    (nd / "drivers/nd_pmem").mkdir(parents=True)
    (nd / "drivers/dax_pmem").mkdir(parents=True)
    ns = nd / "devices/namespace0.0"
    ns.mkdir(parents=True)
    # what the kernel's mode_show() writes: its older names (ndctl says fsdax, devdax)
    (ns / "mode").write_text({"fsdax": "memory", "devdax": "dax"}[mode] + "\n")
    if mode == "fsdax":
        pfn = nd / "devices/pfn0.0"
        (pfn / "block/pmem0").mkdir(parents=True)
        (pfn / "namespace").write_text("namespace0.0\n")
        os.symlink(nd / "drivers/nd_pmem", pfn / "driver")
    else:
        dax = nd / "devices/dax0.0"
        (dax / "dax0.0/dax0.0").mkdir(parents=True)
        (dax / "namespace").write_text("namespace0.0\n")
        os.symlink(nd / "drivers/dax_pmem", dax / "driver")
    (root / "proc/1/fd").mkdir(parents=True)
    (root / "proc/mounts").write_text("/dev/vda / ext4 rw 0 0\n")
    return sys_root


def test_fsdax_resolves_to_the_pfn_device(tmp_path):
    t = resolve("namespace0.0", nd_tree(tmp_path, "fsdax"))
    assert (t.device, t.driver, t.mode, t.dev_nodes) == ("pfn0.0", "nd_pmem", "fsdax", ["/dev/pmem0"])


def test_devdax_resolves_to_the_dax_device(tmp_path):
    t = resolve("namespace0.0", nd_tree(tmp_path, "devdax"))
    assert (t.device, t.driver, t.mode, t.dev_nodes) == ("dax0.0", "dax_pmem", "devdax", ["/dev/dax0.0"])


def test_unknown_namespace_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such namespace"):
        resolve("namespace7.0", nd_tree(tmp_path, "fsdax"))


def test_mounted_fsdax_is_refused(tmp_path):
    sys_root = nd_tree(tmp_path, "fsdax")
    (tmp_path / "proc/mounts").write_text("/dev/pmem0 /mnt/pmem xfs rw,dax=always 0 0\n")
    assert in_use(resolve("namespace0.0", sys_root), tmp_path / "proc", sys_root) == "/dev/pmem0 is mounted"


def test_partition_mount_is_refused(tmp_path):
    sys_root = nd_tree(tmp_path, "fsdax")
    (tmp_path / "proc/mounts").write_text("/dev/pmem0p1 /mnt ext4 rw 0 0\n")
    assert "mounted" in in_use(resolve("namespace0.0", sys_root), tmp_path / "proc", sys_root)


def test_open_devdax_is_refused(tmp_path):
    sys_root = nd_tree(tmp_path, "devdax")
    os.symlink("/dev/dax0.0", tmp_path / "proc/1/fd/3")
    assert in_use(resolve("namespace0.0", sys_root), tmp_path / "proc", sys_root) == "/dev/dax0.0 is open by pid 1"


def test_idle_namespace_is_not_in_use(tmp_path):
    sys_root = nd_tree(tmp_path, "devdax")
    assert in_use(resolve("namespace0.0", sys_root), tmp_path / "proc", sys_root) is None
