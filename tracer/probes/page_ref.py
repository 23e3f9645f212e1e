# SPDX-License-Identifier: Apache-2.0
"""The page_ref probe: page_ref:page_ref_set events (bpf/page_ref.bpf.c).
Opt-in, because enabling this tracepoint turns the zone-device template
path off on the series' revisions 4 to 8."""
from __future__ import annotations

import ctypes

from nttrace.probe_framework.base import TracepointProbe
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise
from nttrace.probes.memmap import REBIND
from nttrace.probes.migrate import compaction_round

TRACEPOINT = ("page_ref", "page_ref_set")

OBSERVER_EFFECT = ("with page_ref:page_ref_set enabled, a kernel carrying the zone-device template series' patches "
                   "4-8 but not 9/9 takes the per-page path in memmap_init_zone_device(), so memmap latencies "
                   "measured meanwhile are that path's (validate --page-ref tells which path ran from the events "
                   "per initialised page)")


class PageRefProbe(TracepointProbe):
    name = "page_ref"
    summary = ("page_ref_set events, the template-path inference (opt-in: enabling the tracepoint turns the "
               "template path off)")
    source = "page_ref.bpf.c"
    programs = ((*TRACEPOINT, "nttrace_page_ref_set"),)
    missing_hint = " (kernel built without CONFIG_DEBUG_PAGE_REF)"
    # the probe counts refcount sets, of which the kernel keeps no count; every
    # page the allocator hands out sets its refcount, so a compaction benches it
    exercise = Exercise(REBIND.workload, REBIND.run, no_truth="the kernel counts no page refcount sets",
                        bench_round=compaction_round)
    columns = (Column("PAGE_REF_SET EVENTS", "events", 19),)
    metrics = (Metric("nttrace_page_ref_set", "page_ref:page_ref_set events (opt-in: turns the template path off "
                      "with the template series' patches 4-8 but not 9/9)", "counter", "events"),)

    def notes(self) -> list[str]:
        return [OBSERVER_EFFECT]

    def snapshot(self) -> dict:
        total = self.maps["page_ref_set_total"][ctypes.c_int(0)].value
        return {"page_ref_set_total": total, "rows": [{"events": total}], "warning": OBSERVER_EFFECT}
