# SPDX-License-Identifier: Apache-2.0
"""Modelled memory traffic in the lab (the QEMU TCG plugin of lab/traffic/):
base against nt-v3 per demoted and per initialised page
(`python3 -m lab.traffic.ab`), and the plugin's cost on a lab boot
(`python3 -m lab.traffic.cost`)."""
from __future__ import annotations

import re

from ._format import command

from lab.traffic import ab as tab  # noqa: E402 (the checkout is on the path: _format puts it there)

# What each seed says of the step's traffic, beside the model's figures (paraphrased from the cover letters).
SEEDS = {
    "demotion": "demotion RFC (CXL expander, N = 64 GB by memory.reclaim): device reads N -> almost 0, "
                "writes N both",
    "rebind_fsdax": "template series 6-8/9: cached stores to the write-once memmap cost write-allocate traffic "
                    "and pollute the cache; NT stores avoid part of it (no figure)",
    "rebind_devdax": "as fsdax",
}
STEPS = {"demotion": "demotion (memory.reclaim), per demoted page",
         "rebind_fsdax": "memmap init, fsdax -M dev, per initialised page",
         "rebind_devdax": "memmap init, devdax -a 2M, per initialised page"}


def _arrow(a, b) -> str:
    return f"{a:g} -> {b:g}" if a != b else f"{a:g} both"


def _repeats(summary: dict) -> list[tuple[str, dict, dict]]:
    """(label, first window's device bytes, the in-boot repeat's) per step."""
    seen: dict = {}
    for w in summary["windows"]:
        if w["label"] in STEPS:
            seen.setdefault(w["label"], []).append(w["pmem_device_bytes"])
    return [(label, ws[0], ws[1]) for label, ws in seen.items() if len(ws) > 1]


def traffic_ab(raw: dict) -> str:
    """The two boots' per-page device traffic and LLC fills, base -> nt-v3,
    beside the seeds' claims; the model's parameters; what the in-boot
    repeats say of the spread; the run's machine, date, commit, command."""
    run, a, b, recorded = raw["run"], raw["base"], raw["nt-v3"], raw["table"]
    pa, pb = tab.per_page(a), tab.per_page(b)
    if {"base": pa, "nt-v3": pb} != {k: recorded[k] for k in ("base", "nt-v3")}:
        raise SystemExit("benchmarks: traffic-ab.json is not what lab.traffic.ab makes of base.json and nt-v3.json")
    rows = ["| step | pages | device bytes read / page | device bytes written / page | LLC fills / page: all "
            "(from the device) | NT full lines / page | the seeds' claim |", "|---|--:|--:|--:|--:|--:|---|"]
    for label, what in STEPS.items():
        x, y = pa[label], pb[label]
        rows.append(f"| {what} | {x['pages']} / {y['pages']} | **{_arrow(x['device_read_per_page'], y['device_read_per_page'])}** | "
                    f"{_arrow(x['device_written_per_page'], y['device_written_per_page'])} | "
                    f"{_arrow(x['llc_fills_per_page'], y['llc_fills_per_page'])} "
                    f"({_arrow(x['pmem_fills_per_page'], y['pmem_fills_per_page'])}) | "
                    f"{_arrow(x['nt_lines_per_page'], y['nt_lines_per_page'])} | {SEEDS[label]} |")
    m = a["model"]
    rows += ["", f"- Model: LLC {m['llc_bytes'] >> 20} MiB, {m['ways']} ways, {m['line']}-byte lines ({m['sets']} sets), "
                 f"{m['wc_buffers']} write-combining buffers; {m['policy']}. It counts {m['what']}."]
    same, differ, dram = 0, [], 0
    for name, s in (("base", a), ("nt-v3", b)):
        for label, first, again in _repeats(s):
            if first == again:
                same += 1
            else:
                differ.append(f"{name}'s {label}: {first['read']} and {again['read']} bytes read, "
                              + ("written the same" if first["written"] == again["written"]
                                 else f"{first['written']} and {again['written']} written"))
        fills = {}
        for w in s["windows"]:
            if w["label"] in STEPS:
                d = w["counts"]["dram"]
                fills.setdefault(w["label"], []).append(d["fills_load"] + d["fills_store"])
        dram = max([dram] + [max(f) - min(f) for f in fills.values()])
    rows += ["- Spread: none to estimate (icount; the device's counts are the path's own). Each step ran twice "
                 f"a boot: the repeat's device bytes equal the first's in {same} of {same + len(differ)}"
             + (f" ({'; '.join(differ)})" if differ else "")
             + f"; DRAM fills differ by up to {dram} lines, the kernel's own work in the window. The lab test's "
             "A/A (`tests/lab/test_traffic.py`, two boots of the stock guest) gives identical device counts."]
    host = "; ".join(f"{k}: {h['state']}, QEMU {h['own_cpu_s']} s CPU of {h['window_s']} s"
                     for k, h in run["host"].items())
    named = f"{run['machine_name']}, " if "machine_name" in run else ""
    saved = " (added when saved)" if "added_when_saved" in run else ""
    rows += [f"- Run: one boot a side, {run['finished'][:10]}, {run['machine']} ({named}{run['cpus']} CPUs), "
                 f"commit {run['commit']}{saved}, {run['cpu']}; {host}. "
                 f"Command: `{command(run['command'])}`."]
    return "\n".join(rows)


def traffic_cost(raw: dict) -> str:
    """QEMU's CPU time over lab.ab's boot without and with the plugin loaded
    (no window open), and the ratio."""
    without, with_ = raw["boots"]
    cmd = re.sub(r"(lab\.traffic\.cost) /\S+", r"\1 DIR", raw["command"])
    return (f"The plugin's cost: lab.ab's boot ({', '.join(raw['scenarios'])}), QEMU's own CPU time "
            f"**{without['qemu_cpu_s']} s without, {with_['qemu_cpu_s']} s with the plugin** loaded and no window "
            f"open (x{raw['qemu_cpu_ratio']}); wall time {without['wall_s']} s and {with_['wall_s']} s on a "
            f"{without['host']} host (load {without['loadavg_start']} and {with_['loadavg_start']}), so CPU time "
            f"is the figure. One boot each, {raw['date']}, {raw['machine']} ({raw['cpus']} CPUs), commit "
            f"{raw['commit']}{' (added when saved)' if 'added_when_saved' in raw else ''}, {raw['cpu']}. "
            f"Command: `{cmd}`.")


AB = "lab-traffic-ab-base-nt-v3-xeon-vm-2026-12-06-5f57c63"
BLOCKS = {
    "lab-traffic-ab": (traffic_ab, {"run": f"{AB}/run.json", "base": f"{AB}/base.json", "nt-v3": f"{AB}/nt-v3.json",
                                    "table": f"{AB}/traffic-ab.json"}),
    "lab-traffic-cost": (traffic_cost, ["lab-traffic-cost-xeon-vm-2026-12-06-b2973b1.json"]),
}
