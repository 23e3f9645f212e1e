"""The reclaim probe: page reclaim episodes (direct, memcg, node reclaim;
kswapd from wake to sleep) from the vmscan tracepoints, with each episode's
latency, the pages it reclaimed and the MR_DEMOTION pages migrated inside it
(bpf/reclaim.bpf.c). On a tiered machine demotion is how reclaim frees the
top tier, so this is where an NT demotion's cost lands."""
from __future__ import annotations

import ctypes

from nttrace.kernel.sysroot import Sysroot
from nttrace.kernel.tracefs import read_format
from nttrace.probes import histogram
from nttrace.probes.base import Availability, Probe
from nttrace.probes.contract import Column, Metric

KINDS = ("direct", "memcg", "node", "kswapd")    # row index = the program's RECLAIM_* value
# (event, program): begin, then end, of each kind
EPISODES = (
    ("mm_vmscan_direct_reclaim_begin", "nttrace_reclaim_direct_begin"),
    ("mm_vmscan_direct_reclaim_end", "nttrace_reclaim_direct_end"),
    ("mm_vmscan_memcg_reclaim_begin", "nttrace_reclaim_memcg_begin"),
    ("mm_vmscan_memcg_reclaim_end", "nttrace_reclaim_memcg_end"),
    ("mm_vmscan_node_reclaim_begin", "nttrace_reclaim_node_begin"),
    ("mm_vmscan_node_reclaim_end", "nttrace_reclaim_node_end"),
    ("mm_vmscan_kswapd_wake", "nttrace_reclaim_kswapd_wake"),
    ("mm_vmscan_kswapd_sleep", "nttrace_reclaim_kswapd_sleep"),
)
ENDS = ("mm_vmscan_direct_reclaim_end", "mm_vmscan_memcg_reclaim_end", "mm_vmscan_node_reclaim_end")
SHRINK = ("vmscan", "mm_vmscan_lru_shrink_inactive", "nttrace_reclaim_shrink_inactive")
MIGRATED = ("migrate", "mm_migrate_pages", "nttrace_reclaim_migrate_done")
ATTACHMENTS = tuple(("vmscan", e, fn) for e, fn in EPISODES) + (SHRINK, MIGRATED)
LABELS = (("kind", "kind"),)


class ReclaimProbe(Probe):
    name = "reclaim"
    source = "reclaim.bpf.c"
    tracepoints = tuple((system, event) for system, event, _fn in ATTACHMENTS)
    columns = (
        Column("KIND", "kind", 7), Column("EPISODES", "episodes", 9), Column("RECLAIMED", "reclaimed", 10),
        Column("DEMOTED", "demoted", 9), Column("P50 us", "latency_ns.p50", 9, ".1f", 1e3),
        Column("MAX us", "latency_ns.max", 9, ".1f", 1e3),
    )
    metrics = (
        Metric("nttrace_reclaim_episodes", "Reclaim episodes (begin to end; kswapd: wake to sleep)", "counter",
               "episodes", LABELS),
        Metric("nttrace_reclaim_pages", "Pages reclaimed in the episodes (kswapd: LRU pages only)", "counter",
               "reclaimed", LABELS),
        Metric("nttrace_reclaim_demoted_pages", "MR_DEMOTION pages migrated inside reclaim episodes", "counter",
               "demoted", LABELS),
        Metric("nttrace_reclaim_unpaired", "Reclaim ends without their begin seen (attached mid-episode)",
               "counter", "unpaired", LABELS),
        Metric("nttrace_reclaim_duration_seconds", "Reclaim episode latency", "histogram", "latency_ns", LABELS),
    )

    def __init__(self, meta, caps, options=None, sysroot: Sysroot | None = None):
        super().__init__(meta, caps, options, sysroot)
        tracefs = self.sysroot.tracefs()
        self.formats = {(system, event): read_format(tracefs, system, event) for system, event in self.tracepoints}

    def availability(self) -> Availability:
        missing = [f"{s}:{e}" for (s, e), fmt in self.formats.items() if fmt is None]
        if missing:
            return Availability(False, f"no tracepoint {', '.join(missing)} in this kernel")
        if not self.caps["bcc"].available:
            return Availability(False, self.caps["bcc"].detail)
        return Availability(True, attach_via="tracepoint")

    def defines(self) -> dict:
        ends = {e: self.formats[("vmscan", e)] for e in ENDS}
        for fmt in ends.values():
            fmt.require("nr_reclaimed")
        offsets = {e: fmt.fields["nr_reclaimed"].offset for e, fmt in ends.items()}
        if len(set(offsets.values())) != 1:
            raise KeyError(f"the reclaim end events disagree on nr_reclaimed's offset: {offsets}")
        shrink = self.formats[SHRINK[:2]]
        done = self.formats[MIGRATED[:2]]
        shrink.require("nr_reclaimed")
        done.require("succeeded", "reason")
        return {
            "NTTRACE_END_NR_RECLAIMED": next(iter(offsets.values())),
            "NTTRACE_SHRINK_NR_RECLAIMED": shrink.fields["nr_reclaimed"].offset,
            "NTTRACE_DONE_SUCCEEDED": done.fields["succeeded"].offset,
            "NTTRACE_DONE_REASON": done.fields["reason"].offset,
            "NTTRACE_MR_DEMOTION": self.meta.migrate_reason.get("MR_DEMOTION", -1),
        }

    def attach(self) -> None:
        self.via = "tracepoint"
        b = self.load()
        for system, event, fn in ATTACHMENTS:
            b.attach_tracepoint(tp=f"{system}:{event}", fn_name=fn)

    def snapshot(self) -> dict:
        table = self.maps["reclaim_stats"]
        rows = []
        for i, kind in enumerate(KINDS):
            per_cpu = table[ctypes.c_int(i)]
            s = {f: sum(getattr(v, f) for v in per_cpu) for f in ("episodes", "reclaimed", "demoted", "sum_ns", "unpaired")}
            s["max_ns"] = max((v.max_ns for v in per_cpu), default=0)
            buckets = histogram.accumulate((slot, c) for v in per_cpu for slot, c in enumerate(v.hist))
            rows.append({"kind": kind, "episodes": s["episodes"], "reclaimed": s["reclaimed"], "demoted": s["demoted"],
                         "unpaired": s["unpaired"],
                         "latency_ns": histogram.summary(buckets, s["episodes"], s["sum_ns"], s["max_ns"])})
        return {"via": self.via, "rows": rows}
