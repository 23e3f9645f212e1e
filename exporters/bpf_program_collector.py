# SPDX-License-Identifier: Apache-2.0
"""The probes' BPF programs as the kernel counts them: run time and runs
per program (run_time_ns and run_cnt, nttrace.kernel.bpf_stats), as
ebpf_exporter and bpftop read them. The counters grow only while run-time
statistics are on; nttrace_bpf_stats_enabled says whether nttrace holds
them on and how (the reason is in /healthz)."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class BpfProgramCollector:
    def __init__(self, tracer, hold):
        self.tracer = tracer
        self.hold = hold      # nttrace.kernel.bpf_stats.Hold

    def collect(self):
        enabled = GaugeMetricFamily(
            "nttrace_bpf_stats_enabled", "1 when nttrace holds the kernel's BPF run-time statistics on "
            "(method: bpf_enable_stats, a descriptor the kernel drops with the process; or the sysctl "
            "kernel.bpf_stats_enabled, restored on exit); 0: not by nttrace", labels=["method"])
        enabled.add_metric([self.hold.method], 1.0 if self.hold.on else 0.0)
        yield enabled
        seconds = CounterMetricFamily(
            "nttrace_bpf_program_run_seconds", "Time the kernel counted in the probe's BPF program "
            "(run_time_ns; the tracepoint's or trampoline's entry cost around it is not counted)",
            labels=["probe", "program"])
        runs = CounterMetricFamily("nttrace_bpf_program_runs", "Runs of the probe's BPF program (run_cnt)",
                                   labels=["probe", "program"])
        for probe, programs in self.tracer.program_stats().items():
            for program, st in sorted(programs.items()):
                seconds.add_metric([probe, program], st.run_time_ns / 1e9)
                runs.add_metric([probe, program], float(st.run_cnt))
        yield seconds
        yield runs
