# SPDX-License-Identifier: Apache-2.0
"""native.*: the native reference on this CPU (no kernel involvement)."""
from __future__ import annotations

import statistics

from nttrace.reference import seeds
from nttrace.validate.checks import FAIL, NOISY, PASS, SKIP, WARN, CheckResult, SeriesVerdict, check, overall


@check("native.correctness", "every native copy primitive and both kernel-path models are byte-exact")
def correctness(ctx) -> CheckResult:
    import ctypes

    from nttrace.reference import measurements, native
    cid = "native.correctness"
    if not native.have_nt_backend():
        return CheckResult(cid, SKIP, "no NT backend on this CPU (needs x86-64 SSE2)")
    src_offsets = measurements.QUICK_SRC_OFFSETS if ctx.options.quick else 64
    ev = measurements.correctness(src_offsets)
    ev["src_offsets"] = src_offsets
    # Models: every template method against the slow path, every pgmap type,
    # descriptor sizes and compound orders 0 and 9 (the tests add 18).
    model_cases = model_failures = 0
    with native.Buffer(((1 << 9) * 2 + 3) * 96 + 4096) as buf:
        for size in (64, 80, 96):
            for order in (0, 9):
                nr = (1 << order) * 2 + 3
                for pgmap in native.PGMAP_TYPES:
                    outputs = []
                    for method in native.MEMMAP_METHODS:
                        ctypes.memset(buf.addr, 0xEE, buf.size)
                        native.memmap_init(buf, nr, size, pgmap, order, method)
                        outputs.append(buf.bytes(0, nr * size))
                    model_cases += len(outputs) - 1
                    model_failures += sum(o != outputs[0] for o in outputs[1:])
    ev["memmap_models"] = {"cases": model_cases, "failures": model_failures}
    copies = sum(v["cases"] for v in ev.values() if isinstance(v, dict) and "cases" in v)
    if not ev["ok"] or model_failures:
        bad = [k for k, v in ev.items() if isinstance(v, dict) and v.get("failures")]
        return CheckResult(cid, FAIL, f"not byte-exact: {', '.join(bad)}", ev)
    scope = f" (quick: source offsets 0..{src_offsets - 1}, every destination offset)" if src_offsets < 64 else ""
    return CheckResult(cid, PASS, f"{copies} copy cases and {model_cases} model comparisons byte-exact{scope}", ev)


# A series passes only where its 95% interval clears these: the template
# series' memmap init at least MEMMAP_MIN_GAIN_PCT shorter than the slow
# path; the demotion RFC's NT page copy no slower than COPY_PARITY x memcpy.
MEMMAP_MIN_GAIN_PCT = 10.0
COPY_PARITY = 0.95


def _interval(values: list[float]) -> dict:
    from nttrace.reference.measurements import median_interval
    lo, hi, cov = median_interval(values)
    return {"median": statistics.median(values), "low": lo, "high": hi, "coverage": round(cov, 3), "n": len(values),
            "min": min(values), "max": max(values)}


def _untimed(cells: dict[str, list[float]], tick_ms: float | None) -> dict:
    """The cells of a series its clock could not time: per variant, how many
    runs measured under MIN_TICKS_PER_CELL ticks (0 ns included)."""
    from nttrace.reference.measurements import MIN_TICKS_PER_CELL
    floor = MIN_TICKS_PER_CELL * (tick_ms or 0)
    return {name: sum(v <= 0 or v < floor for v in values) for name, values in cells.items()
            if any(v <= 0 or v < floor for v in values)}


def _untimed_verdict(series: str, title: str, what: str, untimed: dict, cells: dict, clock: dict,
                     ev: dict) -> SeriesVerdict:
    """NOISY, in words: which cells the clock (`clock`: its name and the
    step it was seen to take) could not time. A cell of 0 ns on a clock that
    steps in microseconds means the clock stood still during it (a kernel
    whose TSC is marked unstable clamps the thread CPU clock between timer
    ticks); short cells on a coarse clock are too few ticks to compare."""
    from nttrace.reference.measurements import MIN_TICKS_PER_CELL
    tick_ms = clock.get("tick_ms")
    n = sum(len(v) for v in cells.values())
    zero = sum(v <= 0 for values in cells.values() for v in values)
    short = sum(untimed.values()) - zero
    step = ("unknown" if not tick_ms else f"{tick_ms:.3g} ms" if tick_ms >= 1 else f"{1000 * tick_ms:.3g} us")
    counted = [f"{zero} of {n} {what} cells measured 0 ns"] if zero else []
    if short:
        counted.append(f"{short} {'more ' if zero else f'of {n} {what} cells '}lasted under {MIN_TICKS_PER_CELL} "
                       f"of its steps")
    which = ", ".join(f"{k} {c}/{len(cells[k])}" for k, c in untimed.items())
    words = (f"cannot be timed on this clock ({clock.get('name') or 'unknown'}, seen to step {step}): "
             f"{' and '.join(counted)} ({which}); no verdict")
    ev = dict(ev, untimed_cells=untimed, clock=clock.get("name"), clock_tick_ms=tick_ms,
              min_ticks_per_cell=MIN_TICKS_PER_CELL)
    return SeriesVerdict(series, title, NOISY, words, ev)


