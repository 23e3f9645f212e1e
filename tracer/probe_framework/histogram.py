# SPDX-License-Identifier: Apache-2.0
"""log2 histograms read from BPF maps: decoding, the fixed bucket layout
every exported histogram uses, cumulative buckets for Prometheus, and
percentile estimates.

The BPF programs count latencies (ns) in the kernel's log2 slots
(bpf_log2l: slot s holds [2**s, 2**(s+1)), slot 0 holds 0 and 1). Prometheus
needs every series of a histogram to carry one fixed set of bounds on every
scrape, empty buckets included, or histogram_quantile() and sums by `le`
across series and instances go wrong. So nttrace exports the same slots for
every latency histogram, LATENCY_SLOTS: 10..35, upper bounds 2**(s+1) - 1 ns,
from 2.047 us to 68.7 s. A latency below the first bound counts in the first
bucket; one above the last only in +Inf. The percentiles nttrace prints (text
and JSON) are computed from these same buckets, so they land in the bucket
Prometheus' histogram_quantile() picks.
"""
from __future__ import annotations

from dataclasses import dataclass

LATENCY_SLOTS = (10, 35)   # first and last log2 slot exported


def accumulate(pairs, into: dict[int, int] | None = None) -> dict[int, int]:
    """{log2 slot: count} from (slot, count) pairs as BPF maps hold them (per
    CPU, per key), summed; zero counts are left out."""
    out: dict[int, int] = {} if into is None else into
    for slot, count in pairs:
        if count:
            out[slot] = out.get(slot, 0) + count
    return out


def latency_stats(values, counters: tuple[str, ...]) -> tuple[dict[str, int], dict[int, int]]:
    """A row of a stats map with latency statistics (bpf/common.h:
    NTTRACE_LATENCY, the one layout every probe counts in), read as
    ({counter: n, "sum_ns", "max_ns"}, {log2 slot: count}). `values` is the
    row's per-CPU copies (a list, summed: max_ns the largest) or the one
    value of a map every CPU shares."""
    values = list(values) if isinstance(values, list) else [values]
    out = {f: sum(getattr(v, f) for v in values) for f in (*counters, "sum_ns")}
    out["max_ns"] = max((v.max_ns for v in values), default=0)
    return out, accumulate((slot, c) for v in values for slot, c in enumerate(v.hist))


def fold(buckets: dict[int, int], slots: tuple[int, int] = LATENCY_SLOTS) -> dict[int, int]:
    """The kernel's slots on the exported layout: slots below the first are
    counted in it, slots above the last in slot last+1 (the +Inf bucket)."""
    lo, hi = slots
    out: dict[int, int] = {}
    for slot, count in buckets.items():
        s = min(max(slot, lo), hi + 1)
        out[s] = out.get(s, 0) + count
    return out


def bucket_bounds(slot: int, slots: tuple[int, int] = LATENCY_SLOTS) -> tuple[int, int]:
    """(lower, upper] of an exported bucket, as Prometheus reads it: from the
    previous bucket's `le` to this one's (2**(slot+1) - 1); the first starts
    at 0 (it holds everything below it), and +Inf is reported at the last
    finite bound, as histogram_quantile() does."""
    lo, hi = slots
    if slot <= lo:
        return 0, (1 << (lo + 1)) - 1
    if slot > hi:
        return (1 << (hi + 1)) - 1, (1 << (hi + 1)) - 1
    return (1 << slot) - 1, (1 << (slot + 1)) - 1


def percentile(buckets: dict[int, int], q: float, slots: tuple[int, int] = LATENCY_SLOTS) -> float | None:
    """q-quantile (0..1) by linear interpolation inside the exported bucket,
    as Prometheus' histogram_quantile() does."""
    folded = fold(buckets, slots)
    total = sum(folded.values())
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for slot in sorted(folded):
        count = folded[slot]
        if seen + count >= rank:
            lo, hi = bucket_bounds(slot, slots)
            frac = (rank - seen) / count if count else 0.0
            return lo + frac * (hi - lo)
        seen += count
    return float(bucket_bounds(max(folded), slots)[1])


def cumulative(buckets: dict[int, int], divisor: float = 1.0,
               slots: tuple[int, int] = LATENCY_SLOTS) -> list[tuple[float, int]]:
    """[(upper bound / divisor, cumulative count)] for every slot of the
    layout, zeros included, ending in (+Inf, total), as a Prometheus
    histogram wants. Kernel bounds are exclusive (< 2**(slot+1)); `le` is
    inclusive, so the bound is the last integer in the slot, 2**(slot+1) - 1
    (divided by `divisor`: 1e9 for nanoseconds to seconds)."""
    lo, hi = slots
    folded = fold(buckets, slots)
    out, running = [], 0
    for slot in range(lo, hi + 1):
        running += folded.get(slot, 0)
        out.append((((1 << (slot + 1)) - 1) / divisor, running))
    out.append((float("inf"), running + folded.get(hi + 1, 0)))
    return out


def summary(buckets: dict[int, int], count: int, sum_ns: int, max_ns: int) -> dict:
    def bounded(q):
        p = percentile(buckets, q)
        return None if p is None or not count else min(p, float(max_ns))
    return {
        "count": count,
        "sum": sum_ns,
        "mean": (sum_ns / count) if count else None,
        "p50": bounded(0.50),
        "p99": bounded(0.99),
        "max": max_ns if count else None,
        "log2_buckets": {str(k): v for k, v in sorted(buckets.items())},
        "percentiles": f"interpolated within the exported log2 buckets (slots {LATENCY_SLOTS[0]}..{LATENCY_SLOTS[1]})",
    }


@dataclass(frozen=True)
class Latency:
    """A latency histogram as the maps hold it: calls, their sum and maximum
    in ns, and {log2 slot: count} with int slots. Probes' snapshot rows carry
    it; the exporter reads its slots as they are, and what writes text or
    JSON takes its summary() (summarised()), where the percentiles are
    computed and the slots become JSON's string keys."""
    count: int
    sum_ns: int
    max_ns: int
    buckets: dict

    def summary(self) -> dict:
        return summary(self.buckets, self.count, self.sum_ns, self.max_ns)

    @classmethod
    def from_summary(cls, d: dict) -> "Latency":
        """A summary() read back (a recorded snapshot's)."""
        return cls(d["count"], d["sum"], d["max"] or 0, {int(k): v for k, v in d["log2_buckets"].items()})


def summarised(value):
    """`value` (a snapshot, an entry, a row) with every Latency in it
    replaced by its summary(): the form output takes."""
    if isinstance(value, Latency):
        return value.summary()
    if isinstance(value, dict):
        return {k: summarised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [summarised(v) for v in value]
    return value


def latencies_of(value):
    """The inverse of summarised() for a recorded snapshot: every latency
    summary in it read back as a Latency."""
    if isinstance(value, dict):
        if "log2_buckets" in value and "count" in value:
            return Latency.from_summary(value)
        return {k: latencies_of(v) for k, v in value.items()}
    if isinstance(value, list):
        return [latencies_of(v) for v in value]
    return value

