# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate --quick`: whole commands and their floors (wall, CPU,
peak RSS), from benchmarks/validate_quick_budget.py."""
from __future__ import annotations

import shlex
from pathlib import Path

from ._format import command, spread

NOTES = {"quick": "the LLC from /sys", "quick-llc32m": "a 32 MiB LLC, as the plan reads it",
         "floor-report": "start-up, BTF, capability report"}


def _label(key: str, cmd: dict) -> str:
    """A round's command as its raw file recorded it (the program by its name, not its path)."""
    argv = [Path(cmd["argv"][0]).name] + [shlex.quote(a) for a in cmd["argv"][1:]]
    shown = " ".join([f"{k}={v}" for k, v in cmd["env"].items()] + argv)
    role = "floor: " if key.startswith("floor") else "before: " if key == "before" else ""
    note = NOTES.get(key) or ("alone" if "--check" in cmd["argv"] and not role else "")
    return f"{role}`{shown}`" + (f" ({note})" if note else "")


def validate_quick_budget(raw: dict) -> str:
    """Median [min..max] over the rounds, and each command's wall and peak
    RSS as a ratio to the capability report's (the floor every command pays)."""
    rows = ["| command | wall s | CPU s | peak RSS MiB | wall, RSS: x the capability report |", "|---|--:|--:|--:|--:|"]
    floor = raw["summary"]["floor-report"]
    for key, st in raw["summary"].items():
        ratio = (f"x{st['wall_s']['median'] / floor['wall_s']['median']:.2f}, "
                 f"x{st['peak_rss_mib']['median'] / floor['peak_rss_mib']['median']:.2f}")
        rows.append(f"| {_label(key, raw['commands'][key])} | {spread(st['wall_s'])} | {spread(st['cpu_s'])} | "
                    f"{spread(st['peak_rss_mib'], '{:.1f}')} | {ratio} |")
    h = raw["host"]
    before = ", ".join(f"{x:.3f}" for x in raw["ratios"]["quick/before"]["wall_s"])
    rows += ["", f"After / before, wall time round by round: {before}. {raw['taken'][:10]}, xeon-vm: {h['cpu']} "
                 f"({h['cpus']} CPUs, LLC {h['llc']}), kernel {h['kernel']}, commit {raw['commit']}; "
                 f"{len(raw['rounds'])} rounds, order alternating, {raw['warmup']} warm-up each; peak RSS from wait4, "
                 f"children included. Command: `.venv/bin/python {command(raw['command'])}`."]
    return "\n".join(rows)


BLOCKS = {"validate-quick-budget": (validate_quick_budget, ["validate-quick-budget-xeon-vm-2026-12-05.json"])}
