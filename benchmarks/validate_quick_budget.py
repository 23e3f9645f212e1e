# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate --quick` as a whole, against its floors, in turn: wall,
CPU and peak RSS of each command as the kernel accounts the reaped child
(benchmarks/whole_command.py's one()), with the load average before each
run, so the ratios are taken within one run while the host's load drifts.

Commands (one round runs each once, the order alternating round by round):
  quick            nttrace validate --quick                (this host's LLC)
  quick-llc32m     NTTRACE_LLC_SIZE=32M nttrace validate --quick
                   (a 32 MiB LLC emulated: the size the plan reads, not a different CPU)
  floor-report     nttrace validate --quick --check 'env.*'   (start-up, BTF, the capability report)
  floor-import     python -c 'import nttrace.cli'            (interpreter and import)
and, for where the peak comes from, each alone:
  native           nttrace validate --quick --check 'native.*'
  migrate_observed nttrace validate --quick --check probe.migrate
With --before VENV, also that venv's nttrace validate --quick (an older
nttrace installed the same way), for the change on this host.

    .venv/bin/python benchmarks/validate_quick_budget.py --rounds 3 \\
        --json benchmarks/validate-quick-budget-xeon-vm-2026-12-05.json

(The file of 2026-12-05, taken at ae803ac, names the migrate_observed
command "migrate"; until the compaction check was folded into probe.migrate
that command ran its former id, kernel.migrate_observed.)
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from whole_command import FIGURES, one  # noqa: E402


def commands(nttrace: str, python: str, before: str | None) -> dict[str, tuple[list[str], dict]]:
    env = {k: v for k, v in os.environ.items() if k != "NTTRACE_LLC_SIZE"}
    cmds = {
        "quick": ([nttrace, "validate", "--quick"], env),
        "quick-llc32m": ([nttrace, "validate", "--quick"], dict(env, NTTRACE_LLC_SIZE="32M")),
        "floor-report": ([nttrace, "validate", "--quick", "--check", "env.*"], env),
        "floor-import": ([python, "-c", "import nttrace.cli"], env),
        "native": ([nttrace, "validate", "--quick", "--check", "native.*"], env),
        "migrate_observed": ([nttrace, "validate", "--quick", "--check", "probe.migrate"], env),
    }
    if before:
        cmds["before"] = ([str(Path(before) / "bin" / "nttrace"), "validate", "--quick"], env)
    return cmds


def run(cmd: list[str], env: dict) -> dict:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)       # one() runs the child with this process's environment
    try:
        load = os.getloadavg()
        r = one(cmd)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    r["loadavg_before"] = [round(x, 2) for x in load]
    return r


def summary(runs: list[dict]) -> dict:
    out = {}
    for k in FIGURES:
        v = [r[k] for r in runs]
        out[k] = {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v)}
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/validate_quick_budget.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--before", metavar="VENV", help="a venv with an older nttrace, run as 'before'")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    exe = Path(sys.executable)
    cmds = commands(str(exe.with_name("nttrace")), str(exe), args.before)
    names = list(cmds)
    for _ in range(args.warmup):
        for name in names:
            run(*cmds[name])
    rounds = []
    for i in range(args.rounds):
        order = names if i % 2 == 0 else names[::-1]
        rounds.append({name: run(*cmds[name]) for name in order})
        print(json.dumps({n: (r["wall_s"], r["peak_rss_mib"], r["rc"]) for n, r in rounds[-1].items()}),
              file=sys.stderr, flush=True)
    per = {name: [r[name] for r in rounds] for name in names}
    ratios = {}
    for a, b in (("quick", "floor-report"), ("quick", "floor-import"), ("quick-llc32m", "floor-report"),
                 ("quick", "before")):
        if a in per and b in per:
            ratios[f"{a}/{b}"] = {k: [round(x[k] / y[k], 3) if y[k] else None for x, y in zip(per[a], per[b])]
                                  for k in ("wall_s", "peak_rss_mib")}
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    llc = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    report = {
        "command": "benchmarks/validate_quick_budget.py " + " ".join(argv),
        "commands": {n: {"argv": c, "env": {"NTTRACE_LLC_SIZE": e["NTTRACE_LLC_SIZE"]} if "NTTRACE_LLC_SIZE" in e else {}}
                     for n, (c, e) in cmds.items()},
        "rounds": rounds, "summary": {n: summary(v) for n, v in per.items()}, "ratios": ratios,
        "warmup": args.warmup, "commit": commit,
        "host": {"cpu": model, "cpus": os.cpu_count(), "kernel": platform.release(),
                 "llc": next((line.split(":", 1)[1].strip() for line in llc.splitlines() if line.startswith("L3")), None)},
        "taken": time.strftime("%F %T UTC", time.gmtime()),
    }
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({n: {k: s[k]["median"] for k in ("wall_s", "peak_rss_mib")} for n, s in report["summary"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
