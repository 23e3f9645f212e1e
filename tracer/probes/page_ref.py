"""The page_ref probe: page_ref:page_ref_set events (bpf/page_ref.bpf.c).
Opt-in, because enabling this tracepoint turns the zone-device template
path off on the series' revisions 4 to 8."""
from __future__ import annotations

import ctypes

from nttrace.probes.base import Availability, Probe
from nttrace.probes.contract import Column, Metric

TRACEPOINT = ("page_ref", "page_ref_set")

OBSERVER_EFFECT = ("with page_ref:page_ref_set enabled, a kernel carrying the zone-device template series' patches "
                   "4-8 but not 9/9 takes the per-page path in memmap_init_zone_device(), so memmap latencies "
                   "measured meanwhile are that path's (validate --page-ref tells which path ran from the events "
                   "per initialised page)")


class PageRefProbe(Probe):
    name = "page_ref"
    source = "page_ref.bpf.c"
    tracepoints = (TRACEPOINT,)
    columns = (Column("PAGE_REF_SET EVENTS", "events", 19),)
    metrics = (Metric("nttrace_page_ref_set", "page_ref:page_ref_set events (opt-in: turns the template path off "
                      "with the template series' patches 4-8 but not 9/9)", "counter", "events"),)

    def availability(self) -> Availability:
        cap = self.caps["tracepoint:page_ref:page_ref_set"]
        if not cap.available:
            return Availability(False, f"{cap.detail} (kernel built without CONFIG_DEBUG_PAGE_REF)")
        if not self.caps["bcc"].available:
            return Availability(False, self.caps["bcc"].detail)
        return Availability(True, attach_via="tracepoint")

    def attach(self) -> None:
        self.via = "tracepoint"
        self.load().attach_tracepoint(tp=":".join(TRACEPOINT), fn_name="nttrace_page_ref_set")

    def notes(self) -> list[str]:
        return [OBSERVER_EFFECT]

    def snapshot(self) -> dict:
        total = self.maps["page_ref_set_total"][ctypes.c_int(0)].value
        return {"page_ref_set_total": total, "rows": [{"events": total}], "warning": OBSERVER_EFFECT}
