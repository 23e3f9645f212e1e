# SPDX-License-Identifier: Apache-2.0
"""Enum values and struct offsets of the running (or --sysroot) kernel.

Sources, in order: BTF (`sys/kernel/btf/vmlinux`) for enums and offsets; the
`__print_symbolic` tables in the migrate tracepoints' format files as an
independent cross-check (and as the only source when BTF is absent).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nttrace.errors import UsageError
from nttrace.kernel.btf import Btf
from nttrace.kernel.sysroot import Sysroot
from nttrace.kernel.tracefs import read_format

# The NT demotion revisions add one migrate_mode each (see the seeds):
#   RFC v2 inserts MIGRATE_ASYNC_NON_TEMPORAL_STORES at index 1,
#   RFC v3 appends MIGRATE_ASYNC_NONTEMPORAL.
NT_MODES = {
    "MIGRATE_ASYNC_NON_TEMPORAL_STORES": "v2",
    "MIGRATE_ASYNC_NONTEMPORAL": "v3",
}
OUT_OF_RANGE = "OUT_OF_RANGE"
OFFSETS = (("dev_pagemap", "type"), ("dev_pagemap", "vmemmap_shift"), ("zone", "node"),
           ("dev_pagemap", "altmap.base_pfn"), ("dev_pagemap", "altmap.reserve"), ("dev_pagemap", "altmap.free"))
ENUMS = ("migrate_mode", "migrate_reason", "memory_type")


@dataclass
class KernelMetadata:
    source: str                       # "btf" or "tracefs"
    migrate_mode: dict[str, int]
    migrate_reason: dict[str, int]
    memory_type: dict[str, int]
    offsets: dict[str, int] = field(default_factory=dict)
    crosscheck: list[str] = field(default_factory=list)   # disagreements, empty when consistent
    crosschecked: bool = False
    btf_path: Path | None = field(default=None, repr=False, compare=False)
    _btf: Btf | None = field(default=None, repr=False, compare=False)

    @property
    def btf(self) -> Btf | None:
        """The BTF, for probes that need more than the enums and offsets
        above (function prototypes, folio layout). Read on first use and
        dropped by release_btf(): it holds the file and an index of its types
        (~8 MiB on the host's 5.5 MB BTF; ~63 MiB when every type was parsed
        into Python objects), which a long-running daemon has no use for once
        its programs load."""
        if self._btf is None and self.btf_path is not None:
            self._btf = Btf.from_file(self.btf_path)
        return self._btf

    def release_btf(self) -> None:
        self._btf = None

    @property
    def btf_parsed(self) -> bool:
        """Whether the parsed BTF is held now (release_btf() drops it)."""
        return self._btf is not None

    @property
    def nt_revision(self) -> str:
        for name, rev in NT_MODES.items():
            if name in self.migrate_mode:
                return rev
        return "none"

    @property
    def nt_mode_values(self) -> set[int]:
        return {v for k, v in self.migrate_mode.items() if k in NT_MODES}

    def mode_name(self, value: int) -> str:
        """The enumerator's name; OUT_OF_RANGE for a value this kernel's enum
        lacks (the probe's overflow row is -1), the same label everywhere."""
        return _reverse(self.migrate_mode).get(value, OUT_OF_RANGE)

    def reason_name(self, value: int) -> str:
        return _reverse(self.migrate_reason).get(value, OUT_OF_RANGE)

    def is_nt_mode(self, value: int) -> bool:
        """Whether a migrate_mode value is an NT revision's mode: the one
        place nttrace decides "nt" for a migration."""
        return value in self.nt_mode_values

    def memory_type_name(self, value: int) -> str:
        return _reverse(self.memory_type).get(value, f"MEMORY_TYPE_{value}")

    @classmethod
    def from_json(cls, d: dict) -> "KernelMetadata":
        """The metadata another process read (the loader's), without BTF."""
        return cls(d["source"], d["migrate_mode"], d["migrate_reason"], d["memory_type"], d.get("offsets", {}),
                   d.get("crosscheck", {}).get("disagreements", []), d.get("crosscheck", {}).get("done", False))

    def as_json(self) -> dict:
        return {
            "source": self.source,
            "migrate_mode": self.migrate_mode,
            "migrate_reason": self.migrate_reason,
            "memory_type": self.memory_type,
            "offsets": self.offsets,
            "nt_revision": self.nt_revision,
            "crosscheck": {"done": self.crosschecked, "disagreements": self.crosscheck},
        }


def _reverse(d: dict[str, int]) -> dict[int, str]:
    return {v: k for k, v in d.items()}


def facts_from_btf(btf: Btf) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The enums (ENUMS; empty where the kernel has none) and member offsets
    (OFFSETS; left out where the kernel has no such member) nttrace takes
    from a kernel's BTF."""
    enums = {name: btf.enum(name) if btf.has_enum(name) else {} for name in ENUMS}
    offsets = {}
    for struct_name, member in OFFSETS:
        try:
            offsets[f"{struct_name}.{member}"] = btf.member_offset(struct_name, member)
        except KeyError:
            pass  # ZONE_DEVICE off in this kernel: the memmap probe reports it
    return enums, offsets


ENUM_SYSTEM = "migrate"   # the tracepoint system whose formats print the migrate enums


def enum_format(tracefs: Path | None):
    """The format of a tracepoint of ENUM_SYSTEM that prints both mode and
    reason by name (__print_symbolic tables), or None: the enums' source on
    a kernel without BTF, and what BTF's are cross-checked against. The
    migrate probe's tracepoints (nttrace.probes.migrate, which names them)
    both print the same tables; the first in name order is read."""
    events = tracefs / "events" / ENUM_SYSTEM if tracefs is not None else None
    if events is None or not events.is_dir():
        return None
    for event in sorted(p.name for p in events.iterdir() if (p / "format").is_file()):
        fmt = read_format(tracefs, ENUM_SYSTEM, event)
        if fmt is not None and fmt.symbolic("mode") and fmt.symbolic("reason"):
            return fmt
    return None


def load(sysroot: Sysroot) -> KernelMetadata:
    """Kernel metadata from BTF, cross-checked against tracepoint formats.

    Raises UsageError when neither source is readable."""
    start_fmt = enum_format(sysroot.tracefs())
    btf_path = sysroot.btf_path()
    if btf_path.exists():
        btf = Btf.from_file(btf_path)
        enums, offsets = facts_from_btf(btf)
        enums["migrate_reason"].pop("MR_TYPES", None)
        meta = KernelMetadata("btf", enums["migrate_mode"], enums["migrate_reason"], enums["memory_type"], offsets,
                              btf_path=btf_path, _btf=btf)
    elif start_fmt is not None:
        # No BTF: the tracepoint's own symbol tables. Reason names there are
        # the tracepoint's lower-case labels, which is all this kernel offers.
        modes = {n: v for v, n in start_fmt.symbolic("mode").items()}
        reasons = {"MR_" + n.upper(): v for v, n in start_fmt.symbolic("reason").items()}
        return KernelMetadata("tracefs", modes, reasons, {}, {})
    else:
        raise UsageError(f"no BTF at {btf_path} and no migrate tracepoint format under {sysroot.root}"
                         + ("" if sysroot.live else " (docs/validate.md, --sysroot: which files a copy needs)"))

    if start_fmt is not None:
        meta.crosschecked = True
        meta.crosscheck = _crosscheck(meta, start_fmt)
    return meta


def _crosscheck(meta: KernelMetadata, fmt) -> list[str]:
    """Disagreements between the tracepoint's symbol tables and BTF. A table
    may omit enumerators (6.1's lists no MIGRATE_SYNC_NO_COPY), but every
    entry it has must carry BTF's value."""
    problems = []
    for value, name in fmt.symbolic("mode").items():
        if meta.migrate_mode.get(name) != value:
            problems.append(f"tracepoint says {name}={value}, BTF says {meta.migrate_mode.get(name)}")
    # The reason table carries labels ("compaction"), not enumerator names:
    # its values must be reasons BTF knows.
    unknown = set(fmt.symbolic("reason")) - set(meta.migrate_reason.values())
    if unknown:
        problems.append(f"tracepoint reason values {sorted(unknown)} are not in BTF's enum migrate_reason")
    return problems
