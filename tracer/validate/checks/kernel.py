# SPDX-License-Identifier: Apache-2.0
"""kernel.*: what the live kernel does on the NT paths (its memmap
latency: checks/memmap_latency.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from nttrace.kernel.metadata import NT_MODES
from nttrace.probes import demotion_probes
from nttrace.probes.copy import CopyProbe
from nttrace.probe_framework.exercise import compare
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.reclaim import ReclaimProbe
from nttrace.validate.checks import FAIL, PASS, SKIP, WARN, CheckResult, check
from nttrace.validate.evidence import Figure


@dataclass
class NtSupportEvidence:
    """kernel.nt_support: the NT revision the kernel's enums carry."""
    nt_revision: str | None
    rest: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**self.rest, "nt_revision": self.nt_revision}

    @classmethod
    def from_json(cls, d: dict) -> "NtSupportEvidence":
        return cls(d.get("nt_revision"), {k: v for k, v in d.items() if k != "nt_revision"})

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        return [Figure("nt_revision", "NT demotion revision", self.nt_revision)]


@check("kernel.nt_support", "which NT demotion revision the kernel's enums carry", evidence=NtSupportEvidence)
def nt_support(ctx) -> CheckResult:
    meta = ctx.kernel
    rev = meta.nt_revision
    ev = {"nt_revision": rev, "migrate_mode": meta.migrate_mode, "source": meta.source}
    if rev == "none":
        return CheckResult("kernel.nt_support", PASS,
                           "no NT migrate mode in enum migrate_mode: demotion copies are cached on this kernel", ev)
    name = next(n for n in NT_MODES if n in meta.migrate_mode)
    return CheckResult("kernel.nt_support", PASS, f"RFC {rev}: {name} = {meta.migrate_mode[name]}", ev)


@dataclass
class DemotionEvidence:
    """kernel.demotion_nt: the migrate probe's MR_DEMOTION rows, the copy
    routines that ran, and the kernel's own count of demoted pages."""
    PRIMARY_REASON = "the mean migrate_pages() call of MR_DEMOTION: the demotion path's own cost"
    rows: list[dict]
    copy: dict = field(default_factory=dict)      # the copy routines' probe snapshot: rows, untraceable, notes
    rest: dict = field(default_factory=dict)      # pgdemote_delta, the run, ... as the check wrote them
    copy_key: str = ""                            # the key the check wrote that snapshot under

    @property
    def pages(self) -> int:
        return sum(r.get("succeeded", 0) for r in self.rows)

    @property
    def nt_pages(self) -> int:
        return sum(r.get("succeeded", 0) for r in self.rows if r.get("nt"))

    def modes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.get("mode", "?")] = out.get(r.get("mode", "?"), 0) + r.get("succeeded", 0)
        return out

    def routines(self) -> dict[str, int]:
        return {r["routine"]: r.get("calls", 0) for r in self.copy.get("rows") or [] if "routine" in r}

    def mean_call_us(self) -> float | None:
        lat = [r["latency_ns"]["mean"] for r in self.rows if isinstance(r.get("latency_ns"), dict)
               and r["latency_ns"].get("mean") is not None]
        calls = sum(r.get("calls", 0) for r in self.rows)
        return sum(lat) / len(lat) / 1000.0 if lat and calls else None

    def to_json(self) -> dict:
        return {**self.rest, "rows": self.rows, **({self.copy_key: self.copy} if self.copy_key else {})}

    @classmethod
    def from_json(cls, d: dict) -> "DemotionEvidence":
        # the copy routines' snapshot: the entry whose rows name routines (the
        # check files it under that probe's name)
        key = next((k for k, v in d.items() if isinstance(v, dict)
                    and any(isinstance(r, dict) and "routine" in r for r in v.get("rows") or [])), "")
        return cls(rows=list(d.get("rows") or []), copy=dict(d.get(key) or {}),
                   rest={k: v for k, v in d.items() if k not in ("rows", key)}, copy_key=key)

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        modes = ", ".join(sorted(m for m in self.modes() if m != "?")) or None
        routines = ", ".join(f"{k} {v}" for k, v in self.routines().items() if v) or None
        out = [Figure("mode", "demotion migrate mode", modes),
               Figure("nt_share_pct", "NT share of demoted pages, %",
                      (100.0 * self.nt_pages / self.pages) if self.pages else None),
               Figure("probe_succeeded_pages", "pages demoted", self.rest.get("probe_succeeded_pages")),
               Figure("copy_routines", "copy routines (calls)", routines),
               Figure("migrate_pages_mean_us", "migrate_pages() mean, us", self.mean_call_us(), role="primary")]
        untraceable = self.copy.get("untraceable")
        if untraceable:
            out.append(Figure("copy_untraceable", "copy routines not traceable", ", ".join(sorted(untraceable))))
        return out


@check("kernel.demotion_nt", "demotions to the lower tier use an NT migrate mode on an NT kernel",
       quick=False, triggers=f"with --demote: {CopyProbe.exercise.workload.split(' (')[0]}",
       evidence=DemotionEvidence, asks="demote")
def demotion_nt(ctx) -> CheckResult:
    from nttrace.tracing.tracer import Tracer
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
