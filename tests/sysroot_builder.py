# SPDX-License-Identifier: Apache-2.0
"""Builds --sysroot trees for tests: a small but well-formed BTF blob, the
migrate tracepoints' format files and a kallsyms, for the enum layouts of a
base kernel and of the two NT demotion revisions in the seeds
(nt-demotion-rfc-v2-v3.txt):

  v2 "[PATCH RFC v2 2/3] mm: new migrate_mode flag ...": inserts
     MIGRATE_ASYNC_NON_TEMPORAL_STORES right after MIGRATE_ASYNC (index 1)
  v3 "[RFC PATCH v3 2/3] mm/migrate: introduce async non-temporal migration
     mode": appends MIGRATE_ASYNC_NONTEMPORAL after MIGRATE_SYNC

The field layout of the format files is the one this project's CI host
(6.18) shows in /sys/kernel/tracing/events/migrate/*/format.
"""
from __future__ import annotations

import struct
from pathlib import Path

BASE_MODES = ["MIGRATE_ASYNC", "MIGRATE_SYNC_LIGHT", "MIGRATE_SYNC"]
MODES = {
    "none": BASE_MODES,
    "v2": ["MIGRATE_ASYNC", "MIGRATE_ASYNC_NON_TEMPORAL_STORES", "MIGRATE_SYNC_LIGHT", "MIGRATE_SYNC"],
    "v3": BASE_MODES + ["MIGRATE_ASYNC_NONTEMPORAL"],
}
REASONS = ["MR_COMPACTION", "MR_MEMORY_FAILURE", "MR_MEMORY_HOTPLUG", "MR_SYSCALL", "MR_MEMPOLICY_MBIND",
           "MR_NUMA_MISPLACED", "MR_CONTIG_RANGE", "MR_LONGTERM_PIN", "MR_DEMOTION", "MR_DAMON", "MR_TYPES"]
REASON_LABELS = ["compaction", "memory_failure", "memory_hotplug", "syscall_or_cpuset", "mempolicy_mbind",
                 "numa_misplaced", "contig_range", "longterm_pin", "demotion", "damon"]
MEMORY_TYPES = {"MEMORY_DEVICE_PRIVATE": 1, "MEMORY_DEVICE_COHERENT": 2, "MEMORY_DEVICE_FS_DAX": 3,
                "MEMORY_DEVICE_GENERIC": 4, "MEMORY_DEVICE_PCI_P2PDMA": 5}
SYMBOLS = {
    "none": ["memmap_init_zone_device", "migrate_pages", "folio_mc_copy", "folio_copy"],
    "v2": ["memmap_init_zone_device", "migrate_pages", "folio_mc_copy", "folio_copy", "folio_mc_copy_nt",
           "copy_mc_to_kernel_nt"],
    "v3": ["memmap_init_zone_device", "migrate_pages", "folio_mc_copy", "folio_copy", "folio_mc_copy_nt",
           "copy_mc_page_nt"],
}


class BtfWriter:
    """Encodes INT, ENUM and STRUCT types in the kernel's BTF format."""

    def __init__(self):
        self.strings = bytearray(b"\0")
        self.types = bytearray()
        self.next_id = 1

    def _str(self, s: str) -> int:
        if not s:
            return 0
        off = len(self.strings)
        self.strings += s.encode() + b"\0"
        return off

    def _add(self, blob: bytes) -> int:
        self.types += blob
        tid = self.next_id
        self.next_id += 1
        return tid

    def int_type(self, name: str, size: int) -> int:
        return self._add(struct.pack("<III", self._str(name), 1 << 24, size) + struct.pack("<I", size * 8))

    def enum(self, name: str, values: dict[str, int]) -> int:
        info = (6 << 24) | len(values)
        body = b"".join(struct.pack("<Ii", self._str(k), v) for k, v in values.items())
        return self._add(struct.pack("<III", self._str(name), info, 4) + body)

    def struct(self, name: str, size: int, members: list[tuple[str, int, int]]) -> int:
        """members: (name, type id, byte offset)."""
        info = (4 << 24) | len(members)
        body = b"".join(struct.pack("<III", self._str(n), t, off * 8) for n, t, off in members)
        return self._add(struct.pack("<III", self._str(name), info, size) + body)

    def bytes(self) -> bytes:
        hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types), len(self.types), len(self.strings))
        return hdr + bytes(self.types) + bytes(self.strings)


def format_start(modes: list[str]) -> str:
    mode_tbl = ", ".join(f'{{{i}, "{m}"}}' for i, m in enumerate(modes))
    reason_tbl = ", ".join(f'{{{i}, "{r}"}}' for i, r in enumerate(REASON_LABELS))
    return f"""name: mm_migrate_pages_start
ID: 712
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:enum migrate_mode mode;\toffset:8;\tsize:4;\tsigned:0;
\tfield:int reason;\toffset:12;\tsize:4;\tsigned:1;

print fmt: "mode=%s reason=%s", __print_symbolic(REC->mode, {mode_tbl}), __print_symbolic(REC->reason, {reason_tbl})
"""


def format_done(modes: list[str]) -> str:
    start = format_start(modes)
    fields = "".join(
        f"\tfield:unsigned long {name};\toffset:{8 + 8 * i};\tsize:8;\tsigned:0;\n"
        for i, name in enumerate(["succeeded", "failed", "thp_succeeded", "thp_failed", "thp_split", "large_folio_split"])
    )
    head, tail = start.split("\tfield:enum migrate_mode mode;")
    tail = tail.split("\n", 2)[2]  # drop the old mode and reason lines
    return (head.replace("mm_migrate_pages_start", "mm_migrate_pages").replace("ID: 712", "ID: 713")
            + fields + "\tfield:enum migrate_mode mode;\toffset:56;\tsize:4;\tsigned:0;\n"
            + "\tfield:int reason;\toffset:60;\tsize:4;\tsigned:1;\n" + tail)


def build(root: Path, revision: str, tracepoint_modes: list[str] | None = None) -> Path:
    """A sysroot for `revision` ('none', 'v2', 'v3'). `tracepoint_modes`
    overrides the tracepoint's table, to build an inconsistent kernel."""
    modes = MODES[revision]
    w = BtfWriter()
    uint = w.int_type("unsigned int", 4)
    ulong = w.int_type("long unsigned int", 8)
    w.enum("migrate_mode", {m: i for i, m in enumerate(modes)})
    w.enum("migrate_reason", {r: i for i, r in enumerate(REASONS)})
    mt = w.enum("memory_type", MEMORY_TYPES)
    w.struct("dev_pagemap", 136, [("type", mt, 104), ("flags", uint, 108), ("vmemmap_shift", ulong, 112)])
    btf = root / "sys/kernel/btf/vmlinux"
    btf.parent.mkdir(parents=True, exist_ok=True)
    btf.write_bytes(w.bytes())
    ev = root / "sys/kernel/tracing/events/migrate/mm_migrate_pages_start"
    ev.mkdir(parents=True, exist_ok=True)
    (ev / "format").write_text(format_start(tracepoint_modes or modes))
    done = root / "sys/kernel/tracing/events/migrate/mm_migrate_pages"
    done.mkdir(parents=True, exist_ok=True)
    (done / "format").write_text(format_done(tracepoint_modes or modes))
    ks = root / "proc/kallsyms"
    ks.parent.mkdir(parents=True, exist_ok=True)
    ks.write_text("".join(f"ffffffff81{i:06x} T {s}\n" for i, s in enumerate(SYMBOLS[revision])))
    return root
