"""kernel.*: what the live kernel does on the NT paths."""
from __future__ import annotations

from nttrace.checks import FAIL, PASS, SKIP, WARN, CheckResult, check
from nttrace.kernel_meta import NT_MODES


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
    from nttrace import triggers
    from nttrace.tracer import Tracer

    cid = "kernel.migrate_observed"
    if not ctx.caps["tracepoint:migrate:mm_migrate_pages_start"].available or not ctx.caps["bcc"].available:
        return CheckResult(cid, SKIP, "needs the migrate tracepoints and bcc: "
                           + ctx.caps["tracepoint:migrate:mm_migrate_pages_start"].detail + "; " + ctx.caps["bcc"].detail)
    with Tracer(["migrate"], caps=ctx.caps, meta=ctx.kernel) as tracer:
        before = triggers.vmstat()
        deltas = triggers.compaction()
        after = triggers.vmstat()
        snap = tracer.snapshot()["migrate"]
    rows = snap.get("rows", [])
    probe_pages = sum(r["succeeded"] for r in rows)
    vm_pages = after["pgmigrate_success"] - before["pgmigrate_success"]
    compaction_rows = [r for r in rows if r["reason"] == "MR_COMPACTION"]
    calls = sum(r["calls"] for r in compaction_rows)
    ev = {"probe_succeeded_pages": probe_pages, "vmstat_pgmigrate_success": vm_pages, "compaction_calls": calls,
          "rows": [{k: r[k] for k in ("mode", "reason", "nt", "calls", "succeeded", "failed")} for r in rows],
          "latency_ns": compaction_rows[0]["latency_ns"] if compaction_rows else None, "trigger": deltas}
    ctx.shared["migrate_rows"] = rows
    if calls == 0:
        return CheckResult(cid, FAIL, "compaction ran but the migrate probe saw no MR_COMPACTION call", ev)
    if probe_pages != vm_pages:
        return CheckResult(cid, FAIL, f"probe counted {probe_pages} migrated pages, /proc/vmstat {vm_pages}", ev)
    modes = sorted({r["mode"] for r in compaction_rows})
    return CheckResult(cid, PASS, f"{calls} MR_COMPACTION calls ({', '.join(modes)}), {probe_pages} pages "
                       f"= /proc/vmstat pgmigrate_success delta", ev)
