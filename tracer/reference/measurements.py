# SPDX-License-Identifier: Apache-2.0
"""The native reference's measurements on this CPU: the seeds' copy table,
fixed-size MOVNTI, the memmap model, cold page copies, the two hazards and
byte-exact correctness. `nttrace bench native` runs and prints them all (the
full plan); validate's native checks run the quick plan of some.

Method (tinymembench/STREAM style): buffers pre-faulted; each cell repeats
until it has run for at least `cell_s`; the first (warm-up) run of every cell
is dropped; min and median of `runs` runs are reported; comparisons are
ratios taken within the same run, variants interleaved. GB/s is bytes copied
per second (1e9).

Cold caches, two ways (`Plan.evict`):
  "sweep"  the full plan: buffers at least 4x the LLC where a table is about
           memory, and an eviction buffer written before every page-copy cell.
  "flush"  the quick plan: buffers bounded by QUICK_BUDGET_BYTES whatever the
           LLC, and every line of a cell's buffers written back and evicted
           (CLFLUSHOPT, or CLFLUSH) before the cell, so it starts from memory
           as it would after a working set several times the LLC. Cheaper in
           time and memory than an eviction buffer, which must exceed the LLC
           (measured against the 4x-LLC method: `git show a3f1339:BENCHMARKS.md`,
           "validate --quick within a budget"). What it
           does not reproduce: a cached copy's dirty lines stay in the LLC
           when the cell ends, where at 4x the LLC they would be written back
           during it.
"""
from __future__ import annotations

import ctypes
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass

from nttrace.reference import native, seeds

COPY_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
COPY_PRIMS = ("movq_unrolled", "rep_movsq", "rep_movsb", "memcpy")
FIXED_BENCH_SIZES = (32, 48, 64, 80, 96)

# The quick plan's bound: the most one quick table's buffers hold at once
# (the memmap model's descriptor array; a page copy's source plus its
# destination), whatever the LLC.
QUICK_BUDGET_BYTES = 32 << 20
QUICK_RUNS = 15


