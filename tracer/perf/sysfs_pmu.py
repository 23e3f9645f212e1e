# SPDX-License-Identifier: Apache-2.0
"""PMUs as the kernel describes them under /sys/bus/event_source/devices:
`type`, `cpumask`, `format/*` (which config bits each term sets) and
`events/*` (named encodings, with optional `.scale` and `.unit`).
Encodings always come from these files, never from tables in nttrace."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nttrace.kernel.sysfs import read as _read
from nttrace.perf.event_open import EventSpec

_FIELDS = ("config", "config1", "config2")
_RANGE_RE = re.compile(r"^(config[12]?):(.+)$")


@dataclass
class PmuEvent:
    name: str
    encoding: str
    scale: float = 1.0
    unit: str = ""


@dataclass
class Pmu:
    name: str
    type: int
    cpus: list[int]
    formats: dict[str, tuple[str, list[tuple[int, int]]]] = field(default_factory=dict)
    events: dict[str, PmuEvent] = field(default_factory=dict)
    node: int | None = None

    def encode(self, encoding: str) -> dict[str, int]:
        """'event=0x04,umask=0x03' -> {'config': 0x304, 'config1': 0, 'config2': 0}."""
        out = {f: 0 for f in _FIELDS}
        for term in filter(None, (t.strip() for t in encoding.split(","))):
            key, _, raw = term.partition("=")
            value = int(raw, 0) if raw else 1
            if key in _FIELDS:  # a raw "config=0x..." term, as cxl_pmu writes them
                out[key] |= value
                continue
            if key not in self.formats:
                raise ValueError(f"{self.name}: term {key!r} has no format/{key}")
            target, ranges = self.formats[key]
            out[target] |= _scatter(value, ranges)
        return out

    def spec(self, event: str) -> EventSpec:
        ev = self.events[event]
        enc = self.encode(ev.encoding)
        return EventSpec(f"{self.name}/{event}/", self.type, enc["config"], enc["config1"], enc["config2"])


def _scatter(value: int, ranges: list[tuple[int, int]]) -> int:
    """Place the low bits of `value` into the bit ranges, in order."""
    out, shift = 0, 0
    for lo, hi in ranges:
        width = hi - lo + 1
        out |= ((value >> shift) & ((1 << width) - 1)) << lo
        shift += width
    return out


def parse_format(text: str) -> tuple[str, list[tuple[int, int]]]:
    """'config:0-7,32-35' -> ('config', [(0, 7), (32, 35)])."""
    m = _RANGE_RE.match(text.strip())
    if not m:
        raise ValueError(f"unreadable format {text!r}")
    ranges = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return m.group(1), ranges


def parse_cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def load_pmu(path: Path, sysfs_root: Path | None = None) -> Pmu:
    pmu = Pmu(path.name, int(_read(path / "type") or -1), parse_cpulist(_read(path / "cpumask") or ""))
    fmt_dir = path / "format"
    if fmt_dir.is_dir():
        for f in sorted(fmt_dir.iterdir()):
            pmu.formats[f.name] = parse_format(f.read_text())
    ev_dir = path / "events"
    if ev_dir.is_dir():
        for f in sorted(ev_dir.iterdir()):
            if "." in f.name:
                continue  # .scale / .unit / .per-pkg / .snapshot belong to an event
            scale = _read(ev_dir / f"{f.name}.scale")
            pmu.events[f.name] = PmuEvent(f.name, f.read_text().strip(), float(scale) if scale else 1.0,
                                          _read(ev_dir / f"{f.name}.unit") or "")
    pmu.node = pmu_node(path, pmu.cpus, sysfs_root)
    return pmu


def pmu_node(path: Path, cpus: list[int], sysfs_root: Path | None) -> int | None:
    """The NUMA node a PMU's traffic belongs to: the device's own numa_node
    (CXL memory devices), else the node of the first CPU in its cpumask."""
    for cand in (path / "device" / "numa_node", path / "numa_node"):
        v = _read(cand)
        if v is not None and v.lstrip("-").isdigit() and int(v) >= 0:
            return int(v)
    if cpus and sysfs_root is not None:
        cpu_dir = sysfs_root / "devices/system/cpu" / f"cpu{cpus[0]}"
        for entry in sorted(cpu_dir.glob("node*")):
            return int(entry.name[4:])
    return None


def discover(sysfs_root: Path = Path("/sys")) -> dict[str, Pmu]:
    devices = sysfs_root / "bus/event_source/devices"
    out = {}
    try:
        entries = sorted(devices.iterdir())
    except OSError:
        return out
    for p in entries:
        try:
            out[p.name] = load_pmu(p, sysfs_root)
        except (OSError, ValueError):
            continue
    return out
