"""`nttrace bench native`: the seeds' tables reproduced with the native
reference on this CPU (the measurements and their method:
nttrace.reference.measurements)."""
from __future__ import annotations

import json
import sys

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


def run_all(plan: Plan, progress=None) -> dict:
    def step(name, fn):
        if progress:
            progress(name)
        return fn()
    return {
        "cpu": cpu_info(),
        "method": {"cell_s": plan.cell_s, "runs": plan.runs, "first_run_dropped": True},
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
    for k in ("slow_ms", "template_cached_ms", "template_nt_ms", "template_nt_compound_ms", "nt_write_limit_ms"):
        print(f"  {k:<24} {m[k]:9.2f}", file=out)
    print(f"  template NT {m['reduction_pct']:.1f}% shorter than slow (seed: 60.4% nd_pmem, 56.4% dax_pmem); "
          f"{100 * (m['template_nt_over_limit'] - 1):+.1f}% vs the NT write limit", file=out)
    print("\ncold 4 KiB page copies", file=out)
    for row in r["page_copy"]["rows"]:
        print(f"  {row['primitive']:<30} {row['gbps_median']:7.2f} GB/s (min {row['gbps_min']:.2f})  x{row['vs_memcpy_median']:.2f} vs memcpy", file=out)
    h = r["hazards"]
    sf = h["store_forwarding"]
    print(f"\nhazard, store forwarding (L2-resident {sf['descriptors']} descriptors): refresh+memcpy template "
          f"{sf['refresh_copy_over_slow']:.2f}x the slow path, {sf['refresh_copy_over_register_template']:.2f}x the register template", file=out)
    print("hazard, mixed cached/NT stores at misaligned destinations:", file=out)
    for size, row in h["mixed_nt"]["rows"].items():
        print(f"  {size:>5} B: mixed {row['nt_mixed_ns']:8.1f} ns, all-NT {row['nt_generic_ns']:8.1f} ns, x{row['mixed_over_generic']:.1f}", file=out)


def main(args) -> int:
    if not native.have_nt_backend():
        from nttrace.errors import CapabilityError
        raise CapabilityError("no NT backend on this CPU (needs x86-64 with SSE2)")
    plan = Plan.quick() if args.quick else Plan()
    progress = None if args.json else (lambda name: print(f"... {name}", file=sys.stderr, flush=True))
    report = run_all(plan, progress)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0
