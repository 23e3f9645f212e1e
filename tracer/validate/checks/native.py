"""native.*: the native reference on this CPU (no kernel involvement)."""
from __future__ import annotations

from nttrace.validate.checks import FAIL, PASS, SKIP, WARN, CheckResult, check


@check("native.correctness", "every native copy primitive and both kernel-path models are byte-exact")
def correctness(ctx) -> CheckResult:
    import ctypes

    from nttrace.reference import measurements, native
    cid = "native.correctness"
    if not native.have_nt_backend():
        return CheckResult(cid, SKIP, "no NT backend on this CPU (needs x86-64 SSE2)")
    ev = measurements.correctness()
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
    return CheckResult(cid, PASS, f"{copies} copy cases and {model_cases} model comparisons byte-exact", ev)


@check("native.nt_benefit", "NT vs cached copies on this CPU (memmap model, cold page copies), beside the seeds")
def nt_benefit(ctx) -> CheckResult:
    from nttrace.reference import measurements, native, seeds
    cid = "native.nt_benefit"
    if not native.have_nt_backend():
        return CheckResult(cid, SKIP, "no NT backend on this CPU (needs x86-64 SSE2)")
    plan = measurements.Plan.quick()
    plan.runs = 3
    mm = measurements.memmap_model(plan)
    pc = measurements.page_copy(plan)
    rows = {r["primitive"]: r for r in pc["rows"]}
    nt_folio = rows["movnti_prefetchnta/per_folio"]["vs_memcpy_median"]
    nt_page = rows["movnti_prefetchnta/per_page"]["vs_memcpy_median"]
    ev = {
        "memmap_descriptors": mm["descriptors"], "slow_ms": mm["slow_ms"], "template_nt_ms": mm["template_nt_ms"],
        "template_cached_ms": mm["template_cached_ms"], "nt_write_limit_ms": mm["nt_write_limit_ms"],
        "memmap_reduction_pct": mm["reduction_pct"],
        "seed_memmap_reduction_pct": {k: v["reduction_pct"] for k, v in seeds.MEMMAP_REBIND_MS.items()},
        "page_copy_bytes": pc["bytes"], "nt_per_page_vs_memcpy": nt_page, "nt_per_folio_vs_memcpy": nt_folio,
        "seed_device_reads": "N -> ~0 (64 GB demoted to CXL; counted by perf.device_reads where uncore PMUs exist)",
    }
    summary = (f"memmap model {mm['reduction_pct']:.1f}% shorter with NT templates (seeds 60.4%/56.4%); "
               f"cold page copy NT x{nt_page:.2f} drained per page, x{nt_folio:.2f} per folio vs memcpy")
    if mm["reduction_pct"] >= 10 and nt_folio >= 1.0:
        return CheckResult(cid, PASS, summary, ev)
    return CheckResult(cid, WARN, "NT shows no benefit on this CPU: " + summary, ev)
