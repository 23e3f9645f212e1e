# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate --textfile-dir DIR`: a run's results for node_exporter's
textfile collector, so every scrape of node_exporter carries the last
validation of the host (the convention for one-shot jobs; a systemd timer,
nttrace-validate.timer, runs it).

The file, DIR/nttrace_validate.prom, is written whole and renamed into
place (prometheus_client's write_to_textfile: a temporary file in the same
directory, then rename(2)), so the collector never reads half a run:

    nttrace_validate_check_status{check="kernel.nt_support",status="pass"} 1   # one series a check
    nttrace_validate_checks{status="fail"} 0                                   # the tally
    nttrace_validate_series_status{check="native.nt_benefit",series="nt_demotion",status="warn"} 1
                                    # one series a patch series a check judges: pass, warn or noisy
    nttrace_validate_last_run_timestamp_seconds 1.7e9                          # when it finished
    nttrace_validate_last_run_duration_seconds 12.5
    nttrace_validate_last_run_exit_code 0          # 0 ok, 1 a check failed, 2-4 the run itself failed
    nttrace_validate_info{kernel_release="7.2.13",nt_revision="v3",machine="vm",version="0.1.0"} 1

A run that cannot run at all (no privilege: exit 3) still writes the run's
lines with its exit code and no checks: the alert on the exit code fires,
and stale check results are not left behind as if current.
"""
from __future__ import annotations

import os

from nttrace.errors import UsageError

FILENAME = "nttrace_validate.prom"
STATUSES = ("pass", "warn", "fail", "skip")


class _RunCollector:
    def __init__(self, report: dict | None, started: float, finished: float, exit_code: int, version: str,
                 kernel_release: str | None, nt_revision: str | None, machine_kind: str | None):
        self.report, self.started, self.finished, self.exit_code = report, started, finished, exit_code
        self.info = {"version": version, "kernel_release": kernel_release or "unknown",
                     "nt_revision": nt_revision or "unknown", "machine": machine_kind or "unknown"}

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
        if self.report is not None:
            status = GaugeMetricFamily("nttrace_validate_check_status",
                                       "Each check of the last nttrace validate run, labelled with its status",
                                       labels=["check", "status"])
            for c in self.report["checks"]:
                status.add_metric([c["id"], c["status"]], 1.0)
            yield status
            tally = GaugeMetricFamily("nttrace_validate_checks", "Checks of the last nttrace validate run by status",
                                      labels=["status"])
            for s in STATUSES:
                tally.add_metric([s], float(self.report["summary"].get(s, 0)))
            yield tally
            series = GaugeMetricFamily("nttrace_validate_series_status",
                                       "Each patch series' verdict in the last nttrace validate run, per check that "
                                       "judges several (pass, warn, or noisy: too spread to call)",
                                       labels=["check", "series", "status"])
            for c in self.report["checks"]:
                for v in c.get("series") or ():
                    series.add_metric([c["id"], v["series"], v["status"]], 1.0)
            if series.samples:  # reports from before per-series verdicts have none
                yield series
        yield GaugeMetricFamily("nttrace_validate_last_run_timestamp_seconds",
                                "When the last nttrace validate run finished", value=self.finished)
        yield GaugeMetricFamily("nttrace_validate_last_run_duration_seconds",
                                "How long the last nttrace validate run took", value=self.finished - self.started)
        yield GaugeMetricFamily("nttrace_validate_last_run_exit_code",
                                "Exit code of the last nttrace validate run (0 ok, 1 a check failed, 2-4 the run failed)",
                                value=float(self.exit_code))
        info = InfoMetricFamily("nttrace_validate", "The kernel and nttrace of the last nttrace validate run")
        info.add_metric([], self.info)
        yield info


def write(directory: str, report: dict | None, started: float, finished: float, exit_code: int,
          kernel_release: str | None = None) -> str:
    """Write the run's file atomically; returns its path."""
    from prometheus_client import CollectorRegistry, write_to_textfile

    from nttrace import __version__
    registry = CollectorRegistry(auto_describe=False)
    kernel = (report or {}).get("kernel") or {}
    machine_kind = ((report or {}).get("machine") or {}).get("kind")
    registry.register(_RunCollector(report, started, finished, exit_code, __version__,
                                    (report or {}).get("kernel_release") or kernel_release,
                                    kernel.get("nt_revision"), machine_kind))
    path = os.path.join(directory, FILENAME)
    try:
        write_to_textfile(path, registry)
        os.chmod(path, 0o644)      # node_exporter runs as its own user
    except OSError as exc:
        raise UsageError(f"--textfile-dir {directory}: cannot write {FILENAME}: {exc.strerror}") from None
    return path
