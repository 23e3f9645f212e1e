"""kernel.memmap_latency: the seeds' rebind procedure (first bind, then the
average of subsequent rebinds) timed by the memmap probe, with the native
model's ns/descriptor for the same number of pages as the reference."""
from __future__ import annotations

import statistics
import time

from nttrace.probes.memmap import MemmapProbe
from nttrace.validate.checks import FAIL, PASS, SKIP, CheckResult
from nttrace.workloads import namespace_rebind
from nttrace.workloads.namespace_rebind import Rebinder, in_use, kmsg_during, resolve


def run_check(ctx, cid: str) -> CheckResult:
    from nttrace.probes.tracer import Tracer
    from nttrace.reference import native

    target = resolve(ctx.options.rebind)          # UsageError: no such namespace
    busy = in_use(target)
    if busy:
        from nttrace.errors import UsageError
        raise UsageError(f"refusing to rebind {target.namespace}: {busy}")
    name = MemmapProbe.name
    with Tracer([name], options={name: {"page_ref_sets": ctx.options.page_ref}}, caps=ctx.caps,
                meta=ctx.kernel) as tracer:
        if not tracer.attached(name):
            return CheckResult(cid, SKIP, f"memmap probe unavailable: {tracer.status[name].get('reason')}")
        rebinder = Rebinder(target)
        bind_s, records, kernel_lines = [], [], []
        for _ in range(ctx.options.runs + 1):
            took, log = kmsg_during(rebinder.rebind)
            bind_s.append(took)
            kernel_lines.extend(namespace_rebind.kernel_lines(log))
            deadline = time.monotonic() + 2.0
            got = []
            while time.monotonic() < deadline and not got:
                tracer.poll(timeout_ms=50)
                got = tracer.records()
            records.extend(got)
        snap = tracer.snapshot()[name]
    ev = {"namespace": target.namespace, "device": target.device, "driver": target.driver, "mode": target.mode,
          "runs": ctx.options.runs, "bind_wall_s": bind_s, "calls": records, "via": snap.get("via")}
    if len(records) < ctx.options.runs + 1:
        return CheckResult(cid, FAIL, f"{len(records)} memmap_init_zone_device() calls seen for "
                           f"{ctx.options.runs + 1} binds", ev)
    if kernel_lines:   # the kernel's own count, where it prints one (its pr_debug line, when dynamic debug is on)
        ev["kernel_lines"] = kernel_lines
        truth = MemmapProbe.exercise.truths[0]
        if len(kernel_lines) != len(records) or not all(
                truth.tolerance.holds(r["pages_initialised"], k["pages"]) for r, k in zip(records, kernel_lines)):
            return CheckResult(cid, FAIL, f"descriptors initialised per call, probe "
                               f"{[r['pages_initialised'] for r in records][:4]}..., {truth.source} "
                               f"{[k['pages'] for k in kernel_lines][:4]}... ({len(records)} calls, "
                               f"{len(kernel_lines)} lines)", ev)
    first, rest = records[0], records[1:]
    avg_ms = statistics.mean(r["latency_ns"] for r in rest) / 1e6 if rest else None
    ns_per_page = statistics.mean(r["ns_per_page"] for r in rest) if rest else first["ns_per_page"]
    ev.update(first_bind_ns_per_page=first["ns_per_page"],
              rebind_ms=spread([r["latency_ns"] / 1e6 for r in rest]),
              rebind_ns_per_page=spread([r["ns_per_page"] for r in rest]))
    nr = int(first["pages_initialised"])
    with native.Buffer(nr * 64, fill=0) as buf:
        model = native.memmap_init(buf, nr, 64, first["pgmap_type"] if first["pgmap_type"] in native.PGMAP_TYPES else "FS_DAX",
                                   int(first["vmemmap_shift"]), "template_nt")
    model_ns = model.elapsed_ns / nr
    ev.update(first_bind_ms=first["latency_ns"] / 1e6, rebind_avg_ms=avg_ms, ns_per_page=ns_per_page,
              native_model_ns_per_descriptor=model_ns, kernel_over_native=ns_per_page / model_ns,
              pgmap_type=first["pgmap_type"], vmemmap_shift=first["vmemmap_shift"],
              nr_pages=int(first["nr_pages"]), pages_initialised=nr)
    summary = (f"{target.namespace} ({first['pgmap_type']}, vmemmap_shift {first['vmemmap_shift']}, {nr} pages initialised): "
               f"first bind {first['latency_ns'] / 1e6:.1f} ms, rebinds avg {avg_ms or 0:.1f} ms, "
               f"{ns_per_page:.2f} ns/page = x{ns_per_page / model_ns:.1f} the native NT model")
    if ctx.options.page_ref and "template_path" in first:
        paths = sorted({r.get("template_path") for r in records})
        ev["template_path"] = paths
        ev["page_ref_sets_per_page"] = spread([r["page_ref_sets_per_page"] for r in records])
        summary += (f"; page_ref_set {ev['page_ref_sets_per_page']['median']:.3g} events per page initialised: "
                    f"{', '.join(paths)} path ({PATH_NOTES.get(paths[0], '') if len(paths) == 1 else 'paths differ between calls'})")
        most = max(r["page_ref_sets"] for r in records)
        if most >= PAGE_REF_COSTLY_EVENTS:
            warning = (f"page_ref_set fired up to {most} times in one memmap_init_zone_device() call: each event runs "
                       "the probe, whose cost is inside the latency measured with --page-ref")
            ev["warnings"] = [warning]
            summary += f"; warning: {warning}"
    return CheckResult(cid, PASS, summary, ev)


PATH_NOTES = {
    "slow": "every page set its refcount: a kernel without the template series, or with its patches 4-8 "
            "but not 9/9, which fall back to the per-page path while page_ref_set is enabled",
    "template": "only the template seeds set a refcount: the template path ran with page_ref_set enabled, "
                "as with the whole v8 series (9/9 drops the fallback)",
    "mixed": "more events than the template seeds, fewer than one a page",
}

# More page_ref_set events than this in one call and the probe's own cost
# (one BPF run per event) is a visible part of the call's latency.
PAGE_REF_COSTLY_EVENTS = 100_000


def spread(values: list[float]) -> dict | None:
    """min/median/max/mean of a series (None when it is empty)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values),
            "mean": statistics.mean(values)}
