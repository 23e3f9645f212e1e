"""kernel.memmap_latency: the seeds' rebind procedure (first bind, then the
average of subsequent rebinds) timed by the memmap probe, with the native
model's ns/descriptor for the same number of pages as the reference."""
from __future__ import annotations

import time

from nttrace.probes.memmap import MemmapProbe
from nttrace.validate.checks import FAIL, PASS, SKIP, CheckResult
from nttrace.validate.evidence import MemmapCall, MemmapEvidence
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
    ev = MemmapEvidence(namespace=target.namespace, device=target.device, driver=target.driver, mode=target.mode,
                        runs=ctx.options.runs, bind_wall_s=bind_s, calls=[MemmapCall.from_json(r) for r in records],
                        via=snap.get("via"), kernel_lines=kernel_lines)
    if len(records) < ctx.options.runs + 1:
        return CheckResult(cid, FAIL, f"{len(records)} memmap_init_zone_device() calls seen for "
                           f"{ctx.options.runs + 1} binds", ev.to_json())
    if kernel_lines:   # the kernel's own count, where it prints one (its pr_debug line, when dynamic debug is on)
        truth = MemmapProbe.exercise.truths[0]
        if len(kernel_lines) != len(records) or not all(
                truth.tolerance.holds(c.pages_initialised, k["pages"]) for c, k in zip(ev.calls, kernel_lines)):
            return CheckResult(cid, FAIL, f"descriptors initialised per call, probe "
                               f"{[c.pages_initialised for c in ev.calls][:4]}..., {truth.source} "
                               f"{[k['pages'] for k in kernel_lines][:4]}... ({len(records)} calls, "
                               f"{len(kernel_lines)} lines)", ev.to_json())
    first = ev.first
    nr = first.pages_initialised
    with native.Buffer(nr * 64, fill=0) as buf:
        model = native.memmap_init(buf, nr, 64, first.pgmap_type if first.pgmap_type in native.PGMAP_TYPES else "FS_DAX",
                                   int(first.vmemmap_shift), "template_nt")
    ev.native_model_ns_per_descriptor = model.elapsed_ns / nr
    d = ev.derived()
    summary = (f"{target.namespace} ({first.pgmap_type}, vmemmap_shift {first.vmemmap_shift}, {nr} pages initialised): "
               f"first bind {d['first_bind_ms']:.1f} ms, rebinds avg {d['rebind_avg_ms'] or 0:.1f} ms, "
               f"{d['ns_per_page']:.2f} ns/page = x{d['kernel_over_native']:.1f} the native NT model")
    if ctx.options.page_ref and first.template_path:
        paths = ev.template_paths()
        summary += (f"; page_ref_set {d['page_ref_sets_per_page']['median']:.3g} events per page initialised: "
                    f"{', '.join(paths)} path ({PATH_NOTES.get(paths[0], '') if len(paths) == 1 else 'paths differ between calls'})")
        most = max(c.page_ref_sets or 0 for c in ev.calls)
        if most >= PAGE_REF_COSTLY_EVENTS:
            warning = (f"page_ref_set fired up to {most} times in one memmap_init_zone_device() call: each event runs "
                       "the probe, whose cost is inside the latency measured with --page-ref")
            ev.warnings.append(warning)
            summary += f"; warning: {warning}"
    return CheckResult(cid, PASS, summary, ev.to_json())


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