def memmap_verdict(mm: dict) -> SeriesVerdict:
    """The zone-device template series: its NT template (8-byte MOVNTI, as
    its memcpy_nontemporal() stores) against the slow path it replaces.
    A run its clock could not time (a cell of 0 ns, or of too few ticks)
    gives no verdict, and says so."""
    runs = mm["per_run_ms"]
    cells = {k: runs[k] for k in ("slow", "template_cached", "template_movnti", "template_nt", "movnti_write_limit")}
    untimed = _untimed(cells, mm.get("clock_tick_ms"))
    if untimed:
        ev = {"descriptors": mm["descriptors"], "descriptor_size": mm["descriptor_size"], "bytes": mm["bytes"],
              "per_run_ms": cells, "threshold_pct": MEMMAP_MIN_GAIN_PCT}
        return _untimed_verdict("zone_device_template", "template series, memmap init", "memmap", untimed, cells,
                                {"name": mm.get("clock"), "tick_ms": mm.get("clock_tick_ms")}, ev)
    movnti = _interval([100 * (1 - t / s) for t, s in zip(runs["template_movnti"], runs["slow"])])
    widest = _interval([100 * (1 - t / s) for t, s in zip(runs["template_nt"], runs["slow"])])
    cached = _interval([100 * (1 - t / s) for t, s in zip(runs["template_cached"], runs["slow"])])
    over_limit = mm["template_movnti_ms"] / mm["movnti_write_limit_ms"]
    widest_vs_movnti = 100 * (1 - mm["template_nt_ms"] / mm["template_movnti_ms"])
    ev = {
        "descriptors": mm["descriptors"], "descriptor_size": mm["descriptor_size"], "bytes": mm["bytes"],
        "ms_median": {k: mm[f"{k}_ms"] for k in ("slow", "template_cached", "template_movnti", "template_nt",
                                                   "movnti_write_limit", "nt_write_limit")},
        "template_movnti_shorter_pct": movnti, "template_nt_shorter_pct": widest, "template_cached_shorter_pct": cached,
        "template_movnti_over_movnti_limit": over_limit,
        "widest_nt_store": mm["widest_nt_store"], "widest_vs_movnti_shorter_pct": widest_vs_movnti,
        "seed_reduction_pct": {k: v["reduction_pct"] for k, v in seeds.MEMMAP_REBIND_MS.items()},
        "threshold_pct": MEMMAP_MIN_GAIN_PCT,
    }
    spread = f"{100 * movnti['coverage']:.0f}% interval {movnti['low']:.0f}..{movnti['high']:.0f}%, n={movnti['n']}"
    context = (f"slow {mm['slow_ms']:.2f} ms, template cached {mm['template_cached_ms']:.2f}, template MOVNTI "
               f"{mm['template_movnti_ms']:.2f} (its write limit x{over_limit:.2f}), {mm['widest_nt_store']} "
               f"{mm['template_nt_ms']:.2f} ({_shorter_than(widest['median'])} slow); "
               f"seeds, in the kernel: 60.4% nd_pmem, 56.4% dax_pmem")
    if movnti["low"] >= MEMMAP_MIN_GAIN_PCT:
        status = PASS
        words = (f"on this CPU the memmap model's NT template with the series' 8-byte MOVNTI is "
                 f"{movnti['median']:.0f}% shorter than the slow path ({spread}): the template series would "
                 f"speed ZONE_DEVICE memmap init here")
    elif movnti["high"] < MEMMAP_MIN_GAIN_PCT:
        status = WARN
        gain = movnti["median"]
        change = ("only " if gain >= 0 else "") + _shorter_than(gain)
        words = (f"on this CPU the memmap model's NT template with the series' 8-byte MOVNTI is {change} the "
                 f"slow path ({spread}; under {MEMMAP_MIN_GAIN_PCT:.0f}%): the template series would not "
                 f"speed ZONE_DEVICE memmap init here")
    else:
        status = NOISY
        words = (f"too noisy to call: the series' MOVNTI template is {_shorter_than(movnti['median'])} the slow "
                 f"path, but its {spread} spans the {MEMMAP_MIN_GAIN_PCT:.0f}% line")
    return SeriesVerdict("zone_device_template", "template series, memmap init", status, f"{words}; {context}", ev)


def _shorter_than(pct: float) -> str:
    """A median change in time as words: a negative "shorter" is longer."""
    return f"{pct:.0f}% shorter than" if pct >= 0 else f"{-pct:.0f}% longer than"


def _copy_speed(ratio: float) -> str:
    if ratio >= 1:
        return f"{100 * (ratio - 1):.0f}% faster than"
    return f"{100 * (1 - ratio):.0f}% slower than"


