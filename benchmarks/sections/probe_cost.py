# SPDX-License-Identifier: Apache-2.0
"""Probe cost: the migrate probe's programs per event and per migrate_pages()
call, beside the empty and clock-only reference programs (the floor), from
one `nttrace bench probes --json` run."""
from __future__ import annotations

import statistics

from ._format import run_name

RAW = "probes-epyc-vm-2026-12-06-90799e5.json"
ORDER_NAMES = {"probe": "probe", "empty": "empty", "clock_only": "clock"}


def probe_cost(raw: dict, file_name: str = RAW) -> str:
    (name, m), = ((k, v) for k, v in raw.items() if "rounds" in v)     # the default probe: the one measured in rounds
    rounds = m["rounds"]
    rows = [f"| round | order | per event: {name} probe (start / done) | per call: start + done | empty | clock only | "
            "probe / clock only |", "|---|---|--:|--:|--:|--:|--:|"]
    per_call = []
    for i, r in enumerate(rounds, 1):
        progs = {p["name"].rsplit("_", 1)[1]: p["ns_per_event"] for p in r["probe_programs"]}
        per_call.append(progs["start"] + progs["done"])
        rows.append(f"| {i} | {', '.join(ORDER_NAMES[s] for s in r['order'])} | {r['probe']:.0f} "
                    f"({progs['start']:.0f} / {progs['done']:.0f}) | {per_call[-1]:.0f} | {r['empty']:.0f} | "
                    f"{r['clock_only']:.0f} | {r['ratio_to_clock_only']:.2f} |")
    med = {k: statistics.median(r[k] for r in rounds) for k in ("probe", "empty", "clock_only", "ratio_to_clock_only")}
    call = statistics.median(per_call)
    rows.append(f"| **median** | | **{med['probe']:.0f}** | **{call:.0f}** | {med['empty']:.0f} | "
                f"{med['clock_only']:.0f} | **{med['ratio_to_clock_only']:.2f}** |")
    run = run_name(file_name)
    events = min(p["run_cnt"] for r in rounds for p in r["probe_programs"])
    rows += ["", f"Per event: **{med['probe']:.0f} ns**, x{med['ratio_to_clock_only']:.2f} the clock-only floor by the rounds' "
                 f"median ratio "
                 f"({med['clock_only']:.0f} ns; an empty program {med['empty']:.0f} ns). Per call: **{call:.0f} ns** "
                 f"(two clock-only programs: {2 * med['clock_only']:.0f} ns). Medians of {len(rounds)} rounds, "
                 f"each program alone, at least {events:,} events a program and round; the order rotates by round. "
                 f"{run['machine']}, {run['date']}, commit {run['commit']}. "
                 f"Command: `nttrace bench probes --rounds {len(rounds)} --json`."]
    return "\n".join(rows)


BLOCKS = {"probe-cost": (probe_cost, [RAW])}
