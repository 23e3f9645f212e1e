"""The native reference's measurements on this CPU: the seeds' copy table,
fixed-size MOVNTI, the memmap model, cold page copies, the two hazards and
byte-exact correctness. `nttrace bench native` runs and prints them all;
validate's native checks run the quick plan of some.

Method (tinymembench/STREAM style): buffers pre-faulted and at least 4x the
LLC where a table is about memory; each cell repeats until it has run for at
least `cell_s`; the first (warm-up) run of every cell is dropped; min and
median of `runs` runs are reported; comparisons are ratios taken within the
same run, variants interleaved. GB/s is bytes copied per second (1e9).
"""
from __future__ import annotations

import ctypes
import os
import platform
import statistics
import time
from dataclasses import dataclass

from nttrace.reference import native, seeds

COPY_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
COPY_PRIMS = ("movq_unrolled", "rep_movsq", "rep_movsb", "memcpy")
FIXED_BENCH_SIZES = (32, 48, 64, 80, 96)


@dataclass
class Plan:
    cell_s: float = 0.5
    runs: int = 5
    memmap_descriptors: int = seeds.MEMMAP_DESCRIPTORS
    page_copy_bytes: int = 1 << 30
    copy_span: int = 16 << 20  # the batch-page-copy reply's 16 MB buffers

    @classmethod
    def quick(cls) -> "Plan":
        llc = llc_bytes() or (32 << 20)
        return cls(cell_s=0.02, runs=5, memmap_descriptors=max(4 * llc // 64, 1 << 20),
                   page_copy_bytes=max(4 * llc, 64 << 20))


def llc_bytes() -> int | None:
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in os.listdir(base):
            try:
                level = int(open(f"{base}/{idx}/level").read())
                size = open(f"{base}/{idx}/size").read().strip()
            except (OSError, ValueError):
                continue
            mult = {"K": 1 << 10, "M": 1 << 20}.get(size[-1], 1)
            value = int(size.rstrip("KM")) * mult
            if best is None or level >= best[0]:
                best = (level, value)
    except OSError:
        return None
    return best[1] if best else None


def cpu_info() -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": model or platform.processor(), "cpus": os.cpu_count(), "llc_bytes": llc_bytes(),
            "features": native.cpu_features(), "nt_backend": native.have_nt_backend()}


