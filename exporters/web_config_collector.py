# SPDX-License-Identifier: Apache-2.0
"""The web configuration's reload state as metrics (as node_exporter and
the exporter toolkit export theirs), for whichever WebConfigSource the
server holds now (a daemon reload can replace it). Nothing is exported
when the daemon runs without a web config file.

    nttrace_web_config_last_reload_successful 1
    nttrace_web_config_last_reload_success_timestamp_seconds 1.7652e+09
    nttrace_web_config_reload_failures_total 0
"""
from __future__ import annotations

from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from nttrace.exporters.web_config_reload import WebConfigSource


class WebConfigCollector:
    def __init__(self, source: Callable[[], WebConfigSource]):
        self.source = source

    def collect(self):
        source = self.source()
        if source.path is None:
            return []
        source.current()          # a change since the last connection is loaded (or refused) first
        status = source.status    # one object: the three values of one reload
        ok = GaugeMetricFamily("nttrace_web_config_last_reload_successful",
                               "1 if the last change to the web config file loaded, 0 if the last good one is kept")
        ok.add_metric([], 1.0 if status.ok else 0.0)
        at = GaugeMetricFamily("nttrace_web_config_last_reload_success_timestamp_seconds",
                               "When the web config in use was loaded")
        at.add_metric([], status.last_success)
        failed = CounterMetricFamily("nttrace_web_config_reload_failures",
                                     "Changes to the web config files that did not load")
        failed.add_metric([], status.failures)
        return [ok, at, failed]