def demotion_verdict(pc: dict) -> SeriesVerdict:
    """The NT demotion RFC: its page copy (MOVNTI + prefetchnta, the
    copy_mc_page_nt() shape, drained once per folio as v3's
    folio_mc_copy_nt()) against memcpy, cold. A run its clock could not
    time gives no verdict, and says so."""
    rows = {r["primitive"]: r for r in pc["rows"]}
    v3_name = "movnti_prefetchnta/per_folio"
    if "ns_runs" in rows["memcpy"]:
        cells = {n: [ns / 1e6 for ns in rows[n]["ns_runs"]] for n in ("memcpy", v3_name)}
        untimed = _untimed(cells, pc.get("clock_tick_ms"))
        if untimed:
            ev = {"bytes": pc["bytes"], "folio_pages": pc["folio_pages"], "per_run_ms": cells,
                  "threshold_vs_memcpy": COPY_PARITY}
            return _untimed_verdict("nt_demotion", "NT demotion RFC, page copy", "page-copy", untimed, cells,
                                    {"name": pc.get("clock"), "tick_ms": pc.get("clock_tick_ms")}, ev)
    # a variant with no run its clock timed (see page_copy) has no ratio
    ratios = {name: _interval(r["vs_memcpy_runs"]) for name, r in rows.items()
              if name != "memcpy" and r["vs_memcpy_runs"]}
    v3 = ratios[v3_name]
    widest = next((n for n in ("avx512_stream/per_folio", "avx2_stream/per_folio") if n in ratios), None)
    ev = {
        "bytes": pc["bytes"], "folio_pages": pc["folio_pages"],
        "gbps_median": {n: r["gbps_median"] for n, r in rows.items()},
        "vs_memcpy": ratios, "threshold_vs_memcpy": COPY_PARITY,
        "seed_device_reads": "N -> ~0 (64 GB demoted to CXL; counted by perf.device_reads where uncore PMUs exist)",
    }
    spread = f"x{v3['median']:.2f}; {100 * v3['coverage']:.0f}% interval {v3['low']:.2f}..{v3['high']:.2f}, n={v3['n']}"
    others = []
    for name, label in (("movnti_prefetchnta/per_page", "drained per page"),
                        ("movnti_prefetchnta/none", "undrained as v2")):
        if name in ratios:
            others.append(f"{label} x{ratios[name]['median']:.2f}")
    if widest:
        width = {"avx512": "AVX-512", "avx2": "AVX2"}[widest.split("_")[0]]
        others.append(f"{width} streaming stores per folio x{ratios[widest]['median']:.2f}")
    context = f"cold {pc['bytes'] >> 20} MiB per cell, vs memcpy: " + ", ".join(others)
    if v3["low"] >= COPY_PARITY:
        status = PASS
        words = (f"on this CPU NT page copies (MOVNTI, drained per folio as v3) are {_copy_speed(v3['median'])} "
                 f"memcpy ({spread}): the NT demotion series would not slow demotion's copy here")
    elif v3["high"] < COPY_PARITY:
        status = WARN
        words = (f"on this CPU NT page copies (MOVNTI, drained per folio as v3) are {_copy_speed(v3['median'])} "
                 f"memcpy ({spread}): the NT demotion series would slow demotion here")
    else:
        status = NOISY
        words = (f"too noisy to call: NT page copies run at x{v3['median']:.2f} memcpy's speed, but the "
                 f"{100 * v3['coverage']:.0f}% interval {v3['low']:.2f}..{v3['high']:.2f} (n={v3['n']}) spans "
                 f"x{COPY_PARITY}")
    return SeriesVerdict("nt_demotion", "NT demotion RFC, page copy", status, f"{words}; {context}", ev)


@check("native.nt_benefit", "per series: the template series' memmap model and the NT demotion RFC's page copy, "
                            "NT against cached on this CPU", timed=True)
def nt_benefit(ctx) -> CheckResult:
    import time

    from nttrace.kernel import cache_topology
    from nttrace.reference import measurements, native
    cid = "native.nt_benefit"
    if not native.have_nt_backend():
        return CheckResult(cid, SKIP, "no NT backend on this CPU (needs x86-64 SSE2)")
    t0 = time.monotonic()
    llc = cache_topology.last_level_cache()
    plan = measurements.Plan.quick(llc.bytes)
    mm = measurements.memmap_model(plan)
    pc = measurements.page_copy(plan)
    verdicts = [memmap_verdict(mm), demotion_verdict(pc)]
    ev = {"plan": {
        "llc": llc.as_json(), "budget_bytes": plan.budget_bytes, "memmap_bytes": mm["bytes"],
        "page_copy_bytes": pc["bytes"], "runs": pc["runs"], "first_run_dropped": True,
        "clock": plan.clock,
        "clock_tick_ms": {"memmap_model": mm["clock_tick_ms"], "page_copy": pc["clock_tick_ms"]},
        "evict_ms_per_cell": {"memmap_model": round(mm["evict_ms_median"], 3),
                              "page_copy": round(pc["evict_ms_median"], 3)},
        "cold": plan.cold_method(pc["flush_insn"]), "seconds": round(time.monotonic() - t0, 3)}}
    status = overall(verdicts)
    summary = "; ".join(f"{v.title}: {v.status.upper()}" for v in verdicts)
    return CheckResult(cid, status, summary, ev, verdicts)
