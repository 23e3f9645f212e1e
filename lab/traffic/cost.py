# SPDX-License-Identifier: Apache-2.0
"""The traffic plugin's cost, inside its windows and over a boot: the
traffic guest with its memmap and demotion steps on a lab kernel (default
base), booted RUNS times in each of three ways, round by round:

    none     no plugin: QEMU's CPU time over the boot
    markers  the plugin with its model off (model=0): it decodes every
             instruction at translation and times each window (the TCG
             thread's CPU time from the open marker to the close), nothing
             else: the windows' cost without the model
    model    the plugin as the lab runs it (both fast-string rules, every
             access of a window through both models, charged per address)

The in-window figure is the step windows' TCG-thread CPU time, model
against markers; the whole boot's is QEMU's own CPU time (lab.run's record
of the host), model against none. CPU time, not wall time: a loaded host
changes it less, and the host's load at each boot is written beside it.
Each comparison is stated as the A/B states one (nttrace.ab.text.shift_line:
n, median, range, change, interval, p, verdict).

    python3 -m lab.traffic.cost OUT [--kernel base] [--runs 3]
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from lab import ab, lab
from lab.traffic import build as tbuild
from lab.traffic import report
from lab.traffic import run as trun

MODES = ("none", "markers", "model")


def boot(results: Path, mode: str, kernel) -> dict:
    """One traffic boot in a mode (MODES), with both steps: its QEMU CPU
    time, wall time, host load, and each step window's CPU time (the plugin's)."""
    t = trun.run(results, plugin=mode != "none", model=mode == "model", kernel=kernel, steps=trun.STEPS)
    h = t.run.host_conditions
    rec = {"mode": mode, "qemu_cpu_s": h.get("own_cpu_s"), "wall_s": round(t.elapsed_s, 1), "host": h.get("state"),
           "others_share": h.get("others_share"), "loadavg_start": h.get("loadavg_start")}
    if t.output:
        rec["windows"] = [{"label": w.label, "cpu_s": w.cpu_s} for w in t.output.windows]
    return rec


def step_window_cpu(b: dict) -> float:
    """The step windows' TCG-thread CPU time in a boot (seconds)."""
    return round(sum(w["cpu_s"]["tcg_thread"] for w in b["windows"] if w["label"] in report.STEP_LABELS), 3)


def figures(boots: list[dict]) -> dict:
    """Per mode its boots' CPU times, and the two comparisons in words."""
    from nttrace.ab.text import shift_line
    by = {m: [b for b in boots if b["mode"] == m] for m in MODES}
    whole = {m: [b["qemu_cpu_s"] for b in by[m]] for m in MODES}
    windows = {m: [step_window_cpu(b) for b in by[m]] for m in ("markers", "model")}
    per_step = {m: {label: [round(sum(w["cpu_s"]["tcg_thread"] for w in b["windows"] if w["label"] == label), 3)
                            for b in by[m]] for label in report.STEP_LABELS} for m in ("markers", "model")}
    return {"qemu_cpu_s": whole, "step_windows_tcg_cpu_s": windows, "step_windows_by_label": per_step,
            "in_windows": shift_line("markers", windows["markers"], "model", windows["model"], " s"),
            "whole_boot": shift_line("none", whole["none"], "model", whole["model"], " s")}


def run_record(argv: list[str], commit: str, started: str) -> dict:
    """How the run is named and repeated, as lab.ab records it: the command,
    when it ran, the machine, the commit at its start (and at its end when
    the tree changed)."""
    from nttrace.kernel import conditions
    return {"command": "python3 -m lab.traffic.cost " + " ".join(argv), "date": started[:10], "started": started,
            "finished": time.strftime("%F %T"), "machine": conditions.cpu_policy()["cpu"], "cpus": os.cpu_count(),
            "commit": ab.run_commit(commit)}


def main(argv: list[str]) -> int:
    import argparse
    from lab import kernel_build
    ap = argparse.ArgumentParser(prog="python3 -m lab.traffic.cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--kernel", default="base", metavar="VARIANT", help="a lab kernel (default base)")
    ap.add_argument("--runs", type=int, default=3, help="boots of each mode (default 3)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        print("lab.traffic.cost: --runs must be at least 1", file=sys.stderr)
        return 2
    try:
        variant = kernel_build.variant(args.kernel)
    except ValueError as exc:
        print(f"lab.traffic.cost: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    commit, started = ab.checkout_commit(), time.strftime("%F %T")
    boots = []
    try:
        kernel = kernel_build.build(variant)
        for r in range(1, args.runs + 1):
            for mode in MODES:
                ab.say(f"cost: run {r} of {args.runs}, {mode}")
                boots.append({"run": r, **boot(out / f"{mode}-{r}", mode, kernel)})
    except (lab.LabError, trun.TrafficError, tbuild.BuildError, kernel_build.KernelBuildError) as exc:
        print(f"lab.traffic.cost: {exc}", file=sys.stderr)
        return 1
    result = {"kernel": args.kernel, "steps": list(trun.STEPS), "cpu": trun.CPU.describe(), "modes": {
        "none": "no plugin", "markers": "the plugin, model off (model=0): translation-time decoding and the "
        "windows' timing only", "model": "the plugin as the lab runs it"}, "boots": boots,
        **figures(boots), **run_record(argv, commit, started)}
    (out / "cost.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("in_windows", "whole_boot")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
