"""kernel.*: what the live kernel does on the NT paths."""
from __future__ import annotations

from nttrace.kernel.metadata import NT_MODES
from nttrace.probes import demotion_probes
from nttrace.probes.copy import CopyProbe
from nttrace.probes.exercise import compare, observe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.reclaim import ReclaimProbe
from nttrace.validate.checks import FAIL, PASS, SKIP, WARN, CheckResult, check


@check("kernel.nt_support", "which NT demotion revision the kernel's enums carry")
def nt_support(ctx) -> CheckResult:
    meta = ctx.kernel
    rev = meta.nt_revision
    ev = {"nt_revision": rev, "migrate_mode": meta.migrate_mode, "source": meta.source}
    if rev == "none":
        return CheckResult("kernel.nt_support", PASS,
                           "no NT migrate mode in enum migrate_mode: demotion copies are cached on this kernel", ev)
    name = next(n for n in NT_MODES if n in meta.migrate_mode)
    return CheckResult("kernel.nt_support", PASS, f"RFC {rev}: {name} = {meta.migrate_mode[name]}", ev)


def _unobserved(cid: str, ctx, probe) -> CheckResult | None:
    """SKIP naming what this host lacks for the probe's attach points."""
    missing = [ctx.caps[f"tracepoint:{s}:{e}"] for s, e in probe.tracepoints
               if not ctx.caps[f"tracepoint:{s}:{e}"].available][:1]
    if not ctx.caps["bcc"].available:
        missing.append(ctx.caps["bcc"])
    if missing:
        return CheckResult(cid, SKIP, f"{probe.name} probe: " + "; ".join(c.detail for c in missing))
    return None


@check("kernel.migrate_observed", "a compaction trigger is seen by the migrate probe and agrees with /proc/vmstat",
       triggers=MigrateProbe.exercise.workload)
def migrate_observed(ctx) -> CheckResult:
    cid = "kernel.migrate_observed"
    if skip := _unobserved(cid, ctx, MigrateProbe):
        return skip
    obs = observe(MigrateProbe, caps=ctx.caps, meta=ctx.kernel)
    if obs.run == {}:
        return CheckResult(cid, SKIP, f"migrate probe did not attach: {obs.snapshot.get('reason')}")
    rows = obs.snapshot.get("rows", [])
    compaction_rows = [r for r in rows if r["reason"] == "MR_COMPACTION"]
    calls = sum(r["calls"] for r in compaction_rows)
    ev = {"probe_succeeded_pages": obs.seen, "vmstat_pgmigrate_success": obs.expected, "compaction_calls": calls,
          "rows": [{k: r.get(k) for k in ("mode", "mode_value", "reason", "nt", "calls", "succeeded", "failed")} for r in rows],
          "latency_ns": compaction_rows[0]["latency_ns"] if compaction_rows else None, "trigger": obs.run}
    ctx.shared["migrate_rows"] = rows
    if calls == 0:
        return CheckResult(cid, FAIL, "compaction ran but the migrate probe saw no MR_COMPACTION call", ev)
    if not obs.agrees:
        return CheckResult(cid, FAIL, f"probe counted {obs.describe()} migrated pages", ev)
    modes = sorted({r["mode"] for r in compaction_rows})
    return CheckResult(cid, PASS, f"{calls} MR_COMPACTION calls ({', '.join(modes)}), pages: {obs.describe()}", ev)


@check("kernel.reclaim_observed", "memcg reclaim of a scratch cgroup is seen by the reclaim probe, pages as the "
       "cgroup counts them", triggers=ReclaimProbe.exercise.workload)
def reclaim_observed(ctx) -> CheckResult:
    from nttrace.workloads import scratch_cgroup

    cid = "kernel.reclaim_observed"
    if skip := _unobserved(cid, ctx, ReclaimProbe):
        return skip
    try:
        scratch_cgroup.memory_hierarchy()
    except scratch_cgroup.NoMemoryCgroup as exc:
        return CheckResult(cid, SKIP, f"no memory cgroup to reclaim: {exc}")
    obs = observe(ReclaimProbe, caps=ctx.caps, meta=ctx.kernel)
    if obs.run == {}:
        return CheckResult(cid, SKIP, f"reclaim probe did not attach: {obs.snapshot.get('reason')}")
    run = obs.run
    memcg = next(r for r in obs.snapshot["rows"] if r["kind"] == "memcg")
    ev = {"run": run, "memcg": memcg, "expected_pages": obs.expected,
          "expected_from": obs.truth.source if obs.truth else None}
    if memcg["episodes"] == 0:
        return CheckResult(cid, FAIL, f"{run['interface']} ran but the probe saw no memcg reclaim episode", ev)
    if not obs.agrees:
        return CheckResult(cid, FAIL, f"probe counted {obs.describe()} reclaimed pages", ev)
    p50 = memcg["latency_ns"]["p50"]
    return CheckResult(cid, PASS, f"{memcg['episodes']} memcg reclaim episodes by {run['interface']} (cgroup "
                       f"v{run['cgroup_version']}), pages: {obs.describe()}; p50 {p50 / 1e3:.0f} us", ev)


