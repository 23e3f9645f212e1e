# SPDX-License-Identifier: Apache-2.0
"""Modelled memory traffic in the lab (the QEMU TCG plugin of lab/traffic/):
base against nt-v3 and nt-v2 per demoted and per initialised page, and who
moves the device's lines by kernel function (`python3 -m lab.traffic.ab`),
the template series step by step (`python3 -m lab.steps`' traffic boots),
and the plugin's cost inside its windows and over a boot
(`python3 -m lab.traffic.cost`). The full function tables stay in the raw
files (each boot's summary, lab.traffic.ab's traffic-ab.json)."""
from __future__ import annotations

import re

from ._format import command

from lab.traffic import report  # noqa: E402 (the checkout is on the path: _format puts it there)

STEPS = {"demotion": "demotion (memory.reclaim), per demoted page",
         "rebind_fsdax": "memmap init, fsdax -M dev, per initialised page",
         "rebind_devdax": "memmap init, devdax -a 2M, per initialised page"}


def _read(pp: dict) -> str:
    """Device bytes read a page, and under the no-RFO rule where it differs."""
    alt = pp.get("fast_string_no_rfo", {}).get("device_read_per_page", pp["device_read_per_page"])
    return f"{pp['device_read_per_page']:g}" + (f" ({alt:g})" if alt != pp["device_read_per_page"] else "")


def _fills(pp: dict) -> str:
    c = pp.get("llc_fills_by_cause_per_page")
    if not c:
        return f"{pp['llc_fills_per_page']:g}"
    return f"{c['path']['device']:g} / {c['path']['dram']:g} / {c['rest']['dram']:g}"


def who(rows: list[dict]) -> str:
    """The functions that moved a device line, with their lines read and
    written (and under the no-RFO rule where it reads otherwise)."""
    out = []
    for r in rows:
        if not (r["device_lines_read"] or r["device_lines_written"] or r["device_partial_bytes"]):
            continue
        alt = r.get("fast_string_no_rfo", {}).get("device_lines_read", r["device_lines_read"])
        read = f"{r['device_lines_read']:,}" + (f" ({alt:,})" if alt != r["device_lines_read"] else "")
        by = f" <- {r['caller']}" if r["caller"] else ""
        written = f"{r['device_lines_written']:,}" + (f" + {r['device_partial_bytes']:,} B" if r["device_partial_bytes"]
                                                     else "")
        out.append(f"`{r['function']}`{by} ({r['class']}) {read} / {written}")
    return "; ".join(out)


def _spread(runs: dict) -> str:
    """Per step, how far the device bytes a page of every window of every
    boot of a kernel lie apart (the in-boot repeat and base's two boots)."""
    said, widest = [], 0.0
    for label, what in STEPS.items():
        per_kernel: dict = {}
        for r in runs.values():
            for name in ("base", r["name"]):
                for w in r[name]["windows"]:
                    if w["label"] == label and w.get("pages"):
                        b = w["pmem_device_bytes"]
                        per_kernel.setdefault(name, []).append((b["read"] / w["pages"], b["written"] / w["pages"]))
        parts = []
        for name, values in per_kernel.items():
            if len(set(values)) == 1:
                parts.append(f"{name} identical in {len(values)} windows")
            else:
                span = [max(v[i] for v in values) - min(v[i] for v in values) for i in (0, 1)]
                widest = max([widest] + [100 * s / 4096 for s in span])
                parts.append(f"{name} {len(values)} windows within {max(span):.2f} B")
        said.append(f"{what.split(',')[0]}{', ' + what.split(', ')[1] if label != 'demotion' else ''}: "
                    + "; ".join(parts))
    return ". ".join(said) + (f" (widest {widest:.2f}% of a page)" if widest else "")


