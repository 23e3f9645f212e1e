"""Time a command as a whole process: wall, user and system CPU, and peak
resident memory (the kernel's accounting of the reaped child, wait4), over
counted runs after a warm-up; write the runs and their min/median/max to a
raw file for BENCHMARKS.md.

    python3 benchmarks/whole_command.py --runs 5 --json benchmarks/validate-quick-DATE.json \\
        -- .venv/bin/nttrace validate --quick
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    for _ in range(args.warmup):
        one(cmd)
    runs = [one(cmd) for _ in range(args.runs)]
    summary = {k: {"min": min(r[k] for r in runs), "median": statistics.median(r[k] for r in runs),
                   "max": max(r[k] for r in runs)} for k in ("wall_s", "user_s", "sys_s", "cpu_s", "peak_rss_mib")}
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    report = {"command": " ".join(cmd), "runs": runs, "warmup": args.warmup, "summary": summary,
              "host": {"cpu": model, "cpus": os.cpu_count(), "kernel": platform.release()},
              "taken": time.strftime("%F %T UTC", time.gmtime())}
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary))
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
