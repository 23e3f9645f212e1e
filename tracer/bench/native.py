# SPDX-License-Identifier: Apache-2.0
"""`nttrace bench native`: the seeds' tables reproduced with the native
reference on this CPU (the measurements and their method:
nttrace.reference.measurements)."""
from __future__ import annotations

import json
import resource
import sys
import time

from nttrace.kernel import cache_topology
from nttrace.reference import native
from nttrace.reference.measurements import (
    COPY_PRIMS,
    Plan,
    copy_table,
    correctness,
    cpu_info,
    fixed_size_nt,
    memmap_model,
    mixed_nt_hazard,
    page_copy,
    store_forwarding_hazard,
)


def peak_rss_mib() -> float:
    """This program's peak resident set so far: VmHWM, the high-water mark
    of its own address space. (getrusage's ru_maxrss also carries the RSS of
    the address space exec replaced, which for a child of a large process
    is that process's.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_all(plan: Plan, progress=None, llc: cache_topology.LastLevelCache | None = None) -> dict:
    """Every table of `plan`; progress(name, seconds_so_far) before each."""
    t0 = time.monotonic()

    def step(name, fn):
        if progress:
            progress(name, time.monotonic() - t0)
        return fn()
    llc = llc or cache_topology.last_level_cache()
    report = {
        "cpu": dict(cpu_info(), llc_bytes=llc.bytes, llc=llc.as_json()),
        "method": {"cell_s": plan.cell_s, "runs": plan.runs, "cold_runs": plan.cold_runs or plan.runs,
                   "first_run_dropped": True, "evict": plan.evict, "clock": plan.clock,
                   "cold": plan.cold_method(), "largest_buffers_bytes": plan.largest_buffers()},
        "correctness": step("correctness", correctness),
        "copy_table": step("copy_table", lambda: copy_table(plan)),
        "fixed_size_nt": step("fixed_size_nt", lambda: fixed_size_nt(plan)),
        "memmap_model": step("memmap_model", lambda: memmap_model(plan)),
        "page_copy": step("page_copy", lambda: page_copy(plan)),
        "hazards": {
            "store_forwarding": step("store_forwarding", lambda: store_forwarding_hazard(plan)),
            "mixed_nt": step("mixed_nt", lambda: mixed_nt_hazard(plan)),
        },
    }
    report["run"] = {"wall_s": round(time.monotonic() - t0, 2), "peak_rss_mib": round(peak_rss_mib(), 1)}
    return report


def print_report(r: dict, out=sys.stdout) -> None:
    c = r["cpu"]
    print(f"CPU: {c['model']}  LLC {c['llc_bytes'] and c['llc_bytes'] >> 20} MiB  features: "
          + ",".join(k for k, v in c["features"].items() if v), file=out)
    print(f"correctness: {'all primitives byte-exact' if r['correctness']['ok'] else 'FAILURES'}", file=out)
    print("\ncopy table, GB/s median (seed: AMD EPYC 9655 Zen 5)", file=out)
    print(f"{'size':>6} " + " ".join(f"{p:>22}" for p in COPY_PRIMS), file=out)
    for size, row in r["copy_table"]["rows"].items():
        print(f"{size:>6} " + " ".join(f"{row[p]['gbps_median']:>10.2f} ({row[p]['seed_zen5_gbps']:>7.2f})" for p in COPY_PRIMS), file=out)
    print("\nfixed-size MOVNTI, ns per copy, offsets 1..7 (seed ratio B/A)", file=out)
    for size, row in r["fixed_size_nt"]["rows"].items():
        print(f"{size:>6} A {row['variant_a_ns']:8.2f}  B {row['variant_b_ns']:8.2f}  B/A {row['b_over_a']:5.2f} ({row['seed_b_over_a']:.2f})", file=out)
    m = r["memmap_model"]
    print(f"\nmemmap model: {m['descriptors']} x {m['descriptor_size']} B descriptors", file=out)
    for k in ("slow_ms", "template_cached_ms", "template_movnti_ms", "template_nt_ms", "template_nt_compound_ms",
              "movnti_write_limit_ms", "nt_write_limit_ms"):
        if m.get(k) is not None:
            print(f"  {k:<24} {m[k]:9.2f}", file=out)
    def num(v, spec: str, scale=lambda x: x) -> str:
        # None: a cell its clock could not time (measurements.ratio)
        return "untimed" if v is None else format(scale(v), spec)
    over = num(m["template_nt_over_limit"], "+.1f", lambda x: 100 * (x - 1))
    print(f"  template NT ({m.get('widest_nt_store', 'widest NT store')}) {num(m['reduction_pct'], '.1f')}% shorter "
          f"than slow, with 8-byte MOVNTI {num(m.get('movnti_reduction_pct', float('nan')), '.1f')}% "
          f"(seed: 60.4% nd_pmem, 56.4% dax_pmem); {over}% vs the NT write limit",
          file=out)
    print("\ncold 4 KiB page copies", file=out)
    for row in r["page_copy"]["rows"]:
        print(f"  {row['primitive']:<30} {num(row['gbps_median'], '7.2f')} GB/s (min {num(row['gbps_min'], '.2f')})  "
              f"x{num(row['vs_memcpy_median'], '.2f')} vs memcpy", file=out)
    h = r["hazards"]
    sf = h["store_forwarding"]
    print(f"\nhazard, store forwarding (L2-resident {sf['descriptors']} descriptors): refresh+memcpy template "
          f"{sf['refresh_copy_over_slow']:.2f}x the slow path, {sf['refresh_copy_over_register_template']:.2f}x the register template", file=out)
    print("hazard, mixed cached/NT stores at misaligned destinations:", file=out)
    for size, row in h["mixed_nt"]["rows"].items():
        print(f"  {size:>5} B: mixed {row['nt_mixed_ns']:8.1f} ns, all-NT {row['nt_generic_ns']:8.1f} ns, x{row['mixed_over_generic']:.1f}", file=out)
    if "run" in r:
        print(f"\nbench native: {r['run']['wall_s']:.1f} s wall, peak RSS {r['run']['peak_rss_mib']:.0f} MiB "
              f"(cold: {r['method'].get('cold', '?')}; LLC {c['llc']['source'] if c.get('llc') else '?'})", file=out)


def main(args) -> int:
    if not native.have_nt_backend():
        from nttrace.errors import CapabilityError
        raise CapabilityError("no NT backend on this CPU (needs x86-64 with SSE2)")
    llc = cache_topology.last_level_cache()
    plan = Plan.quick(llc.bytes) if args.quick else Plan(llc_bytes=llc.bytes)
    print(f"bench native: the {'quick' if args.quick else 'full'} plan, buffers up to "
          f"{plan.largest_buffers() >> 20} MiB at once, LLC {llc.bytes and llc.bytes >> 20} MiB from {llc.source}",
          file=sys.stderr, flush=True)

    def progress(name, elapsed):
        print(f"... {name} (at {elapsed:.1f} s, peak RSS {peak_rss_mib():.0f} MiB)", file=sys.stderr, flush=True)
    report = run_all(plan, progress, llc)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0
