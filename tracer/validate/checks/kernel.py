"""kernel.*: what the live kernel does on the NT paths."""
from __future__ import annotations

from nttrace.kernel import vmstat
from nttrace.kernel.metadata import NT_MODES
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


@check("kernel.migrate_observed", "a compaction trigger is seen by the migrate probe and agrees with /proc/vmstat",
       triggers="compacts memory (/proc/sys/vm/compact_memory)")
def migrate_observed(ctx) -> CheckResult:
    from nttrace.probes.tracer import Tracer
    from nttrace.workloads import triggers

    cid = "kernel.migrate_observed"
    if not ctx.caps["tracepoint:migrate:mm_migrate_pages_start"].available or not ctx.caps["bcc"].available:
        return CheckResult(cid, SKIP, "needs the migrate tracepoints and bcc: "
                           + ctx.caps["tracepoint:migrate:mm_migrate_pages_start"].detail + "; " + ctx.caps["bcc"].detail)
    with Tracer(["migrate"], caps=ctx.caps, meta=ctx.kernel) as tracer:
        before = vmstat.read()
        deltas = triggers.compaction()
        after = vmstat.read()
        snap = tracer.snapshot()["migrate"]
    rows = snap.get("rows", [])
    probe_pages = sum(r["succeeded"] for r in rows)
    vm_pages = after["pgmigrate_success"] - before["pgmigrate_success"]
    compaction_rows = [r for r in rows if r["reason"] == "MR_COMPACTION"]
    calls = sum(r["calls"] for r in compaction_rows)
    ev = {"probe_succeeded_pages": probe_pages, "vmstat_pgmigrate_success": vm_pages, "compaction_calls": calls,
          "rows": [{k: r.get(k) for k in ("mode", "mode_value", "reason", "nt", "calls", "succeeded", "failed")} for r in rows],
          "latency_ns": compaction_rows[0]["latency_ns"] if compaction_rows else None, "trigger": deltas}
    ctx.shared["migrate_rows"] = rows
    if calls == 0:
        return CheckResult(cid, FAIL, "compaction ran but the migrate probe saw no MR_COMPACTION call", ev)
    if probe_pages != vm_pages:
        return CheckResult(cid, FAIL, f"probe counted {probe_pages} migrated pages, /proc/vmstat {vm_pages}", ev)
    modes = sorted({r["mode"] for r in compaction_rows})
    return CheckResult(cid, PASS, f"{calls} MR_COMPACTION calls ({', '.join(modes)}), {probe_pages} pages "
                       f"= /proc/vmstat pgmigrate_success delta", ev)


@check("kernel.reclaim_observed", "memcg reclaim of a scratch cgroup is seen by the reclaim probe, pages as the "
       "cgroup counts them", triggers="reclaims a scratch memory cgroup's page cache (a 64 MiB file in /var/tmp)")
