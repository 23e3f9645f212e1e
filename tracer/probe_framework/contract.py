# SPDX-License-Identifier: Apache-2.0
"""What a probe declares, beside its BPF C, so that every consumer can use it
without knowing it by name:

* what it needs to attach: `tracepoints` ((system, event) pairs) and kernel
  `functions` (attached by fentry, falling back to kprobe); the capability
  report probes exactly these. BTF offsets a probe reads are checked in its
  availability(), which names the member it lacks.
* its rows: `Probe.snapshot()["rows"]`, a list of dicts whose keys are the
  ones its columns and metrics name (a dotted key reaches into a latency
  summary, e.g. "latency_ns.p50");
* `columns`: its `nttrace trace` table;
* `metrics`: what the exporter makes of each row (name, help, kind, labels,
  and for histograms the latency summary a row carries, on the fixed bucket
  layout of nttrace.probe_framework.histogram).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of the `trace` table: `key` of a row, printed `width`
    wide; numbers divided by `scale` and formatted with `fmt`; booleans as
    y/n, a missing value as '-'. Text is left-aligned, numbers right."""
    header: str
    key: str
    width: int
    fmt: str = ""
    scale: float = 1.0


@dataclass(frozen=True)
class Metric:
    """One Prometheus metric family filled from a probe's rows.

    kind is "counter", "gauge" or "histogram". `value` is the row key of the
    sample (for a histogram: a latency summary in ns, exported in seconds);
    a row whose value is None adds no sample. `labels` maps label names to
    row keys, `const_labels` adds fixed labels (several Metric entries with
    one name and different constant labels make one family, e.g. pages by
    result)."""
    name: str
    help: str
    kind: str
    value: str
    labels: tuple[tuple[str, str], ...] = ()
    const_labels: tuple[tuple[str, str], ...] = ()


def row_value(row: dict, key: str):
    """`key` of a row (or of any nested dict: a check's evidence); "a.b" reads
    row["a"]["b"]. None when absent."""
    value = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def label_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
