# SPDX-License-Identifier: Apache-2.0
"""The Prometheus collector: reads the probes' BPF maps at scrape time (no
per-event work in Python), exports each probe's rows as the metrics it
declares, and turns the kernel's log2 histograms into cumulative Prometheus
histograms in seconds. It names no probe."""
from __future__ import annotations

import os

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from nttrace import __version__
from nttrace.probe_framework import histogram
from nttrace.probes import PROBES
from nttrace.probe_framework.contract import label_value, row_value


def _add_hist(fam: HistogramMetricFamily, labels: list[str], lat: histogram.Latency) -> None:
    cum = histogram.cumulative(lat.buckets, divisor=1e9)
    fam.add_metric(labels, [(_le(le), c) for le, c in cum], sum_value=lat.sum_ns / 1e9)


def _le(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(value)


class ProbeCollector:
    """Everything the attached probes know, as metrics."""

    def __init__(self, tracer, kernel_release: str | None = None):
        self.tracer = tracer
        self.release = kernel_release or os.uname().release

    def collect(self):
        snap = self.tracer.snapshot(summarise=False)   # histograms as the maps hold them
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
        for name, entry in snap.items():
            if entry.get("status") == "attached":
                yield from probe_families(PROBES[name].metrics, entry.get("rows", []))


def probe_families(metrics, rows: list[dict]):
    """The families a probe declares (nttrace.probe_framework.contract.Metric), one per
    name, filled from its rows; a family with no samples still says what it
    is (HELP and TYPE), as it does before the first event."""
    families: dict[str, object] = {}
    for m in metrics:
        labels = [n for n, _ in m.labels] + [n for n, _ in m.const_labels]
        fam = families.get(m.name)
        if fam is None:
            kind = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}[m.kind]
            fam = families[m.name] = kind(m.name, m.help, labels=labels)
        for r in rows:
            value = row_value(r, m.value)
            if value is None:
                continue
            lv = [label_value(row_value(r, key)) for _, key in m.labels] + [v for _, v in m.const_labels]
            if m.kind == "histogram":
                _add_hist(fam, lv, value)
            else:
                fam.add_metric(lv, value)
    yield from families.values()
