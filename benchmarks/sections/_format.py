# SPDX-License-Identifier: Apache-2.0
"""Formatting shared by the sections: figures, spreads, durations, and
names of machines and runs."""
from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout: the lab package
from lab.ab import mmss  # noqa: E402,F401 (durations as the lab prints them)


def ms(x: float) -> str:
    return f"{x:.2f}"


def med_range(values: list[float], fmt: str) -> str:
    """Median [min..max] of values."""
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}..{format(max(values), fmt)}]"


def spread(st: dict, fmt: str = "{:.3g}") -> str:
    """A summary dict's median [min..max]."""
    return f"{fmt.format(st['median'])} [{fmt.format(st['min'])}..{fmt.format(st['max'])}]"


def machine(run: dict) -> str:
    """A run's machine by name: its CPU model, its cores, a VM (every host so far)."""
    if "host" not in run:
        return "CI's machine (not reported)"
    cpu = run["host"]["cpu"]
    name = "Intel Xeon" if "Xeon" in cpu else cpu
    return f"{name} {run['host']['cpus']}-core VM"


def run_name(file_name: str) -> dict:
    """A raw file's run, from its name: KIND-MACHINE-YYYY-MM-DD[-COMMIT].json."""
    m = re.match(r"(?P<kind>.+?)-(?P<machine>[a-z0-9]+-vm)-(?P<date>\d{4}-\d\d-\d\d)(?:-(?P<commit>[0-9a-f]{7,}))?\.",
                 file_name)
    if not m:
        raise ValueError(f"{file_name}: not named KIND-MACHINE-DATE[-COMMIT]")
    return m.groupdict()


def command(cmd: str) -> str:
    """A recorded command with its scratch directories as DIR: where a run
    kept its files is not part of how to repeat it."""
    return re.sub(r"(--(?:out|before) )/\S+", r"\1DIR", cmd)
