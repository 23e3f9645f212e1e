# SPDX-License-Identifier: Apache-2.0
"""Demotion, promotion and migration counters from /proc/vmstat and the
per-node vmstat files, as Prometheus counters. node_exporter leaves these
untyped and off by default; they are the independent cross-check of the
migrate probe. Per-node counters carry a `node` label; pgmigrate_* exist
only system-wide (/proc/vmstat) and carry none."""
from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.core import CounterMetricFamily

from nttrace.kernel import vmstat

PREFIXES = ("pgdemote_", "pgpromote_", "pgmigrate_")
NODE_DIR_RE = re.compile(r"^node(\d+)$")


def _read_counters(path: Path) -> dict[str, int]:
    try:
        counters = vmstat.read(path)
    except OSError:
        return {}
    return {k: v for k, v in counters.items() if k.startswith(PREFIXES) and v >= 0}


class VmstatCollector:
    def __init__(self, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")):
        self.node_root = sys_root / "devices/system/node"
        self.vmstat = proc_root / "vmstat"

    def nodes(self) -> dict[int, Path]:
        out = {}
        try:
            for d in self.node_root.iterdir():
                m = NODE_DIR_RE.match(d.name)
                if m:
                    out[int(m.group(1))] = d / "vmstat"
        except OSError:
            pass
        return dict(sorted(out.items()))

    def collect(self):
        per_node: dict[str, list[tuple[str, int]]] = {}
        for node, path in self.nodes().items():
            for k, v in _read_counters(path).items():
                per_node.setdefault(k, []).append((str(node), v))
        for k, series in sorted(per_node.items()):
            fam = CounterMetricFamily(f"nttrace_vmstat_{k}", f"{k} from /sys/devices/system/node/node*/vmstat", labels=["node"])
            for node, v in series:
                fam.add_metric([node], v)
            yield fam
        for k, v in sorted(_read_counters(self.vmstat).items()):
            if k in per_node:
                continue
            fam = CounterMetricFamily(f"nttrace_vmstat_{k}", f"{k} from /proc/vmstat (system-wide only)")
            fam.add_metric([], v)
            yield fam
