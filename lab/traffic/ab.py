# SPDX-License-Identifier: Apache-2.0
"""Two kernels' modelled memory traffic, side by side: each booted once in
the traffic guest under the plugin with the memmap and demotion steps, and
the device's bytes per page, and who moved them by kernel function, written
in every A/B format (nttrace.ab.formats: traffic-ab.txt, .md, .json, .html).

    python3 -m lab.traffic.ab base nt-v3 --out traffic-base-nt-v3            # the report, run.json, a summary a side
    python3 -m lab.traffic.ab base nt-v3 --out traffic-base-nt-v3 --review   # and review.txt, printed: for the list

One boot a side: the plugin counts, it does not time, and the guest runs
under icount. The memmap init's device counts repeat exactly from boot to
boot; demotion's within a few pages' lines in 16,400, far below the
change; so no statistics are run. It models memory traffic, not time.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from lab import ab as lab_ab
from lab.traffic import report
from lab.traffic import run as trun
from nttrace.ab import formats

SCENARIOS = ["memmap_fsdax", "memmap_devdax", "demotion"]


def write_report(out: Path, a: str, b: str, t: dict) -> dict[str, Path]:
    """The report in every format, as traffic-ab.<ext> (nttrace.ab.formats' file names)."""
    return formats.write_documents(out, "traffic-ab", f"Modelled memory traffic: {a} against {b}",
                                   [report.ab_section(t, [a, b], title="Modelled memory traffic")])


def run_record(argv: list[str], a: str, b: str, commit: str, started: str, wall_s: float,
               hosts: dict[str, dict]) -> dict:
    """How the run is named and repeated, as lab.ab records it: the command,
    when it ran, the machine, the commit at its start (and at its end when
    the tree changed), the guest CPU, and each boot's host conditions."""
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
    ap.add_argument("--review", action="store_true",
                    help="print the plain-text review (per step and kernel, what is left, by function), and write "
                         "it as review.txt")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        specs = [kernel_build.variant(args.a), kernel_build.variant(args.b)]
    except ValueError as exc:
        print(f"lab.traffic.ab: {exc}", file=sys.stderr)
        return 2
    commit, started, t0 = lab_ab.checkout_commit(), time.strftime("%F %T"), time.monotonic()
    runs, hosts = {}, {}
    windows = report.windows_for(SCENARIOS)
    try:
        for v in specs:
            k = kernel_build.build(v)
            t = trun.run(out / v.name, kernel=k, steps=report.steps_for(windows))
            runs[v.name] = trun.summary(t)
            hosts[v.name] = t.run.host_conditions
            trun.write_summary(out / v.name, runs[v.name])
    except (trun.TrafficError, trun.lab.LabError, trun.tbuild.BuildError, kernel_build.KernelBuildError) as exc:
        print(f"lab.traffic.ab: {exc}", file=sys.stderr)
        return 1
    t = report.figures(runs, windows)
    written = write_report(out, args.a, args.b, t)
    (out / "run.json").write_text(json.dumps(run_record(argv, args.a, args.b, commit, started,
                                                        time.monotonic() - t0, hosts), indent=1))
    if args.review:
        text = report.review(t, [args.a, args.b])
        (out / "review.txt").write_text(text)
        print(text, end="")
    else:
        print(written["markdown"].read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