@dataclass
class Plan:
    cell_s: float = 0.5
    runs: int = 5
    memmap_descriptors: int = seeds.MEMMAP_DESCRIPTORS
    page_copy_bytes: int = 1 << 30
    copy_span: int = 16 << 20  # the batch-page-copy reply's 16 MB buffers
    evict: str = "sweep"       # "sweep" or "flush" (the module docstring)
    page_variants: tuple[str, ...] | None = None  # PAGE_VARIANTS names; None: all this CPU has
    llc_bytes: int | None = None   # the LLC the plan was made for (for the evidence)
    budget_bytes: int | None = None
    clock: str = "wall"        # memmap and page-copy cells: "wall" or "thread_cpu" (see _clock_ns)
    memmap_compound: bool = True   # the order-9 compound variant of the memmap table
    cold_runs: int | None = None   # runs of the memmap and page-copy tables (None: `runs`)
    sweep_bytes: int | None = None  # "sweep": the eviction buffer (None: a quarter of page_copy_bytes,
    #                                 at least 64 MiB, page copies only); set, the memmap cells sweep too

    @classmethod
    def quick(cls, llc_bytes: int | None) -> "Plan":
        """Bounded by QUICK_BUDGET_BYTES whatever `llc_bytes` is: the same
        sizes on a 4 MiB and a 480 MiB LLC; cold by flushing. The LLC only
        decides how the evidence describes it (`cold_method`)."""
        return cls(cell_s=0.02, runs=5, cold_runs=QUICK_RUNS, memmap_descriptors=QUICK_BUDGET_BYTES // 64,
                   page_copy_bytes=QUICK_BUDGET_BYTES // 2, evict="flush", page_variants=QUICK_PAGE_VARIANTS,
                   llc_bytes=llc_bytes, budget_bytes=QUICK_BUDGET_BYTES, clock="thread_cpu",
                   memmap_compound=False)

    def largest_buffers(self) -> int:
        """The bytes the plan's memmap or page-copy table holds at once."""
        sweep = self.sweep_size() if self.evict == "sweep" else 0
        return max(self.memmap_descriptors * 64 + (sweep if self.sweep_bytes else 0), 2 * self.page_copy_bytes + sweep)

    def sweep_size(self) -> int:
        return self.sweep_bytes or max(self.page_copy_bytes // 4, 64 << 20)

    def cold_method(self, flush_insn: str | None = None) -> str:
        """How a cell starts cold, in words."""
        llc = self.llc_bytes
        if self.evict == "flush":
            insn = (flush_insn or "CLFLUSHOPT/CLFLUSH").upper()
            if llc and 4 * llc <= self.page_copy_bytes:
                return f"buffers at least 4x the {llc >> 20} MiB LLC, and {insn} of them before every cell"
            why = f"the {llc >> 20} MiB LLC" if llc else "an LLC of unknown size"
            return (f"{insn} of the cell's buffers before every cell ({self.page_copy_bytes >> 20} MiB buffers "
                    f"cannot evict {why} by themselves; the quick plan holds at most "
                    f"{(self.budget_bytes or 0) >> 20} MiB)")
        if self.sweep_bytes:
            return f"a {self.sweep_bytes >> 20} MiB eviction buffer written before every cell"
        size = f"{self.page_copy_bytes >> 20} MiB page-copy buffers"
        if llc:
            size += f" ({self.page_copy_bytes / llc:.1f}x the {llc >> 20} MiB LLC)"
        return f"{size} and a {self.sweep_size() >> 20} MiB eviction buffer written before every page-copy cell"


CLOCKS = {
    # CLOCK_MONOTONIC: what a cell took, including any time another task
    # had the CPU (the full plan's 0.5 s cells average that out).
    "wall": time.perf_counter_ns,
    # CLOCK_THREAD_CPUTIME_ID, as perf's task-clock: only the time this
    # thread was on a CPU (stalls on memory included), so a millisecond cell
    # that another task's timeslice interrupts is not counted as slower.
    "thread_cpu": time.thread_time_ns,
}


def _clock_ns(plan: Plan):
    return CLOCKS[plan.clock]


def clock_tick_ns(clock, steps: int = 5) -> int:
    """The smallest step `clock` was seen to take (the least of `steps`
    steps): about 1 us for the thread CPU clock on bare metal, a whole
    scheduler tick (4 ms at HZ=250) where the kernel's sched_clock cannot
    use the TSC, as in some TCG guests. A cell shorter than a few ticks
    measures 0 or one tick, not its time."""
    seen = []
    for _ in range(steps):
        a = clock()
        b = a
        while b == a:
            b = clock()
        seen.append(b - a)
    return min(seen)


# A cell is timed only where it lasted at least this many of its clock's
# ticks (its time then known to within 10%); a shorter one, 0 ns included,
# cannot be timed on that clock and the verdicts say so.
MIN_TICKS_PER_CELL = 10


def ratio(num: float, den: float) -> float | None:
    """num / den, or None where den is 0 (a cell its clock could not time)."""
    return num / den if den else None


def _cold_runs(plan: Plan) -> int:
    return plan.cold_runs if plan.cold_runs is not None else plan.runs


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free interval for the median: the order statistics
    (x(k), x(n+1-k)) with the largest k whose coverage, 1 - 2 P(Bin(n, 1/2) < k),
    is still at least `level`. Returns (low, high, coverage); with too few
    values for `level` (n < 6 at 0.95), the whole range and its coverage."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return xs[k - 1], xs[n - k], coverage(k)


def cpu_info() -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": model or platform.processor(), "cpus": os.cpu_count(),
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
    ("template_nt", "template_nt", 0),            # the widest NT store this CPU has
    ("template_movnti", "template_movnti", 0),    # 8-byte MOVNTI: the series' memcpy_nontemporal()
    ("template_nt_compound", "template_nt", 9),
)
# Pure NT writes over the same array: the write limit of each store width.
MEMMAP_LIMITS = (("nt_write_limit", "nt_stream_fill"), ("movnti_write_limit", "nt_movnti_fill"))


