# SPDX-License-Identifier: Apache-2.0
"""The reclaim probe: page reclaim episodes (direct, memcg, node reclaim;
kswapd from wake to sleep) from the vmscan tracepoints, with each episode's
latency, the pages it reclaimed and the MR_DEMOTION pages migrated inside it
(bpf/reclaim.bpf.c). On a tiered machine demotion is how reclaim frees the
top tier, so this is where an NT demotion's cost lands."""
from __future__ import annotations

import ctypes

from nttrace import bpf as bpf_sources
from nttrace.probe_framework import histogram
from nttrace.probes import migrate
from nttrace.probe_framework.base import TracepointProbe
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import PGSTEAL, USAGE_DROP, Exercise, GroundTruth, memcg_reclaimed
from nttrace.workloads import triggers

SOURCE = "reclaim.bpf.c"

# row index = the program's RECLAIM_* value, named as the C names it
KINDS = tuple(name.removeprefix("RECLAIM_").lower() for name, _v in
              sorted(((k, v) for k, v in bpf_sources.defines(SOURCE).items() if k.startswith("RECLAIM_")),
                     key=lambda kv: kv[1]))
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
MIGRATED = (*migrate.DONE, "nttrace_reclaim_migrate_done")
ATTACHMENTS = tuple(("vmscan", e, fn) for e, fn in EPISODES) + (SHRINK, MIGRATED)
LABELS = (("kind", "kind"),)


def reclaim_round() -> dict:
    """A short memcg reclaim: the vmscan tracepoints' benchmark workload."""
    return triggers.memcg_reclaim(scratch_mib=16)


# cgroup v2 counts the pages its reclaim stole (pgsteal); v1 has no such
# counter, so the drop in charged memory stands in
MEMCG_RECLAIM = Exercise(
    workload="reclaims a scratch memory cgroup's page cache (a 64 MiB file in /var/tmp)", run=triggers.memcg_reclaim,
    count=memcg_reclaimed, truths=(GroundTruth("pgsteal", "memory.stat pgsteal delta", PGSTEAL),
                                   GroundTruth("usage_drop_pages", "memory.usage_in_bytes drop", USAGE_DROP)),
    bench_round=reclaim_round)


class ReclaimProbe(TracepointProbe):
    name = "reclaim"
    summary = ("reclaim episodes (direct, memcg, node, kswapd) and the demotions inside them, from the vmscan "
               "tracepoints")
    source = SOURCE
    programs = ATTACHMENTS
    exercise = MEMCG_RECLAIM
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

    def snapshot(self) -> dict:
        table = self.maps["reclaim_stats"]
        rows = []
        for i, kind in enumerate(KINDS):
            s, buckets = histogram.latency_stats(table[ctypes.c_int(i)], ("episodes", "reclaimed", "demoted", "unpaired"))
            rows.append({"kind": kind, "episodes": s["episodes"], "reclaimed": s["reclaimed"], "demoted": s["demoted"],
                         "unpaired": s["unpaired"],
                         "latency_ns": histogram.Latency(s["episodes"], s["sum_ns"], s["max_ns"], buckets)})
        return {"via": self.via, "rows": rows}