def traffic_ab(raw: dict) -> str:
    """Per step and kernel the device bytes a page (read under the no-RFO
    rule too where it differs), the LLC fills a page by cause, and who moves
    the device's lines by function; the model; the spread; each run's
    machine, date, commit and command."""
    runs = {}
    for kernel in PAIRS:
        r = {k.split(" ", 1)[1]: v for k, v in raw.items() if k.startswith(kernel + " ")}
        r["name"] = kernel
        r[kernel] = r.pop("kernel")
        t = report.figures({"base": r["base"], kernel: r[kernel]}, list(report.STEP_LABELS))
        if t != r["table"]["traffic"]:
            raise SystemExit(f"benchmarks: {kernel}'s traffic-ab.json is not what lab.traffic.ab makes of its two boots")
        r["t"] = t
        runs[kernel] = r
    rows = ["| step | kernel | pages | device B read / page (no-RFO rule) | written / page | LLC fills / page: the "
            "path's from the device / from DRAM / the rest's | who moves the device's lines: function <- caller "
            "(class) lines read (no-RFO rule) / written |", "|---|---|--:|--:|--:|--:|---|"]
    for label, what in STEPS.items():
        first = True
        for kernel, r in runs.items():
            for name in (("base", kernel) if first else (kernel,)):
                k = r["t"]["kernels"][name]
                pp = k["per_page"][label]
                rows.append(f"| {what if first and name == 'base' else ''} | {name} | {pp['pages']} | "
                            f"**{_read(pp)}** | {pp['device_written_per_page']:g} | {_fills(pp)} | "
                            f"{who(k['functions'][label])} |")
            first = False
    m = next(iter(runs.values()))["t"]["model"]
    rows += ["", f"- Model: {report.model_words(m)}. It counts {m['what']}; {report.ASSUMES}"]
    rows += ["- Spread, device bytes a page over each step's two windows a boot and base's two boots: "
             + _spread(runs) + ". No statistics: the counts are the path's (icount), far apart from any change."]
    said = []
    for kernel, r in runs.items():
        run = r["run"]
        host = "; ".join(f"{k}: {h['state']}, QEMU {h['own_cpu_s']} s CPU of {h['window_s']} s"
                         for k, h in run["host"].items())
        said.append(f"base/{kernel}: one boot a side, {run['finished'][:10]}, {run['machine']} ({run['cpus']} CPUs), "
                    f"commit {run['commit']}, {run['cpu']}; {host}; `{command(run['command'])}`")
    rows.append("- Runs: " + ". ".join(said) + ".")
    return "\n".join(rows)


def traffic_steps(raw: dict) -> str:
    """lab.steps' traffic boots: a row a step (base first), the device bytes
    read and written per initialised page of each rebind, and who moves the
    device's lines at each step; the run's date, machine, commit and command."""
    meta, t = raw["meta"], raw["traffic"]
    labels = list(meta["kernels"])
    out = ["| step | fsdax read / written B/page | devdax read / written B/page | who moves the device's lines: "
           "fsdax | devdax |", "|---|--:|--:|---|---|"]
    for lab_ in labels:
        k = t["kernels"][lab_]
        cells = []
        for w in ("rebind_fsdax", "rebind_devdax"):
            pp = k["per_page"][w]
            cells.append(f"{_read(pp)} / {pp['device_written_per_page']:g}")
        # a run recorded before the plugin attributed lines has no functions
        names = [who(k["functions"][w]) if "functions" in k else "not attributed in this run"
                 for w in ("rebind_fsdax", "rebind_devdax")]
        out.append(f"| {lab_} | {cells[0]} | {cells[1]} | {names[0]} | {names[1]} |")
    exact = [k for k in labels if not any(t["kernels"][k]["repeat_spread_bytes_per_page"].values())]
    out += ["", f"One traffic boot a step's kernel (the model above), {len(exact)} of {len(labels)} with both rebinds of "
                f"each namespace in the boot counting the same device bytes. {meta['finished'][:10]}, {meta['machine']}, "
                f"commit {meta['commit']}, {meta['cpu']}: `{command(meta['command'])}`."]
    return "\n".join(out)


def traffic_cost(raw: dict) -> str:
    """The plugin's cost inside its step windows (the TCG thread's CPU time,
    model off against on) and over the boot (QEMU's CPU time, no plugin
    against the plugin), each as the A/B states a comparison, with the
    host's load at each boot."""
    loads = ", ".join(f"{b['loadavg_start']}" for b in raw["boots"])
    cmd = re.sub(r"(lab\.traffic\.cost) /\S+", r"\1 DIR", raw["command"])
    return (f"The plugin's cost, {raw['kernel']}'s traffic boot with both steps, {len(raw['boots']) // 3} boots of "
            f"each mode, round by round. Inside the step windows (TCG thread CPU s; markers: the plugin with its model "
            f"off, model: as the lab runs it): {raw['in_windows']}. Over the boot (QEMU CPU s; none: no plugin): "
            f"{raw['whole_boot']}. Host load at each boot's start: {loads}. {raw['date']}, {raw['machine']} "
            f"({raw['cpus']} CPUs), commit {raw['commit']}, {raw['cpu']}. Command: `{cmd}`.")


PAIRS = {"nt-v3": "lab-traffic-ab-base-nt-v3-epyc-vm-2026-12-07-84c8b9b",
         "nt-v2": "lab-traffic-ab-base-nt-v2-epyc-vm-2026-12-07-84c8b9b"}
STEPS_RUN = "lab-steps-v8-traffic-xeon-vm-2026-12-06-257b92e/steps.json"
COST_RUN = "lab-traffic-cost-epyc-vm-2026-12-07-260743d.json"
BLOCKS = {
    "lab-traffic-ab": (traffic_ab, {f"{k} {part}": f"{d}/{f}" for k, d in PAIRS.items() for part, f in (
        ("run", "run.json"), ("base", "base.json"), ("kernel", f"{k}.json"), ("table", "traffic-ab.json"))}),
    "lab-traffic-steps": (traffic_steps, [STEPS_RUN]),
    "lab-traffic-cost": (traffic_cost, [COST_RUN]),
}
