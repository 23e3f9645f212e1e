# SPDX-License-Identifier: Apache-2.0
"""How the quick plan's cells start cold, three ways on this host, each run
through nttrace.reference.measurements (the code validate runs), each
method a process of its own so its peak RSS is its own:

  4x-llc     the reference: buffers 4x the LLC (memmap array and each page
             copy buffer), an eviction buffer a quarter of that written
             before every page-copy cell
  flush      the quick plan: 32 MiB of buffers per table, CLFLUSHOPT of a
             cell's buffers before it
  evict-buf  the quick plan's buffers, and an eviction buffer of 1.5x the
             LLC written before every cell (memmap and page copy)

All three time cells on the thread's CPU clock. Per method and round: the
time the two tables took, the eviction's cost per cell, the process's peak
RSS, and the figures the verdicts read (the memmap model's MOVNTI and
widest-store templates against the slow path, the NT page copies against
memcpy: medians and 96% intervals of the runs).

    .venv/bin/python benchmarks/cold_cache_methods.py --rounds 3 \\
        --json benchmarks/cold-cache-methods-xeon-vm-2026-12-05.json

(The files of 2026-12-05, taken at 2685945 and ae803ac, name the memmap
table's eviction cost "memmap"; it is "memmap_model" since.)
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

METHODS = ("4x-llc", "flush", "evict-buf")


def plan_for(method: str, llc: int):
    from nttrace.reference import measurements as m
    quick = m.Plan.quick(llc)
    if method == "flush":
        return quick
    if method == "evict-buf":
        quick.evict, quick.sweep_bytes = "sweep", (3 * llc // 2) & ~4095
        return quick
    big = (4 * llc) & ~((2 << 20) - 1)
    return m.Plan(cell_s=quick.cell_s, runs=quick.runs, cold_runs=5, memmap_descriptors=big // 64,
                  page_copy_bytes=big, evict="sweep", page_variants=quick.page_variants, clock="thread_cpu",
                  memmap_compound=False, llc_bytes=llc)


def one(method: str) -> dict:
    from nttrace.kernel import cache_topology
    from nttrace.reference import measurements as m
    from nttrace.validate.checks import native as checks
    llc = cache_topology.last_level_cache().bytes
    plan = plan_for(method, llc)
    t0 = time.monotonic()
    mm = m.memmap_model(plan)
    t1 = time.monotonic()
    pc = m.page_copy(plan)
    t2 = time.monotonic()
    memmap = checks.memmap_verdict(mm)
    demotion = checks.demotion_verdict(pc)
    pick = ("median", "low", "high", "n")
    return {
        "method": method, "llc_bytes": llc, "cold": plan.cold_method(pc["flush_insn"]),
        "memmap_bytes": mm["bytes"], "page_copy_bytes": pc["bytes"], "largest_buffers_bytes": plan.largest_buffers(),
        "memmap_s": round(t1 - t0, 3), "page_copy_s": round(t2 - t1, 3),
        "evict_ms_per_cell": {"memmap_model": mm["evict_ms_median"], "page_copy": pc["evict_ms_median"]},
        "memmap_shorter_pct": {k: {f: memmap.evidence[f"{k}_shorter_pct"][f] for f in pick}
                               for k in ("template_movnti", "template_nt", "template_cached")},
        "page_copy_vs_memcpy": {k: {f: v[f] for f in pick} for k, v in demotion.evidence["vs_memcpy"].items()},
        "verdicts": {"zone_device_template": memmap.status, "nt_demotion": demotion.status},
    }


def run_child(method: str) -> dict:
    p = subprocess.Popen([sys.executable, __file__, "--one", method], stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    out = p.stdout.read()
    _pid, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{method}: exit {os.waitstatus_to_exitcode(status)}")
    r = json.loads(out)
    r.update(wall_s=round(time.monotonic() - t0, 2), peak_rss_mib=round(ru.ru_maxrss / 1024, 1),
             loadavg_before=os.getloadavg())
    return r


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/cold_cache_methods.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--one", choices=METHODS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one)))
        return 0
    rounds = []
    for i in range(args.rounds):
        order = METHODS if i % 2 == 0 else METHODS[::-1]
        rounds.append({m: run_child(m) for m in order})
        print(json.dumps({m: (r["wall_s"], r["peak_rss_mib"], r["verdicts"]) for m, r in rounds[-1].items()}),
              file=sys.stderr)
    summary = {}
    for m in METHODS:
        rs = [r[m] for r in rounds]
        summary[m] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in rs),
            "tables_s_median": statistics.median(r["memmap_s"] + r["page_copy_s"] for r in rs),
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in rs),
            "evict_ms_per_cell_median": {k: statistics.median(r["evict_ms_per_cell"][k] for r in rs)
                                         for k in ("memmap_model", "page_copy")},
            "memmap_shorter_pct_medians": {k: [round(r["memmap_shorter_pct"][k]["median"], 1) for r in rs]
                                           for k in rs[0]["memmap_shorter_pct"]},
            "page_copy_vs_memcpy_medians": {k: [round(r["page_copy_vs_memcpy"][k]["median"], 3) for r in rs]
                                            for k in rs[0]["page_copy_vs_memcpy"]},
            "verdicts": [r["verdicts"] for r in rs],
        }
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    report = {"command": "benchmarks/cold_cache_methods.py " + " ".join(argv), "rounds": rounds, "summary": summary,
              "host": {"cpu": model, "cpus": os.cpu_count(), "kernel": platform.release()}, "commit": commit,
              "taken": time.strftime("%F %T UTC", time.gmtime())}
    text = json.dumps(report, indent=1) + "\n"
    if args.json:
        args.json.write_text(text)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