def widest_nt_store() -> str:
    f = native.cpu_features()
    return "AVX-512 64-byte streaming store" if f["avx512f"] else \
        "AVX2 32-byte streaming store" if f["avx2"] else "SSE2 16-byte streaming store"


def memmap_model(plan: Plan) -> dict:
    nr, size = plan.memmap_descriptors, 64
    lib = native.lib()
    variants = [v for v in MEMMAP_VARIANTS if plan.memmap_compound or v[2] == 0]
    times = {name: [] for name, _m, _o in variants}
    times.update({name: [] for name, _fn in MEMMAP_LIMITS})
    flush_insn = None
    clock = _clock_ns(plan)
    tick_ns = clock_tick_ns(clock) if plan.clock != "wall" else clock_tick_ns(time.monotonic_ns)
    evict_ns = []
    sweep = plan.evict == "sweep" and plan.sweep_bytes

    def evict(buf, sweeper, run):
        nonlocal flush_insn
        t = time.perf_counter_ns()
        if plan.evict == "flush":
            flush_insn = native.flush(buf)
        elif sweep:
            ctypes.memset(sweeper.addr, run & 0xFF, sweeper.size)
        evict_ns.append(time.perf_counter_ns() - t)
    with native.Buffer(nr * size, fill=0) as buf, native.Buffer(plan.sweep_bytes if sweep else 4096) as sweeper:
        for run in range(_cold_runs(plan) + 1):
            for name, method, order in variants:
                evict(buf, sweeper, run)
                t0 = clock()
                r = native.memmap_init(buf, nr, size, "FS_DAX", order, method)
                ns = clock() - t0 if plan.clock != "wall" else r.elapsed_ns  # wall: the model's own clock
                if run:
                    times[name].append(ns / 1e6)
            for name, fn in MEMMAP_LIMITS:
                evict(buf, sweeper, run)
                t0 = clock()
                getattr(lib, fn)(buf.addr, nr * size, 0x0123456789ABCDEF)
                if run:
                    times[name].append((clock() - t0) / 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "descriptors": nr, "descriptor_size": size, "namespace_bytes": nr * 4096, "pgmap_type": "FS_DAX",
        "bytes": nr * size, "evict": plan.evict, "flush_insn": flush_insn, "clock": plan.clock,
        "evict_ms_median": statistics.median(evict_ns) / 1e6, "clock_tick_ms": tick_ns / 1e6,
        "widest_nt_store": widest_nt_store(),
        "slow_ms": med["slow"], "template_cached_ms": med["template_cached"], "template_nt_ms": med["template_nt"],
        "template_movnti_ms": med["template_movnti"],
        "template_nt_compound_ms": med.get("template_nt_compound"), "nt_write_limit_ms": med["nt_write_limit"],
        "movnti_write_limit_ms": med["movnti_write_limit"],
        "reduction_pct": _shorter_pct(med["template_nt"], med["slow"]),
        "movnti_reduction_pct": _shorter_pct(med["template_movnti"], med["slow"]),
        "template_nt_over_limit": ratio(med["template_nt"], med["nt_write_limit"]),
        "runs_ms": {k: _stats(v) for k, v in times.items()},
        "per_run_ms": times,
        "seed": seeds.MEMMAP_REBIND_MS,
    }


def _shorter_pct(t: float, base: float) -> float | None:
    r = ratio(t, base)
    return None if r is None else 100.0 * (1 - r)


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
    ("movnti_prefetchnta/none", "movnti_prefetchnta", "none"),          # RFC v2: no drain
    ("movnti_prefetchnta/per_page", "movnti_prefetchnta", "per_page"),
    ("movnti_prefetchnta/per_folio", "movnti_prefetchnta", "per_folio"),  # RFC v3: wmb() per folio
    ("avx2_stream/per_page", "avx2_stream", "per_page"),
    ("avx512_stream/per_page", "avx512_stream", "per_page"),
    ("avx512_stream/per_folio", "avx512_stream", "per_folio"),
    ("avx2_stream/per_folio", "avx2_stream", "per_folio"),
)
# The quick plan's: memcpy, the RFC's MOVNTI copy drained per page, per
# folio and not, and the widest streaming store this CPU has per folio.
QUICK_PAGE_VARIANTS = ("memcpy", "movnti_prefetchnta/none", "movnti_prefetchnta/per_page",
                       "movnti_prefetchnta/per_folio", "widest/per_folio")


