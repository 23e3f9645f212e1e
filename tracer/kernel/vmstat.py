# SPDX-License-Identifier: Apache-2.0
"""The kernel's vmstat counters: /proc/vmstat, or a node's
/sys/devices/system/node/nodeN/vmstat. The one parser of these files (the
workloads, the checks, the benchmarks and the daemon's collector read
through it)."""
from __future__ import annotations

from pathlib import Path


def read(path: str | Path = "/proc/vmstat") -> dict[str, int]:
    """A vmstat file as {counter: value}."""
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    return out
