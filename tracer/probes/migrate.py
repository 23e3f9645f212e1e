# SPDX-License-Identifier: Apache-2.0
"""The migrate probe: migrate_pages() calls by (mode, reason), from the
migrate tracepoints (bpf/migrate.bpf.c)."""
from __future__ import annotations

import ctypes

from nttrace import bpf as bpf_sources
from nttrace.kernel.sysroot import Sysroot
from nttrace.probe_framework import histogram
from nttrace.probe_framework.base import TracepointProbe
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise, GroundTruth, migrated_pages
from nttrace.workloads import triggers

# The migrate tracepoints, named in Python here only: a module that attaches
# to one of them imports it from here (reclaim); the kernel's enum tables are
# read from whichever of them prints them (nttrace.kernel.metadata). The BPF
# C's functions are attached to them by the triples in `programs`.
START = ("migrate", "mm_migrate_pages_start")
DONE = ("migrate", "mm_migrate_pages")
LABELS = (("mode", "mode"), ("reason", "reason"), ("nt", "nt"))

COLUMNS = (
    Column("MODE", "mode", 34), Column("REASON", "reason", 20), Column("NT", "nt", 3),
    Column("CALLS", "calls", 7, "d"), Column("OK PAGES", "succeeded", 9, "d"), Column("FAILED", "failed", 7, "d"),
    Column("P50 us", "latency_ns.p50", 9, ".1f", 1e3), Column("MAX us", "latency_ns.max", 9, ".1f", 1e3),
)


def migrate_metrics(base: str, where: str, pages: bool) -> tuple[Metric, ...]:
    """migrate_pages() by (mode, reason): `pages` where the rows carry page
    counts (the tracepoints do; the function boundary does not)."""
    out = [
        Metric(f"{base}_calls", "migrate_pages() calls", "counter", "calls", LABELS),
        Metric(f"{base}_unpaired", "migrate_pages() calls that ended without a start seen (attached mid-call, a "
               "nested call, or the in-flight slot taken by another task): counted here, not in calls or the latency",
               "counter", "unpaired", LABELS),
    ]
    if pages:
        out += [Metric(f"{base}_pages", "Pages migrated, by result", "counter", result, LABELS, (("result", result),))
                for result in ("succeeded", "failed")]
    out.append(Metric(f"{base}_duration_seconds", f"migrate_pages() latency ({where})", "histogram", "latency_ns", LABELS))
    return tuple(out)


def compaction_round() -> dict:
    """A short compaction: the migrate tracepoints' benchmark workload."""
    return triggers.compaction(scratch_mib=64, settle_s=0.05)


COMPACTION = Exercise(
    workload="compacts memory (/proc/sys/vm/compact_memory)", run=triggers.compaction, count=migrated_pages,
    truths=(GroundTruth("pgmigrate_success", "/proc/vmstat pgmigrate_success delta"),),
    bench_round=compaction_round)


COUNTERS = ("calls", "succeeded", "failed", "thp_succeeded", "thp_failed", "unpaired", "errors")