def _page_variants(plan: Plan) -> list[tuple[str, str, str]]:
    lib = native.lib()
    have = [v for v in PAGE_VARIANTS if lib.nt_page_method_supported(native.PAGE_METHODS.index(v[1]))]
    if plan.page_variants is None:
        return [v for v in have if v[0] != "avx2_stream/per_folio"]  # the full plan's table as before
    out = []
    for name in plan.page_variants:
        if name == "widest/per_folio":
            widest = next((v for v in have if v[0] in ("avx512_stream/per_folio", "avx2_stream/per_folio")), None)
            if widest:
                out.append(widest)
        else:
            out.extend(v for v in have if v[0] == name)
    return out


def page_copy(plan: Plan) -> dict:
    """Cold page copies, variants interleaved in each run. A cell its clock
    timed at 0 ns has no speed: its run's ratios to memcpy are left out
    (`unresolved_runs` counts them) and, with no timed run, its GB/s are None."""
    nbytes = plan.page_copy_bytes
    variants = _page_variants(plan)
    ns_runs = {v[0]: [] for v in variants}
    flush_insn = None
    clock = _clock_ns(plan)
    tick_ns = clock_tick_ns(clock)
    sweep = plan.evict == "sweep"
    evict_ns = []
    with native.Buffer(nbytes, fill=0x11) as src, native.Buffer(nbytes, fill=0x22) as dst, \
            native.Buffer(plan.sweep_size() if sweep else 4096, fill=0x33) as evict:
        for run in range(_cold_runs(plan) + 1):
            for name, method, drain in variants:
                t = time.perf_counter_ns()
                if sweep:
                    ctypes.memset(evict.addr, run & 0xFF, evict.size)  # push src/dst out of the LLC
                else:
                    native.flush(src)
                    flush_insn = native.flush(dst)
                evict_ns.append(time.perf_counter_ns() - t)
                t0 = clock()
                native.demotion_copy(dst, src, nbytes, name, method, drain)
                if run:
                    ns_runs[name].append(clock() - t0)
    base = ns_runs[variants[0][0]]  # the first variant (memcpy) of each run
    rows = []
    for n, ns in ns_runs.items():
        gbps = [nbytes / x for x in ns if x]
        ratios = [b / x for x, b in zip(ns, base) if x and b]
        rows.append({"primitive": n, "nt": n.split("/")[0] in native.NT_PAGE_METHODS,
                     "drain": next(v[2] for v in variants if v[0] == n),
                     "gbps_min": min(gbps) if gbps else None, "gbps_median": statistics.median(gbps) if gbps else None,
                     "vs_memcpy_median": statistics.median(ratios) if ratios else None, "vs_memcpy_runs": ratios,
                     "ns_runs": ns, "unresolved_runs": sum(not x or not b for x, b in zip(ns, base))})
    return {"bytes": nbytes, "folio_pages": native.FOLIO_PAGES, "cold": True, "evict": plan.evict,
            "flush_insn": flush_insn, "clock": plan.clock, "clock_tick_ms": tick_ns / 1e6, "runs": _cold_runs(plan),
            "evict_ms_median": statistics.median(evict_ns) / 1e6, "rows": rows}


# validate --quick's correctness: every size and destination offset, source
# offsets 0..7 (no primitive branches on the source's alignment; the loads
# are unaligned either way), an eighth of the cases and of the time.
QUICK_SRC_OFFSETS = 8


def correctness(src_offsets: int = 64) -> dict:
    out = {}
    for p in native.PRIMITIVES:
        r = native.selftest_copy(p, src_offsets=src_offsets)
        out[p] = {"cases": r.cases, "failures": r.failures}
    for v in ("A", "B"):
        r = native.selftest_fixed(v)
        out[f"fixed_{v}"] = {"cases": r.cases, "failures": r.failures}
    out["ok"] = all(v["failures"] == 0 for v in out.values() if isinstance(v, dict))
    return out


