"""Golden end-to-end output of the collectors (node_exporter style): fixture
inputs in, the exact Prometheus text out. Regenerate a golden file only
after reading the diff: NTTRACE_UPDATE_GOLDEN=1 pytest tests/test_exporter_golden.py"""
import json
import os
import types

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES
from nttrace import histogram
from nttrace.exporters.prometheus_collector import ProbeCollector
from nttrace.exporters.vmstat_collector import VmstatCollector

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
    """Replays a snapshot recorded from a real kernel (see fixtures/vmstat/README.md)."""

    def __init__(self, probes: dict):
        self._snap = probes
        self.meta = types.SimpleNamespace(nt_revision="none")

    def snapshot(self):
        return self._snap


def test_probe_collector_golden_from_a_recorded_kernel_snapshot():
    recorded = json.loads((FIXTURES / "migrate_snapshot_6.18.json").read_text())["probes"]
    text = render(ProbeCollector(RecordedTracer(recorded), kernel_release="6.18.44-fc-v669"))
    check_golden("probes.prom", text)
    row = recorded["migrate"]["rows"][0]
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    hist = fams["nttrace_migrate_duration_seconds"]
    buckets = [s for s in hist.samples if s.name.endswith("_bucket")]
    values = [s.value for s in buckets]
    assert values == sorted(values)  # cumulative
    inf = next(s.value for s in buckets if s.labels["le"] == "+Inf")
    count = next(s.value for s in hist.samples if s.name.endswith("_count"))
    total = next(s.value for s in hist.samples if s.name.endswith("_sum"))
    assert inf == count == row["calls"]
    assert abs(total - row["latency_ns"]["sum"] * 1e-9) < 1e-12
    calls = fams["nttrace_migrate_calls"]
    assert calls.type == "counter" and calls.samples[0].labels == {"mode": "MIGRATE_SYNC", "reason": "MR_COMPACTION", "nt": "false"}


def test_log2_bucket_arithmetic():
    b = {3: 2, 5: 1}
    # slot 3 holds [8, 16), slot 5 holds [32, 64); le is the last integer in the bucket
    assert histogram.cumulative(b) == [(15, 2), (63, 3), (float("inf"), 3)]
    assert histogram.percentile(b, 0.5) == 8 + (1.5 / 2) * 8
    assert histogram.percentile({}, 0.5) is None
    s = histogram.summary(b, 3, 100, 40)
    assert s["p99"] <= s["max"] == 40 and s["sum"] == 100 and s["count"] == 3