class MigrateProbe(TracepointProbe):
    name = "migrate"
    summary = "migrate_pages() by (mode, reason), from the migrate tracepoints"
    source = "migrate.bpf.c"
    programs = ((*START, "nttrace_migrate_start"), (*DONE, "nttrace_migrate_done"))
    columns = COLUMNS
    metrics = migrate_metrics("nttrace_migrate", f"{START[1]} to {DONE[1]}", pages=True)
    exercise = COMPACTION

    @classmethod
    def options_for(cls, names: list[str], record: bool) -> dict:
        return {"records": record}

    def __init__(self, meta, caps, options=None, sysroot: Sysroot | None = None):
        super().__init__(meta, caps, options, sysroot)
        self.start_fmt, self.done_fmt = self.formats.get(START), self.formats.get(DONE)

    def defines(self) -> dict:
        self.start_fmt.require("mode", "reason")
        self.done_fmt.require("succeeded", "failed", "thp_succeeded", "thp_failed", "mode", "reason")
        s, d = self.start_fmt.fields, self.done_fmt.fields
        return {
            "NTTRACE_START_MODE": s["mode"].offset,
            "NTTRACE_START_REASON": s["reason"].offset,
            "NTTRACE_DONE_SUCCEEDED": d["succeeded"].offset,
            "NTTRACE_DONE_FAILED": d["failed"].offset,
            "NTTRACE_DONE_THP_SUCCEEDED": d["thp_succeeded"].offset,
            "NTTRACE_DONE_THP_FAILED": d["thp_failed"].offset,
            "NTTRACE_DONE_MODE": d["mode"].offset,
            "NTTRACE_DONE_REASON": d["reason"].offset,
            "NTTRACE_RECORD": 1 if self.options.get("records") else 0,
            "NTTRACE_MODES": self.n_modes,
            "NTTRACE_REASONS": self.n_reasons,
            "NTTRACE_VIA_TRACEPOINT": 1,
        }

    @property
    def n_modes(self) -> int:
        return max(self.meta.migrate_mode.values(), default=0) + 1

    @property
    def n_reasons(self) -> int:
        return max(self.meta.migrate_reason.values(), default=0) + 1

    def attach(self) -> None:
        super().attach()
        if self.emits_records():
            self.open_records("migrate_records", page_cnt=64)

    def emits_records(self) -> bool:
        return bool(self.options.get("records"))

    def _on_record(self, cpu, data, size):
        r = ctypes.cast(data, ctypes.POINTER(bpf_sources.struct_type(self.source, "migrate_record"))).contents
        self._records.append({
            "probe": "migrate", "ts_ns": r.ts, "pid": r.pid, "latency_ns": r.latency_ns,
            **self.labels(r.mode, r.reason), "succeeded": r.succeeded, "failed": r.failed,
        })

    def labels(self, mode: int, reason: int) -> dict:
        """A call's mode and reason as the kernel's enums name them, their
        values, and whether the mode is an NT one: the one decoding of the
        two, for rows and records alike."""
        return {"mode": self.meta.mode_name(mode), "reason": self.meta.reason_name(reason),
                "mode_value": mode, "reason_value": reason, "nt": self.meta.is_nt_mode(mode)}

    def raw(self) -> dict:
        """Cumulative per-(mode, reason) stats and log2 histograms, summed
        over CPUs. Row index = mode * reasons + reason; the last row holds
        values outside the kernel's enums (reported as mode/reason -1)."""
        stats_t = self.maps["migrate_stats"]
        n_rows = self.n_modes * self.n_reasons + 1
        stats, hists = {}, {}
        for row in range(n_rows):
            total, hist = histogram.latency_stats(stats_t[ctypes.c_int(row)], COUNTERS)
            if not (total["calls"] or total["unpaired"] or total["succeeded"] or total["failed"] or total["errors"]):
                continue
            key = (-1, -1) if row == n_rows - 1 else divmod(row, self.n_reasons)
            stats[key] = total
            hists[key] = hist
        return {"stats": stats, "hists": hists, "lost": self._lost_records}

    def snapshot(self) -> dict:
        raw = self.raw()
        rows = []
        for (mode, reason), s in sorted(raw["stats"].items()):
            buckets = raw["hists"].get((mode, reason), {})
            rows.append({
                **self.labels(mode, reason),
                "calls": s["calls"],
                "succeeded": s["succeeded"],
                "failed": s["failed"],
                "thp_succeeded": s["thp_succeeded"],
                "thp_failed": s["thp_failed"],
                "unpaired": s["unpaired"],
                "errors": s["errors"],
                "latency_ns": histogram.Latency(s["calls"], s["sum_ns"], s["max_ns"], buckets),
            })
        return {"via": self.via, "rows": rows, "events_lost": raw["lost"]}


def compaction_rows(rows: list[dict]) -> list[dict]:
    """The rows of the migrations compaction made (reason MR_COMPACTION): what
    this probe's exercise, COMPACTION, makes the kernel do."""
    return [r for r in rows if r.get("reason") == "MR_COMPACTION"]
