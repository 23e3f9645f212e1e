"""`nttrace bench probes`: what each BPF program costs per event, from the
kernel's own accounting (kernel.bpf_stats_enabled: run_time_ns / run_cnt
per program, read with bpftool), while a workload drives its attach point.

Workloads: compaction cycles for the migrate tracepoints; calls of the
native memmap model for the memmap program attached by uprobe. The uprobe
figure is the program's run time only, not the uprobe trap around it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from nttrace.errors import CapabilityError, EXIT_OK

STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def bpftool_progs() -> dict[int, dict]:
    try:
        out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CapabilityError(f"bpftool prog show failed: {exc}") from None
    return {p["id"]: p for p in json.loads(out or "[]")}


class bpf_stats:
    """Turn kernel.bpf_stats_enabled on for the block, restoring it after."""

    def __enter__(self):
        try:
            self.old = STATS.read_text().strip()
            STATS.write_text("1")
        except OSError as exc:
            raise CapabilityError(f"cannot enable {STATS}: {exc.strerror}") from None
        return self

    def __exit__(self, *exc):
        STATS.write_text(self.old)


def _baseline(tracepoints: list[str]):
    """The reference programs, attached beside the probe (bpf/bench_baseline.bpf.c)."""
    from bcc import BPF

    from nttrace import bpf as sources
    b = BPF(text=sources.source("bench_baseline.bpf.c").encode())
    for tp in tracepoints:
        b.attach_tracepoint(tp=tp, fn_name="nttrace_bench_empty")
        b.attach_tracepoint(tp=tp, fn_name="nttrace_bench_ktime")
    return b


def _measure(probe: str, options: dict, drive, min_events: int, max_s: float, baseline_tps=()) -> dict:
    from nttrace.tracer import Tracer
    before = set(bpftool_progs())
    with Tracer([probe], options={probe: options}) as t:
        if not t.attached(probe):
            return {"status": "unavailable", "reason": t.status[probe].get("reason")}
        ours = {i: p for i, p in bpftool_progs().items() if i not in before}
        base = _baseline(list(baseline_tps)) if baseline_tps else None
        base_ids = {i: p for i, p in bpftool_progs().items() if i not in before and i not in ours}
        deadline = time.monotonic() + max_s
        rounds = 0
        while time.monotonic() < deadline:
            drive()
            rounds += 1
            now = bpftool_progs()
            if min(now[i].get("run_cnt", 0) for i in ours) >= min_events:
                break
        final = bpftool_progs()
        if base is not None:
            base.cleanup()
    progs = []
    for i in ours:
        p = final.get(i, {})
        cnt, ns = p.get("run_cnt", 0), p.get("run_time_ns", 0)
        progs.append({"id": i, "name": p.get("name", ours[i].get("name")), "run_cnt": cnt, "run_time_ns": ns,
                      "ns_per_event": (ns / cnt) if cnt else None})
    total_cnt = sum(p["run_cnt"] for p in progs)
    total_ns = sum(p["run_time_ns"] for p in progs)
    baselines = {}
    for i in base_ids:
        p = final.get(i, {})
        cnt, ns = p.get("run_cnt", 0), p.get("run_time_ns", 0)
        baselines[p.get("name", str(i))] = (ns / cnt) if cnt else None
    return {"status": "measured", "workload_rounds": rounds, "programs": progs,
            "ns_per_event": (total_ns / total_cnt) if total_cnt else None, "baseline_ns_per_event": baselines}


def run(events: int = 2000, max_s: float = 60.0) -> dict:
    from nttrace import native, triggers
    results = {}
    with bpf_stats():
        results["migrate"] = _measure("migrate", {}, lambda: triggers.compaction(scratch_mib=64, settle_s=0.05),
                                      min_events=min(events, 500), max_s=max_s,
                                      baseline_tps=("migrate:mm_migrate_pages_start", "migrate:mm_migrate_pages"))
        buf = native.Buffer(64 * 64, fill=0)
        try:
            def model_calls():
                for _ in range(500):
                    native.memmap_init(buf, 64, 64, "FS_DAX", 0, "template_nt")
            results["memmap_uprobe"] = _measure("memmap", {"target": "native"}, model_calls,
                                                min_events=events, max_s=max_s)
        finally:
            buf.close()
    return results


def main(args) -> int:
    report = run(events=args.events)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return EXIT_OK
    for name, r in report.items():
        if r["status"] != "measured":
            print(f"{name:<14} unavailable: {r['reason']}")
            continue
        print(f"{name:<14} {r['ns_per_event']:.0f} ns/event on average over {r['workload_rounds']} workload rounds")
        for p in r["programs"]:
            per = f"{p['ns_per_event']:.0f}" if p["ns_per_event"] is not None else "-"
            print(f"  {p['name']:<18} run_cnt {p['run_cnt']:>8} run_time {p['run_time_ns']:>10} ns  {per} ns/event")
        for name, per in r.get("baseline_ns_per_event", {}).items():
            print(f"  reference {name:<18} {per:.0f} ns/event (same tracepoints, same events)" if per else f"  reference {name}: no runs")
    return EXIT_OK
