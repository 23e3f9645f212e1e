# SPDX-License-Identifier: Apache-2.0
"""System-wide perf counters for the daemon: LLC misses (generic hardware
cache events) and memory-device read/write bytes (uncore/CXL PMUs named in
sysfs). Opened once, read at scrape time; what a host lacks is reported by
nttrace_perf_up with the reason in /healthz."""
from __future__ import annotations

from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from nttrace.perf import counters, memory_traffic, sysfs_pmu


class PerfCollector:
    def __init__(self, groups: tuple[str, ...]):
        self.groups = groups
        self.status: dict[str, dict] = {}
        self.llc = None
        self.traffic: list = []
        self.traffic_counters = []
        if "llc" in groups:
            specs = {k: counters.GENERIC_EVENTS[k] for k in ("llc_read_misses", "llc_write_misses")}
            self.llc = counters.Counters(specs, system_wide=True)
            errors = self.llc.group.errors
            if len(errors) == len(specs):
                self.status["llc"] = {"up": False, "reason": "; ".join(errors.values())}
                self.llc.close()
                self.llc = None
            else:
                self.llc.start()
                self.status["llc"] = {"up": True, "path": self.llc.path}
        if "memory_traffic" in groups:
            pmus = sysfs_pmu.discover(Path("/sys"))
            events, notes = memory_traffic.traffic_events(pmus)
            for e in events:
                c = counters.Counters({"v": pmus[e.pmu].spec(e.event)}, system_wide=True, cpus=pmus[e.pmu].cpus[:1] or [0])
                if c.group.errors:
                    notes.append(f"{e.pmu}/{e.event}: {c.group.errors['v']}")
                    c.close()
                    continue
                c.start()
                self.traffic_counters.append((e, c))
            up = bool(self.traffic_counters)
            self.status["memory_traffic"] = {"up": up, "reason": "; ".join(notes) or ("" if up else "no uncore or CXL PMU in sysfs")}

    def collect(self):
        up = GaugeMetricFamily("nttrace_perf_up", "1 when the perf counter group is counting", labels=["group"])
        for g, st in self.status.items():
            up.add_metric([g], 1.0 if st["up"] else 0.0)
        yield up
        if self.llc is not None:
            fam = CounterMetricFamily("nttrace_llc_misses", "Last-level cache misses, system-wide (scaled for multiplexing)", labels=["op"])
            for key, r in self.llc.readings().items():
                if r.available:
                    fam.add_metric(["read" if "read" in key else "write"], r.value)
            yield fam
        if self.traffic_counters:
            rd = CounterMetricFamily("nttrace_memory_read_bytes", "Bytes read from a memory device (uncore/CXL PMU)", labels=["pmu", "node"])
            wr = CounterMetricFamily("nttrace_memory_write_bytes", "Bytes written to a memory device (uncore/CXL PMU)", labels=["pmu", "node"])
            for e, c in self.traffic_counters:
                r = c.readings()["v"]
                fam = rd if e.direction == "read" else wr
                fam.add_metric([e.pmu, "" if e.node is None else str(e.node)], (r.value or 0) * e.bytes_per_count)
            yield rd
            yield wr

    def close(self):
        if self.llc is not None:
            self.llc.close()
        for _e, c in self.traffic_counters:
            c.close()
