# SPDX-License-Identifier: Apache-2.0
"""Modelled memory traffic in the lab (the QEMU TCG plugin of lab/traffic/):
base against nt-v3 per demoted and per initialised page
(`python3 -m lab.traffic.ab`), the template series step by step
(`python3 -m lab.steps`' traffic boots), and the plugin's cost on a lab
boot (`python3 -m lab.traffic.cost`)."""
from __future__ import annotations

import re

from ._format import command

from lab.traffic import ab as tab  # noqa: E402 (the checkout is on the path: _format puts it there)
from lab.traffic import report as traffic_report  # noqa: E402

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


def _device_per_page(summary: dict) -> dict[str, list[tuple[float, float]]]:
    """label -> (device bytes read, written) per page of every window of the step (the in-boot repeat too)."""
    out: dict = {}
    for w in summary["windows"]:
        if w["label"] in STEPS and w.get("pages"):
            b = w["pmem_device_bytes"]
            out.setdefault(w["label"], []).append((b["read"] / w["pages"], b["written"] / w["pages"]))
    return out


def _spread(runs: dict) -> str:
    """Per step, whether every window of every boot of a kernel gave the same
    device bytes per page, and if not, their range."""
    said, widest = [], 0.0
    for label, what in STEPS.items():
        per_kernel: dict = {}
        for r in runs.values():
            for name in ("base", r["name"]):
                per_kernel.setdefault(name, []).append(_device_per_page(r[name]).get(label, []))
        parts = []
        for name, boots in per_kernel.items():
            values = [v for boot in boots for v in boot]
            n = f"{name} ({len(boots)} boot{'s' if len(boots) > 1 else ''}, {len(values)} windows)"
            if len(set(values)) == 1:
                parts.append(f"{n} identical")
            else:
                span = {k: (min(v[i] for v in values), max(v[i] for v in values)) for i, k in enumerate(("read", "wrote"))}
                widest = max([widest] + [100 * (hi - lo) / 4096 for lo, hi in span.values()])
                parts.append(f"{n} " + ", ".join(f"{k} {lo:.1f}" + (f"..{hi:.1f}" if hi != lo else "")
                                                 for k, (lo, hi) in span.items()))
        said.append(f"{what.split(',')[0]}{', ' + what.split(', ')[1] if label != 'demotion' else ''}: "
                    + "; ".join(parts))
    return ". ".join(said) + (f". Widest: {widest:.2f}% of a page" if widest else "")


def traffic_ab(raw: dict) -> str:
    """Each run's per-page device traffic and LLC fills, base -> the NT
    kernel, beside the seeds' claims; the model's parameters; how far the
    device's bytes per page vary over windows and boots; each run's machine,
    date, commit and command."""
    runs = {}
    for kernel in PAIRS:
        r = {k.split(" ", 1)[1]: v for k, v in raw.items() if k.startswith(kernel + " ")}
        r["name"] = kernel
        r[kernel] = r.pop("kernel")
        pa, pb = tab.per_page(r["base"]), tab.per_page(r[kernel])
        if {"base": pa, kernel: pb} != {k: r["table"][k] for k in ("base", kernel)}:
            raise SystemExit(f"benchmarks: {kernel}'s traffic-ab.json is not what lab.traffic.ab makes of its two boots")
        r["per_page"] = (pa, pb)
        runs[kernel] = r
    rows = ["| step | base -> | pages | device bytes read / page | device bytes written / page | LLC fills / page: "
            "all (from the device) | NT full lines / page | the seeds' claim |", "|---|---|--:|--:|--:|--:|--:|---|"]
    for label, what in STEPS.items():
        for i, (kernel, r) in enumerate(runs.items()):
            x, y = (pp[label] for pp in r["per_page"])
            rows.append(f"| {what if i == 0 else ''} | {kernel} | {x['pages']} / {y['pages']} | "
                        f"**{_arrow(x['device_read_per_page'], y['device_read_per_page'])}** | "
                        f"{_arrow(x['device_written_per_page'], y['device_written_per_page'])} | "
                        f"{_arrow(x['llc_fills_per_page'], y['llc_fills_per_page'])} "
                        f"({_arrow(x['pmem_fills_per_page'], y['pmem_fills_per_page'])}) | "
                        f"{_arrow(x['nt_lines_per_page'], y['nt_lines_per_page'])} | {SEEDS[label] if i == 0 else ''} |")
    m = next(iter(runs.values()))["base"]["model"]
    rows += ["", f"- Model: LLC {m['llc_bytes'] >> 20} MiB, {m['ways']} ways, {m['line']}-byte lines ({m['sets']} sets), "
                 f"{m['wc_buffers']} write-combining buffers; {m['policy']}. It counts {m['what']}."]
    rows += ["- Spread, device bytes per page over each step's two windows a boot and over boots: " + _spread(runs)
             + ". No statistics: memmap init repeats exactly (icount); demotion's per-page bytes vary by "
               "a few pages' lines in 16,400 (reclaim's own variation), far below the change. DRAM counts vary more "
               "(the kernel's own work in the window)."]
    for kernel, r in runs.items():
        run = r["run"]
        host = "; ".join(f"{k}: {h['state']}, QEMU {h['own_cpu_s']} s CPU of {h['window_s']} s"
                         for k, h in run["host"].items())
        named = f"{run['machine_name']}, " if "machine_name" in run else ""
        saved = " (added when saved)" if "added_when_saved" in run else ""
        rows.append(f"- base/{kernel}: one boot a side, {run['finished'][:10]}, {run['machine']} ({named}{run['cpus']} "
                    f"CPUs), commit {run['commit']}{saved}, {run['cpu']}; {host}. Command: `{command(run['command'])}`.")
    return "\n".join(rows)


def traffic_steps(raw: dict) -> str:
    """lab.steps' traffic boots: a row a step (base first), the device bytes
    read and written, LLC fills and NT full-line writes per initialised page
    of each rebind window, as lab.steps writes them; whether each step's
    windows repeated exactly; the run's date, machine, commit and command."""
    meta, t = raw["meta"], raw["traffic"]
    labels = list(meta["kernels"])
    head, rows = traffic_report.steps_rows(t, labels)
    out = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    exact = [k for k in labels if not any(t["kernels"][k]["repeat_spread_bytes_per_page"].values())]
    out += ["", f"One traffic boot a step's kernel (the model above), {len(exact)} of {len(labels)} with both rebinds of "
                f"each namespace in the boot counting the same device bytes. {meta['finished'][:10]}, {meta['machine']}, "
                f"commit {meta['commit']}, {meta['cpu']}: `{command(meta['command'])}`."]
    return "\n".join(out)


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


PAIRS = {"nt-v3": "lab-traffic-ab-base-nt-v3-xeon-vm-2026-12-06-5f57c63",
         "nt-v2": "lab-traffic-ab-base-nt-v2-xeon-vm-2026-12-06-f1fdce5"}
STEPS_RUN = "lab-steps-v8-traffic-xeon-vm-2026-12-06-257b92e/steps.json"
BLOCKS = {
    "lab-traffic-ab": (traffic_ab, {f"{k} {part}": f"{d}/{f}" for k, d in PAIRS.items() for part, f in (
        ("run", "run.json"), ("base", "base.json"), ("kernel", f"{k}.json"), ("table", "traffic-ab.json"))}),
    "lab-traffic-steps": (traffic_steps, [STEPS_RUN]),
    "lab-traffic-cost": (traffic_cost, ["lab-traffic-cost-xeon-vm-2026-12-06-b2973b1.json"]),
}
