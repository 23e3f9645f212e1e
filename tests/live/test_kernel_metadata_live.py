# SPDX-License-Identifier: Apache-2.0
"""Enum values and offsets from this host's BTF, against its tracepoint
tables and bpftool (the --sysroot trees are in tests/unit/test_kernel_metadata.py)."""
import re

import pytest

from conftest import live_tracepoint_tables
from nttrace.kernel import metadata as kernel_meta
from nttrace.kernel.btf import Btf
from nttrace.kernel.sysroot import Sysroot


@pytest.mark.needs("btf", "tracefs", "tracepoint")
def test_live_btf_enums_match_the_kernels_own_tracepoint_tables():
    meta = kernel_meta.load(Sysroot("/"))
    modes, reasons = live_tracepoint_tables()
    assert meta.source == "btf"
    for name, value in modes.items():   # a table may omit enumerators (6.1), never disagree
        assert meta.migrate_mode[name] == value, name
    assert meta.migrate_mode["MIGRATE_SYNC"] == modes["MIGRATE_SYNC"]
    assert meta.migrate_reason["MR_COMPACTION"] == reasons["compaction"]
    assert meta.migrate_reason["MR_DEMOTION"] == reasons["demotion"]
    nt_in_table = sorted(set(modes) & set(kernel_meta.NT_MODES))
    assert meta.nt_revision == (kernel_meta.NT_MODES[nt_in_table[0]] if nt_in_table else "none")
    assert meta.crosschecked and meta.crosscheck == []


@pytest.mark.needs("btf", "bpftool")
def test_host_dev_pagemap_offsets_come_from_btf():
    """Our BTF reader against bpftool's on the running kernel: every member
    offset nttrace reads, and the struct sizes (no layout assumed)."""
    import subprocess
    btf = Btf.from_file("/sys/kernel/btf/vmlinux")
    raw = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "raw"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    for name, members in (("dev_pagemap", ("type", "flags", "vmemmap_shift", "altmap")), ("zone", ("node",))):
        block = re.search(rf"^\[\d+\] STRUCT '{name}' size=(\d+) vlen=\d+\n((?:\t.*\n)+)", raw, re.M)
        assert block, name
        assert btf.struct_size(name) == int(block.group(1))
        offsets = {m: int(o) // 8 for m, o in re.findall(r"\t'(\w+)' type_id=\d+ bits_offset=(\d+)", block.group(2))}
        for m in members:
            if m in offsets:          # zone.node only with CONFIG_NUMA
                assert btf.member_offset(name, m) == offsets[m], (name, m)
    page = re.search(r"^\[\d+\] STRUCT 'page' size=(\d+)", raw, re.M)
    assert btf.struct_size("page") == int(page.group(1))
