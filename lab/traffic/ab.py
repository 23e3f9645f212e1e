# SPDX-License-Identifier: Apache-2.0
"""Two kernels' modelled memory traffic, side by side: each booted once in
the traffic guest under the plugin with the memmap and demotion steps, and
the device's bytes per page written as markdown and JSON.

    python3 -m lab.traffic.ab base nt-v3 --out traffic-base-nt-v3   # traffic-ab.md, .json, run.json

One boot a side: the plugin counts, it does not time, and the guest runs
under icount. The memmap init's device counts repeat exactly from boot to
boot; demotion's within a few pages' lines in 16,400 (which pages reclaim
takes), far below the change; so no statistics are run. It models memory
traffic, not time.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from lab.traffic import run as trun

STEP_LABELS = {"rebind_fsdax": "memmap init, fsdax -M dev (per initialised page)",
               "rebind_devdax": "memmap init, devdax -a 2M (per initialised page)",
               "demotion": "demotion by memory.reclaim (per demoted page)"}


def per_page(summary: dict) -> dict[str, dict]:
    """label -> the device's bytes read and written and the LLC's fills
    (both targets) per page, from the first window of each step label
    (the second is the in-boot repeat)."""
    out = {}
    for w in summary["windows"]:
        if w["label"] not in STEP_LABELS or w["label"] in out or not w.get("pages"):
            continue
        n = w["pages"]
        pm, dr = w["counts"]["pmem"], w["counts"]["dram"]
        out[w["label"]] = {
            "pages": n,
            "device_read_per_page": round(w["pmem_device_bytes"]["read"] / n, 1),
            "device_written_per_page": round(w["pmem_device_bytes"]["written"] / n, 1),
            "pmem_fills_per_page": round((pm["fills_load"] + pm["fills_store"]) / n, 2),
            "llc_fills_per_page": round((pm["fills_load"] + pm["fills_store"] + dr["fills_load"]
                                         + dr["fills_store"]) / n, 2),
            "nt_lines_per_page": round(pm["nt_line_writes"] / n, 2),
        }
    return out


def markdown(a_name: str, a: dict, b_name: str, b: dict, model: dict) -> str:
    pa, pb = per_page(a), per_page(b)
    lines = [f"# Modelled memory traffic: {a_name} against {b_name}", "",
             "The QEMU traffic plugin's counts (lab/traffic/): it models memory traffic, not time. "
             f"LLC {model['llc_bytes'] >> 20} MiB, {model['ways']} ways, {model['line']}-byte lines, "
             f"{model['wc_buffers']} write-combining buffers; {model['policy']}. "
             "One boot a side: the device's counts repeat from boot to boot (the memmap init's exactly, "
             "demotion's within a few pages' lines: reclaim's own variation), far below the change, "
             "so no statistics are run.", "",
             f"| step | figure | {a_name} | {b_name} |", "|---|---|---:|---:|"]
    for label, what in STEP_LABELS.items():
        if label not in pa and label not in pb:
            continue
        for key, name in (("pages", "pages"), ("device_read_per_page", "device bytes read / page"),
                          ("device_written_per_page", "device bytes written / page"),
                          ("pmem_fills_per_page", "LLC fills from the device / page"),
                          ("llc_fills_per_page", "LLC fills, all / page"),
                          ("nt_lines_per_page", "NT full-line writes / page")):
            lines.append(f"| {what} | {name} | {pa.get(label, {}).get(key, '-')} | {pb.get(label, {}).get(key, '-')} |")
    return "\n".join(lines) + "\n"


def run_record(argv: list[str], a: str, b: str, commit: str, started: str, wall_s: float,
               hosts: dict[str, dict]) -> dict:
    """How the run is named and repeated, as lab.ab records it: the command,
    when it ran, the machine, the commit at its start (and at its end when
    the tree changed), the guest CPU, and each boot's host conditions."""
    from lab import ab as lab_ab     # nttrace's conditions: imported here, so per_page needs no nttrace
    from nttrace.kernel import conditions
    keep = ("state", "why", "others_share", "loadavg_start", "own_cpu_s", "window_s")
    return {"a": a, "b": b, "command": "python3 -m lab.traffic.ab " + " ".join(argv), "started": started,
            "finished": time.strftime("%F %T"), "wall_s": round(wall_s, 1),
            "machine": conditions.cpu_policy()["cpu"], "cpus": os.cpu_count(), "commit": lab_ab.run_commit(commit),
            "cpu": trun.CPU.describe(),
            "host": {name: {k: h[k] for k in keep if k in h} for name, h in hosts.items()}}


def main(argv: list[str]) -> int:
    import argparse
    from lab import kernel_build
    ap = argparse.ArgumentParser(prog="python3 -m lab.traffic.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        specs = [kernel_build.variant(args.a), kernel_build.variant(args.b)]
    except ValueError as exc:
        print(f"lab.traffic.ab: {exc}", file=sys.stderr)
        return 2
    from lab import ab as lab_ab
    commit, started, t0 = lab_ab.checkout_commit(), time.strftime("%F %T"), time.monotonic()
    summaries, hosts = [], {}
    try:
        for v in specs:
            k = kernel_build.build(v)
            t = trun.run(out / v.name, kernel=k, steps=("memmap", "demotion"))
            summaries.append(trun.summary(t))
            hosts[v.name] = t.run.host_conditions
            (out / v.name / "traffic-summary.json").write_text(json.dumps(summaries[-1], indent=1))
    except (trun.TrafficError, trun.lab.LabError, trun.tbuild.BuildError, kernel_build.KernelBuildError) as exc:
        print(f"lab.traffic.ab: {exc}", file=sys.stderr)
        return 1
    md = markdown(args.a, summaries[0], args.b, summaries[1], summaries[0]["model"])
    (out / "traffic-ab.md").write_text(md)
    (out / "traffic-ab.json").write_text(json.dumps({"a": args.a, "b": args.b, "model": summaries[0]["model"],
                                                     args.a: per_page(summaries[0]),
                                                     args.b: per_page(summaries[1])}, indent=1))
    (out / "run.json").write_text(json.dumps(run_record(argv, args.a, args.b, commit, started,
                                                        time.monotonic() - t0, hosts), indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
