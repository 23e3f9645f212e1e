# SPDX-License-Identifier: Apache-2.0
"""Memory-device read/write traffic from uncore and CXL PMUs.

Which named sysfs event means "bytes read from this memory device" differs
per PMU family; the names below are the kernel's own event names, and the
encodings, scale and unit are read from sysfs at run time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from nttrace.perf.sysfs_pmu import Pmu

# CXL.mem moves data in 64-byte granules: one M2S MemRd request reads 64 B,
# one M2S RwD MemWr writes 64 B (CXL 3.0, 3.3.5). cxl_pmu exposes no .scale.
CXL_GRANULE_BYTES = 64

FAMILIES = [
    # (PMU name pattern, read event, write event, bytes per count when the event has no .unit)
    (re.compile(r"^uncore_imc(_free_running)?_\d+$"), "cas_count_read", "cas_count_write", 64),
    (re.compile(r"^cxl_pmu_mem\d+\.\d+$"), "m2s_req_memrd", "m2s_rwd_memwr", CXL_GRANULE_BYTES),
]
UNIT_BYTES = {"": None, "B": 1, "Bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
# What nttrace calls a memory-device PMU (the capability report's
# perf:uncore): the families above, and the ones known to count memory
# traffic without named byte events (AMD UMC/DF, Intel CHA).
MEMORY_PMU_RE = re.compile(r"^(uncore_imc|uncore_cha|amd_df|amd_umc|cxl_pmu)")


def is_memory_pmu(name: str) -> bool:
    return bool(MEMORY_PMU_RE.match(name))


@dataclass
class TrafficEvent:
    pmu: str
    direction: str  # "read" or "write"
    event: str
    bytes_per_count: float
    node: int | None


def traffic_events(pmus: dict[str, Pmu]) -> tuple[list[TrafficEvent], list[str]]:
    """The read/write events to count, and a note per PMU that offers none."""
    events, notes = [], []
    for name, pmu in sorted(pmus.items()):
        family = next((f for f in FAMILIES if f[0].match(name)), None)
        if family is None:
            if is_memory_pmu(name):
                notes.append(f"{name}: no named read/write byte events in sysfs")
            continue
        _pat, rd, wr, default_bytes = family
        for direction, ev in (("read", rd), ("write", wr)):
            if ev not in pmu.events:
                notes.append(f"{name}: no events/{ev} in sysfs")
                continue
            e = pmu.events[ev]
            unit = UNIT_BYTES.get(e.unit)
            per = e.scale * unit if unit else default_bytes
            events.append(TrafficEvent(name, direction, ev, per, pmu.node))
    return events, notes
