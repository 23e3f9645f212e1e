# SPDX-License-Identifier: Apache-2.0
"""The daemon's outputs: the Prometheus collectors (probes, vmstat, perf) and the HTTP endpoint with its web config."""
