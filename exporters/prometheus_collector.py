"""The Prometheus collector: reads the probes' BPF maps at scrape time (no
per-event work in Python) and turns the kernel's log2 histograms into
cumulative Prometheus histograms in seconds."""
from __future__ import annotations

import os

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from nttrace import __version__, histogram

def _hist(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


def _add_hist(fam: HistogramMetricFamily, labels: list[str], lat: dict) -> None:
    buckets = {int(k): v for k, v in lat["log2_buckets"].items()}
    cum = histogram.cumulative(buckets, divisor=1e9)
    fam.add_metric(labels, [(_le(le), c) for le, c in cum], sum_value=lat["sum"] / 1e9)


def _le(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(value)


class ProbeCollector:
    """Everything the attached probes know, as metrics."""

    def __init__(self, tracer, kernel_release: str | None = None):
        self.tracer = tracer
        self.release = kernel_release or os.uname().release

    def collect(self):
        snap = self.tracer.snapshot()
        up = GaugeMetricFamily("nttrace_probe_up", "1 when the probe is attached to the kernel", labels=["probe", "via"])
        lost = CounterMetricFamily("nttrace_events_lost", "Events or records a probe could not record", labels=["probe"])
        for name, entry in snap.items():
            up.add_metric([name, entry.get("via", "")], 1.0 if entry["status"] == "attached" else 0.0)
            if entry["status"] == "attached":
                lost.add_metric([name], float(entry.get("events_lost", 0)))
        yield up
        yield lost
        info = GaugeMetricFamily("nttrace_build_info", "nttrace version", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info
        kinfo = GaugeMetricFamily("nttrace_kernel_info", "The running kernel and the NT demotion revision its enums carry",
                                  labels=["release", "nt_revision"])
        kinfo.add_metric([self.release, self.tracer.meta.nt_revision], 1.0)
        yield kinfo
        yield from self._migrate(snap.get("migrate"))
        yield from self._migrate(snap.get("migrate_fn"), function=True)
        yield from self._memmap(snap.get("memmap"))
        yield from self._page_ref(snap.get("page_ref"))
        yield from self._copy(snap.get("copy"))

    @staticmethod
    def _attached(entry) -> bool:
        return bool(entry) and entry.get("status") == "attached"

    def _migrate(self, entry, function: bool = False):
        """migrate_pages() by (mode, reason): from the tracepoints, or (function)
        from fentry/kprobe on the function, where no page counts exist."""
        if not self._attached(entry):
            return
        labels = ["mode", "reason", "nt"]
        base, where = ("nttrace_migrate_function", "function entry to return") if function else \
            ("nttrace_migrate", "mm_migrate_pages_start to mm_migrate_pages")
        calls = CounterMetricFamily(f"{base}_calls", "migrate_pages() calls", labels=labels)
        pages = CounterMetricFamily(f"{base}_pages", "Pages migrated, by result", labels=labels + ["result"])
        unpaired = CounterMetricFamily(
            f"{base}_unpaired", "migrate_pages() calls that ended without a start seen (attached mid-call, a nested "
            "call, or the in-flight slot taken by another task): counted here, not in calls or the latency", labels=labels)
        dur = _hist(f"{base}_duration_seconds", f"migrate_pages() latency ({where})", labels)
        for r in entry["rows"]:
            lv = [r["mode"], r["reason"], "true" if r["nt"] else "false"]
            calls.add_metric(lv, r["calls"])
            unpaired.add_metric(lv, r.get("unpaired", 0))
            if r["succeeded"] is not None:
                pages.add_metric(lv + ["succeeded"], r["succeeded"])
                pages.add_metric(lv + ["failed"], r["failed"])
            _add_hist(dur, lv, r["latency_ns"])
        yield calls
        yield unpaired
        if not function:
            yield pages
        yield dur

    def _memmap(self, entry):
        if not self._attached(entry):
            return
        labels = ["pgmap_type", "node"]
        dur = _hist("nttrace_memmap_init_duration_seconds", "memmap_init_zone_device() latency", labels)
        pages = CounterMetricFamily("nttrace_memmap_init_pages", "struct pages initialised by memmap_init_zone_device()", labels=labels)
        calls = CounterMetricFamily("nttrace_memmap_init_calls", "memmap_init_zone_device() calls", labels=labels)
        for r in entry["rows"]:
            lv = [r["pgmap_type"], str(r["nid"])]
            _add_hist(dur, lv, r["latency_ns"])
            pages.add_metric(lv, r["pages"])
            calls.add_metric(lv, r["calls"])
        yield dur
        yield pages
        yield calls

    def _page_ref(self, entry):
        if not self._attached(entry):
            return
        c = CounterMetricFamily("nttrace_page_ref_set", "page_ref:page_ref_set events (opt-in: turns the template path off on v4..v8)")
        c.add_metric([], entry["page_ref_set_total"])
        yield c

    def _copy(self, entry):
        if not self._attached(entry):
            return
        b = CounterMetricFamily("nttrace_kernel_copy_bytes", "Bytes copied by the kernel's folio/page copy routines", labels=["routine", "nt"])
        c = CounterMetricFamily("nttrace_kernel_copy_calls", "Calls of the kernel's folio/page copy routines", labels=["routine", "nt"])
        for r in entry["rows"]:
            lv = [r["routine"], "true" if r["nt"] else "false"]
            b.add_metric(lv, r["bytes"])
            c.add_metric(lv, r["calls"])
        yield b
        yield c