@check("kernel.demotion_nt", "demotions to the lower tier use an NT migrate mode on an NT kernel",
       quick=False, triggers=f"with --demote: {CopyProbe.exercise.workload.split(' (')[0]}")
def demotion_nt(ctx) -> CheckResult:
    from nttrace.probes.tracer import Tracer
    from nttrace.workloads import demotion

    cid = "kernel.demotion_nt"
    tiers = ctx.caps["numa:tiers"]
    if not tiers.available:
        return CheckResult(cid, SKIP, f"no lower memory tier to demote to: {tiers.detail}")
    if not ctx.options.demote:
        return CheckResult(cid, SKIP, "demotion changes system state; run with --demote to exercise it")
    probes = demotion_probes(ctx.caps)
    try:
        demotion.cgroup2_root()
    except demotion.DemotionUnavailable as exc:
        return CheckResult(cid, SKIP, f"cannot run a scratch demotion: {exc}")
    with Tracer(probes, caps=ctx.caps, meta=ctx.kernel) as tracer:
        run = CopyProbe.exercise.run(ctx.options.demote_mib)
        snap = tracer.snapshot()
    rows = [r for r in snap[MigrateProbe.name].get("rows", []) if r["reason"] == "MR_DEMOTION"]
    demoted = run["pgdemote"]
    probe_pages = sum(r["succeeded"] for r in rows)
    reclaim = snap.get(ReclaimProbe.name, {})
    # demotion runs inside reclaim: memory.reclaim's episodes hold every demoted page
    in_reclaim = sum(r["demoted"] for r in reclaim.get("rows", [])) if reclaim.get("status") == "attached" else None
    copy = snap.get(CopyProbe.name)
    copies = compare(CopyProbe.name, CopyProbe.exercise, run, copy) if copy and copy.get("status") == "attached" else None
    ev = {"rows": rows, "pgdemote_delta": demoted, "probe_succeeded_pages": probe_pages, "run": run,
          CopyProbe.name: copy, ReclaimProbe.name: reclaim, "demoted_inside_reclaim": in_reclaim,
          "copied_pages": copies.seen if copies else None, "nt_revision": ctx.kernel.nt_revision}
    if not rows or probe_pages == 0:
        return CheckResult(cid, FAIL, f"memory.reclaim of {run['scratch_mib']} MiB ran but no MR_DEMOTION migration was seen", ev)
    if probe_pages != demoted:
        return CheckResult(cid, FAIL, f"probe saw {probe_pages} demoted pages, /proc/vmstat pgdemote_* {demoted}", ev)
    if in_reclaim is not None and in_reclaim != demoted:
        return CheckResult(cid, FAIL, f"reclaim episodes held {in_reclaim} demoted pages, /proc/vmstat pgdemote_* {demoted}", ev)
    if copies is not None and not copies.agrees:
        return CheckResult(cid, FAIL, f"the copy routines copied {copies.describe()} pages", ev)
    cached = [r for r in rows if not r["nt"]]
    modes = ", ".join(sorted({r["mode"] for r in rows}))
    if ctx.kernel.nt_revision == "none":
        return CheckResult(cid, WARN, f"{probe_pages} pages demoted with {modes}: this kernel has no NT migrate mode, "
                           "demotion copies are cached", ev)
    if cached:
        return CheckResult(cid, FAIL, f"NT kernel ({ctx.kernel.nt_revision}) demoted {sum(r['succeeded'] for r in cached)} "
                           f"pages with a cached mode ({modes})", ev)
    return CheckResult(cid, PASS, f"{probe_pages} pages demoted, all with {modes} (NT)", ev)


@check("kernel.memmap_latency", "memmap_init_zone_device() latency over namespace rebinds (--rebind)",
       quick=False, triggers="with --rebind: unbinds and binds a pmem namespace's driver")
def memmap_latency(ctx) -> CheckResult:
    from nttrace.validate import memmap_runs
    cid = "kernel.memmap_latency"
    if not ctx.options.rebind:
        return CheckResult(cid, SKIP, "rebinding changes system state; run with --rebind NAMESPACE to time it"
                           + ("" if ctx.caps["pmem"].available else f" (and this host has no pmem: {ctx.caps['pmem'].detail})"))
    return memmap_runs.run_check(ctx, cid)
