"""The page_ref probe: page_ref:page_ref_set events (bpf/page_ref.bpf.c).
Opt-in, because enabling this tracepoint turns the zone-device template
path off on the series' revisions 4 to 8."""
from __future__ import annotations

import ctypes

from nttrace.probes.base import Availability, Probe
from nttrace.probes.contract import Column, Metric

TRACEPOINT = ("page_ref", "page_ref_set")

OBSERVER_EFFECT = ("enabling page_ref:page_ref_set makes memmap_init_zone_device() take the per-page "
                   "slow path on the template series (v4..v8): memmap latencies measured with it are slow-path latencies")


class PageRefProbe(Probe):
    name = "page_ref"
    source = "page_ref.bpf.c"
    tracepoints = (TRACEPOINT,)
    columns = (Column("PAGE_REF_SET EVENTS", "events", 19),)
    metrics = (Metric("nttrace_page_ref_set", "page_ref:page_ref_set events (opt-in: turns the template path off "
                      "on v4..v8)", "counter", "events"),)

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
        total = self.bpf["page_ref_set_total"][ctypes.c_int(0)].value
        return {"page_ref_set_total": total, "rows": [{"events": total}], "warning": OBSERVER_EFFECT}