def _stats(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def _repeat_until(fn, cell_s: float) -> float:
    """Calls fn(iters) -> elapsed ns, growing iters until one call lasts cell_s;
    returns ns per iteration of that call."""
    iters = 1
    while True:
        ns = fn(iters)
        if ns >= cell_s * 1e9 or iters >= 1 << 40:
            return ns / iters
        iters = max(iters * 2, int(iters * cell_s * 1e9 / max(ns, 1) * 1.1))


# -- tables -----------------------------------------------------------------
def copy_table(plan: Plan) -> dict:
    lib = native.lib()
    span = plan.copy_span
    rows = {}
    with native.Buffer(span) as src, native.Buffer(span, fill=0) as dst:
        for size in COPY_SIZES:
            per = {p: [] for p in COPY_PRIMS}
            for run in range(plan.runs + 1):
                for p in COPY_PRIMS:  # interleaved
                    idx = native.PRIMITIVES.index(p)
                    ns = _repeat_until(lambda n: lib.nt_bench_copy_ns(idx, dst.addr, src.addr, size, span, n), plan.cell_s)
                    if run:  # first run dropped
                        per[p].append(size / ns)  # bytes/ns == GB/s
            rows[str(size)] = {p: {"gbps_min": min(v), "gbps_median": statistics.median(v),
                                   "seed_zen5_gbps": seeds.COPY_TABLE_ZEN5_GBPS[p][size]} for p, v in per.items()}
    return {"span_bytes": span, "sizes": list(COPY_SIZES), "rows": rows}


def fixed_size_nt(plan: Plan) -> dict:
    lib = native.lib()
    rows = {}
    with native.Buffer(1 << 16) as src, native.Buffer(1 << 16, fill=0) as dst:
        for size in FIXED_BENCH_SIZES:
            per = {"A": [], "B": []}
            for run in range(plan.runs + 1):
                for variant in ("A", "B"):
                    v = 0 if variant == "A" else 1
                    ns = statistics.mean(
                        _repeat_until(lambda n: lib.nt_bench_fixed_ns(v, dst.addr + 4096 + off, src.addr, size, n), plan.cell_s / 7)
                        for off in range(1, 8))
                    if run:
                        per[variant].append(ns)
            a, b = statistics.median(per["A"]), statistics.median(per["B"])
            rows[str(size)] = {
                "variant_a_ns": a, "variant_b_ns": b, "b_over_a": b / a,
                "variant_a_ns_min": min(per["A"]), "variant_b_ns_min": min(per["B"]),
                "seed_us": {"A": seeds.FIXED_SIZE_US["A"][size], "B": seeds.FIXED_SIZE_US["B"][size]},
                "seed_b_over_a": seeds.FIXED_SIZE_US["B"][size] / seeds.FIXED_SIZE_US["A"][size],
            }
    return {"offsets": "1..7 averaged", "rows": rows}


MEMMAP_VARIANTS = (
    ("slow", "slow", 0),
    ("template_cached", "template_cached", 0),
    ("template_nt", "template_nt", 0),
    ("template_nt_compound", "template_nt", 9),
)


def memmap_model(plan: Plan) -> dict:
    nr, size = plan.memmap_descriptors, 64
    times = {name: [] for name, _m, _o in MEMMAP_VARIANTS}
    times["nt_write_limit"] = []
    with native.Buffer(nr * size, fill=0) as buf:
        for run in range(plan.runs + 1):
            for name, method, order in MEMMAP_VARIANTS:
                r = native.memmap_init(buf, nr, size, "FS_DAX", order, method)
                if run:
                    times[name].append(r.elapsed_ns / 1e6)
            t0 = time.perf_counter_ns()
            native.lib().nt_stream_fill(buf.addr, nr * size, 0x0123456789ABCDEF)
            if run:
                times["nt_write_limit"].append((time.perf_counter_ns() - t0) / 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "descriptors": nr, "descriptor_size": size, "namespace_bytes": nr * 4096, "pgmap_type": "FS_DAX",
        "slow_ms": med["slow"], "template_cached_ms": med["template_cached"], "template_nt_ms": med["template_nt"],
        "template_nt_compound_ms": med["template_nt_compound"], "nt_write_limit_ms": med["nt_write_limit"],
        "reduction_pct": 100.0 * (1 - med["template_nt"] / med["slow"]),
        "template_nt_over_limit": med["template_nt"] / med["nt_write_limit"],
        "runs_ms": {k: _stats(v) for k, v in times.items()},
        "seed": seeds.MEMMAP_REBIND_MS,
    }


def store_forwarding_hazard(plan: Plan) -> dict:
    """The template refreshed in memory then copied with wide loads, against
    the slow path and the register template, at a cache-resident size where
    memory bandwidth does not hide it."""
    nr, size = 8192, 64  # 512 KiB: L2-resident
    per = {m: [] for m in ("slow", "template_cached", "template_refresh_copy")}
    with native.Buffer(nr * size, fill=0) as buf:
        for run in range(plan.runs + 1):
            for m in per:
                def call(n, m=m):
                    total = 0
                    for _ in range(n):
                        total += native.memmap_init(buf, nr, size, "FS_DAX", 0, m).elapsed_ns
                    return total
                ns = _repeat_until(call, plan.cell_s / 3) / nr
                if run:
                    per[m].append(ns)
    med = {m: statistics.median(v) for m, v in per.items()}
    return {"descriptors": nr, "ns_per_descriptor": med,
            "refresh_copy_over_slow": med["template_refresh_copy"] / med["slow"],
            "refresh_copy_over_register_template": med["template_refresh_copy"] / med["template_cached"]}


def mixed_nt_hazard(plan: Plan) -> dict:
    """All-NT generic copy against the kernel-shaped mixed one (cached+CLWB
    head/tail, MOVNTI body) at misaligned destinations, one destination
    reused (as the fixed-size microbenchmark does)."""
    lib = native.lib()
    rows = {}
    gen, mixed = native.PRIMITIVES.index("nt_generic"), native.PRIMITIVES.index("nt_mixed")
    with native.Buffer(1 << 16) as src, native.Buffer(1 << 16, fill=0) as dst:
        for size in (64, 256, 1024, 4096):
            per = {"nt_generic": [], "nt_mixed": []}
            for run in range(plan.runs + 1):
                for name, idx in (("nt_generic", gen), ("nt_mixed", mixed)):
                    ns = statistics.mean(
                        _repeat_until(lambda n: lib.nt_bench_copy_ns(idx, dst.addr + 4096 + off, src.addr, size, size, n), plan.cell_s / 7)
                        for off in range(1, 8))
                    if run:
                        per[name].append(ns)
            g, m = statistics.median(per["nt_generic"]), statistics.median(per["nt_mixed"])
            rows[str(size)] = {"nt_generic_ns": g, "nt_mixed_ns": m, "mixed_over_generic": m / g}
    return {"offsets": "1..7 averaged", "rows": rows}


PAGE_VARIANTS = (
    ("memcpy", "memcpy", "none"),
    ("rep_movsb", "rep_movsb", "none"),
    ("movnti_prefetchnta/per_page", "movnti_prefetchnta", "per_page"),
    ("movnti_prefetchnta/per_folio", "movnti_prefetchnta", "per_folio"),
    ("avx2_stream/per_page", "avx2_stream", "per_page"),
    ("avx512_stream/per_page", "avx512_stream", "per_page"),
    ("avx512_stream/per_folio", "avx512_stream", "per_folio"),
)


def page_copy(plan: Plan) -> dict:
    lib = native.lib()
    nbytes = plan.page_copy_bytes
    variants = [v for v in PAGE_VARIANTS if lib.nt_page_method_supported(native.PAGE_METHODS.index(v[1]))]
    gbps = {v[0]: [] for v in variants}
    ratios = {v[0]: [] for v in variants}
    with native.Buffer(nbytes, fill=0x11) as src, native.Buffer(nbytes, fill=0x22) as dst, \
            native.Buffer(max(nbytes // 4, 64 << 20), fill=0x33) as evict:
        for run in range(plan.runs + 1):
            base = None
            for name, method, drain in variants:
                ctypes.memset(evict.addr, run & 0xFF, evict.size)  # push src/dst out of the LLC
                t0 = time.perf_counter_ns()
                native.demotion_copy(dst, src, nbytes, name, method, drain)
                ns = time.perf_counter_ns() - t0
                if run:
                    gbps[name].append(nbytes / ns)
                    base = base if base is not None else nbytes / ns
                    ratios[name].append((nbytes / ns) / base)
    rows = [{"primitive": n, "nt": n.split("/")[0] in native.NT_PAGE_METHODS,
             "drain": next(v[2] for v in variants if v[0] == n),
             "gbps_min": min(g), "gbps_median": statistics.median(g),
             "vs_memcpy_median": statistics.median(ratios[n])} for n, g in gbps.items()]
    return {"bytes": nbytes, "folio_pages": native.FOLIO_PAGES, "cold": True, "rows": rows}


def correctness() -> dict:
    out = {}
    for p in native.PRIMITIVES:
        r = native.selftest_copy(p)
        out[p] = {"cases": r.cases, "failures": r.failures}
    for v in ("A", "B"):
        r = native.selftest_fixed(v)
        out[f"fixed_{v}"] = {"cases": r.cases, "failures": r.failures}
    out["ok"] = all(v["failures"] == 0 for v in out.values() if isinstance(v, dict))
    return out