def reclaim_observed(ctx) -> CheckResult:
    from nttrace.probes.tracer import Tracer
    from nttrace.workloads import scratch_cgroup, triggers

    cid = "kernel.reclaim_observed"
    if not ctx.caps["tracepoint:vmscan:mm_vmscan_memcg_reclaim_end"].available or not ctx.caps["bcc"].available:
        return CheckResult(cid, SKIP, "needs the vmscan tracepoints and bcc: "
                           + ctx.caps["tracepoint:vmscan:mm_vmscan_memcg_reclaim_end"].detail + "; " + ctx.caps["bcc"].detail)
    try:
        scratch_cgroup.memory_hierarchy()
    except scratch_cgroup.NoMemoryCgroup as exc:
        return CheckResult(cid, SKIP, f"no memory cgroup to reclaim: {exc}")
    with Tracer(["reclaim"], caps=ctx.caps, meta=ctx.kernel) as tracer:
        run = triggers.memcg_reclaim()
        snap = tracer.snapshot()["reclaim"]
    memcg = next(r for r in snap["rows"] if r["kind"] == "memcg")
    # cgroup v2 counts the pages its reclaim stole (pgsteal); v1 has no such
    # counter, so the drop in charged memory stands in (kernel memory the
    # reclaim frees is in it: a looser bound).
    expected, source, slack = ((run["pgsteal"], "memory.stat pgsteal delta", 0.02) if run["pgsteal"] is not None
                               else (run["usage_drop_pages"], "memory.usage_in_bytes drop", 0.05))
    ev = {"run": run, "memcg": memcg, "expected_pages": expected, "expected_from": source}
    if memcg["episodes"] == 0:
        return CheckResult(cid, FAIL, f"{run['interface']} ran but the probe saw no memcg reclaim episode", ev)
    if abs(memcg["reclaimed"] - expected) > max(slack * expected, 32):
        return CheckResult(cid, FAIL, f"probe counted {memcg['reclaimed']} reclaimed pages, the cgroup's {source} "
                           f"{expected}", ev)
    p50 = memcg["latency_ns"]["p50"]
    return CheckResult(cid, PASS, f"{memcg['episodes']} memcg reclaim episodes by {run['interface']} (cgroup "
                       f"v{run['cgroup_version']}), {memcg['reclaimed']} pages = {source} {expected}; "
                       f"p50 {p50 / 1e3:.0f} us", ev)


@check("kernel.demotion_nt", "demotions to the lower tier use an NT migrate mode on an NT kernel",
       quick=False, triggers="with --demote: reclaims a scratch cgroup's memory into the lower tier")
def demotion_nt(ctx) -> CheckResult:
    from nttrace.probes.tracer import Tracer
    from nttrace.workloads import demotion

    cid = "kernel.demotion_nt"
    tiers = ctx.caps["numa:tiers"]
    if not tiers.available:
        return CheckResult(cid, SKIP, f"no lower memory tier to demote to: {tiers.detail}")
    if not ctx.options.demote:
        return CheckResult(cid, SKIP, "demotion changes system state; run with --demote to exercise it")
    probes = demotion.probes(ctx.caps)
    try:
        demotion.cgroup2_root()
    except demotion.DemotionUnavailable as exc:
        return CheckResult(cid, SKIP, f"cannot run a scratch demotion: {exc}")
    with Tracer(probes, caps=ctx.caps, meta=ctx.kernel) as tracer:
        before = vmstat.read()
        run = demotion.demote_scratch(ctx.options.demote_mib)
        after = vmstat.read()
        snap = tracer.snapshot()
    rows = [r for r in snap["migrate"].get("rows", []) if r["reason"] == "MR_DEMOTION"]
    demoted = demotion.demoted_pages(before, after)
    probe_pages = sum(r["succeeded"] for r in rows)
    reclaim = snap.get("reclaim", {})
    # demotion runs inside reclaim: memory.reclaim's episodes hold every demoted page
    in_reclaim = sum(r["demoted"] for r in reclaim.get("rows", [])) if reclaim.get("status") == "attached" else None
    ev = {"rows": rows, "pgdemote_delta": demoted, "probe_succeeded_pages": probe_pages, "run": run,
          "copy": snap.get("copy"), "reclaim": reclaim, "demoted_inside_reclaim": in_reclaim,
          "nt_revision": ctx.kernel.nt_revision}
    if not rows or probe_pages == 0:
        return CheckResult(cid, FAIL, f"memory.reclaim of {run['scratch_mib']} MiB ran but no MR_DEMOTION migration was seen", ev)
    if probe_pages != demoted:
        return CheckResult(cid, FAIL, f"probe saw {probe_pages} demoted pages, /proc/vmstat pgdemote_* {demoted}", ev)
    if in_reclaim is not None and in_reclaim != demoted:
        return CheckResult(cid, FAIL, f"reclaim episodes held {in_reclaim} demoted pages, /proc/vmstat pgdemote_* {demoted}", ev)
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
