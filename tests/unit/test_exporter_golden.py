# SPDX-License-Identifier: Apache-2.0
"""Golden end-to-end output of the collectors (node_exporter style): fixture
inputs in, the exact Prometheus text out. Regenerate a golden file only
after reading the diff: NTTRACE_UPDATE_GOLDEN=1 pytest tests/unit/test_exporter_golden.py"""
import json
import os
import types
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES
from nttrace.probe_framework import histogram
from nttrace.exporters.prometheus_collector import ProbeCollector
from nttrace.exporters.vmstat_collector import VmstatCollector
from nttrace.probes.migrate import MigrateProbe

GOLDEN = FIXTURES / "golden"


def render(collector) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return generate_latest(reg).decode()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("NTTRACE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_vmstat_collector_golden():
    c = VmstatCollector(sys_root=FIXTURES / "vmstat/sys", proc_root=FIXTURES / "vmstat/proc")
    text = render(c)
    check_golden("vmstat.prom", text)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    dem = fams["nttrace_vmstat_pgdemote_kswapd"]
    assert dem.type == "counter"
    assert {s.labels["node"]: s.value for s in dem.samples if s.name.endswith("_total")} == {"0": 120345.0, "1": 0.0}
    mig = fams["nttrace_vmstat_pgmigrate_success"]
    assert mig.type == "counter" and mig.samples[0].labels == {}


class RecordedTracer:
    """Replays a snapshot recorded from a real kernel (tests/fixtures/recorded/)."""

    def __init__(self, probes: dict):
        self._snap = probes
        self.meta = types.SimpleNamespace(nt_revision="none")

    def snapshot(self, summarise: bool = True):
        return self._snap if summarise else histogram.latencies_of(self._snap)


def test_log2_bucket_arithmetic():
    b = {3: 2, 5: 1}
    small = (2, 6)
    # slot 3 holds [8, 16), slot 5 holds [32, 64); le is the last integer in the
    # bucket; every slot of the layout is there, the empty ones too
    assert histogram.cumulative(b, slots=small) == [(7, 0), (15, 2), (31, 2), (63, 3), (127, 3), (float("inf"), 3)]
    # interpolated from the previous bucket's le to this one's, as histogram_quantile() does
    assert histogram.percentile(b, 0.5, slots=small) == 7 + (1.5 / 2) * 8
    assert histogram.percentile({}, 0.5) is None
    s = histogram.summary({13: 2, 15: 1}, 3, 100_000, 40_000)
    assert s["p99"] <= s["max"] == 40_000 and s["sum"] == 100_000 and s["count"] == 3


def test_below_the_layout_counts_in_the_first_bucket_above_it_only_in_inf():
    lo, hi = histogram.LATENCY_SLOTS
    cum = histogram.cumulative({0: 1, lo - 3: 2, lo + 1: 4, hi + 5: 8}, divisor=1e9)
    assert len(cum) == hi - lo + 2
    assert cum[0] == (((1 << (lo + 1)) - 1) / 1e9, 3)           # 0 ns and slot lo-3 fold into the first
    assert cum[-2][1] == 7 and cum[-1] == (float("inf"), 15)   # slot hi+5 is only in +Inf
    # a percentile that falls in the first bucket interpolates from 0, as Prometheus does
    assert 0 <= histogram.percentile({lo - 3: 10}, 0.5) < (1 << (lo + 1))
    assert histogram.percentile({hi + 4: 1}, 0.5) == (1 << (hi + 1)) - 1   # +Inf: the last finite bound


def test_every_histogram_series_has_the_same_le_set_zeros_included():
    snap = json.loads((FIXTURES / "recorded" / "host-6.18" / "trace.json").read_text())["probes"]
    row = dict(snap[MigrateProbe.name]["rows"][0])
    row.update(mode="MIGRATE_ASYNC", calls=1, latency_ns=dict(row["latency_ns"], log2_buckets={"22": 1}, sum=5_000_000))
    snap[MigrateProbe.name]["rows"].append(row)
    text = render(ProbeCollector(RecordedTracer(snap), kernel_release="x"))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    les = {}
    for s in fams["nttrace_migrate_duration_seconds"].samples:
        if s.name.endswith("_bucket"):
            les.setdefault(s.labels["mode"], []).append(s.labels["le"])
    assert les["MIGRATE_SYNC"] == les["MIGRATE_ASYNC"]
    lo, hi = histogram.LATENCY_SLOTS
    assert len(les["MIGRATE_ASYNC"]) == hi - lo + 2 and les["MIGRATE_ASYNC"][-1] == "+Inf"


def test_every_series_the_dashboard_and_alerts_query_is_exported():
    """A renamed or dropped metric breaks a panel or an alert silently; here
    it fails. Exported: the families of the golden scrapes (every probe,
    vmstat, the build and kernel info) and the perf collector's."""
    import re

    import nttrace
    from nttrace.exporters import perf_collector
    data = Path(nttrace.__file__).parent / "data"
    exported = set()
    for prom in GOLDEN.glob("*.prom"):
        exported |= set(re.findall(r"^# TYPE (\w+) ", prom.read_text(), re.M))
    exported |= set(re.findall(r'MetricFamily\(\s*"(\w+)"', Path(perf_collector.__file__).read_text()))
    suffixes = ("_bucket", "_sum", "_count", "_total")
    queried = set()
    for f in (data / "grafana-dashboard.json", data / "nttrace-alerts.yml"):
        for name in re.findall(r"\bnttrace_\w+", f.read_text()):
            base = next((name[: -len(s)] for s in suffixes if name.endswith(s) and name[: -len(s)] in exported), name)
            queried.add(base)
    assert queried and queried <= exported, sorted(queried - exported)
