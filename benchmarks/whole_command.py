# SPDX-License-Identifier: Apache-2.0
"""Time a command as a whole process: wall, user and system CPU, and peak
resident memory (the kernel's accounting of the reaped child, wait4), over
counted runs after a warm-up; write the runs and their min/median/max to a
raw file for BENCHMARKS.md.

    python3 benchmarks/whole_command.py --runs 5 --json benchmarks/validate-quick-DATE.json \\
        -- .venv/bin/nttrace validate --quick

With --vs 'OTHER COMMAND' the two run in turn (A B A B ..., after a warm-up
of each) and the file also holds B's runs and the ratio A/B of each pair, so
a comparison holds while the machine's speed drifts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one(cmd: list[str]) -> dict:
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": round(wall, 3), "user_s": round(ru.ru_utime, 3), "sys_s": round(ru.ru_stime, 3),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 3), "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
            "rc": p.returncode}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/whole_command.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--vs", metavar="'COMMAND'", help="a second command (one string, split as a shell would), run in turn")
    ap.add_argument("--labels", metavar="THIS,OTHER", help="what the two commands are, for the tables (with --vs)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    other = shlex.split(args.vs) if args.vs else None
    for _ in range(args.warmup):
        one(cmd)
        if other:
            one(other)
    runs, runs_b = [], []
    for _ in range(args.runs):
        runs.append(one(cmd))
        if other:
            runs_b.append(one(other))
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    report = {"command": " ".join(cmd), "runs": runs, "warmup": args.warmup, "summary": _summary(runs),
              "host": {"cpu": model, "cpus": os.cpu_count(), "kernel": platform.release()},
              "taken": time.strftime("%F %T UTC", time.gmtime())}
    if other:
        report.update({"vs": " ".join(other), "labels": (args.labels or "this,other").split(",", 1),
                       "runs_vs": runs_b, "summary_vs": _summary(runs_b),
                       "ratio": _summary([{k: a[k] / b[k] if b[k] else None for k in FIGURES}
                                          for a, b in zip(runs, runs_b)])})
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("summary", "summary_vs", "ratio") if k in report}))
    return 0 if all(r["rc"] == 0 for r in runs + runs_b) else 1


FIGURES = ("wall_s", "user_s", "sys_s", "cpu_s", "peak_rss_mib")


def _summary(runs: list[dict]) -> dict:
    out = {}
    for k in FIGURES:
        values = [r[k] for r in runs if r[k] is not None]
        out[k] = {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else None
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
