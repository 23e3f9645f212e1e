"""log2 histograms read from BPF maps: decoding, cumulative buckets for
Prometheus, and percentile estimates."""
from __future__ import annotations


def bucket_bounds(slot: int) -> tuple[int, int]:
    """bpf_log2l(v) == slot  <=>  v in [2**slot, 2**(slot+1)) (slot 0 holds 0 and 1)."""
    return (0 if slot == 0 else 1 << slot), (1 << (slot + 1))


def percentile(buckets: dict[int, int], q: float) -> float | None:
    """q-quantile (0..1) by linear interpolation inside the log2 bucket."""
    total = sum(buckets.values())
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for slot in sorted(buckets):
        count = buckets[slot]
        if seen + count >= rank:
            lo, hi = bucket_bounds(slot)
            frac = (rank - seen) / count if count else 0.0
            return lo + frac * (hi - lo)
        seen += count
    lo, hi = bucket_bounds(max(buckets))
    return float(hi)


def cumulative(buckets: dict[int, int], divisor: float = 1.0) -> list[tuple[float, int]]:
    """[(upper bound * scale, cumulative count)] ending in (+Inf, total), as a
    Prometheus histogram wants. Upper bounds are exclusive in the kernel
    (< 2**(slot+1)); Prometheus `le` is inclusive, so the bound is the last
    integer value in the bucket, 2**(slot+1) - 1 (divided by `divisor`, 1e9
    for nanoseconds to seconds)."""
    out, running = [], 0
    for slot in sorted(buckets):
        running += buckets[slot]
        out.append((((1 << (slot + 1)) - 1) / divisor, running))
    out.append((float("inf"), running))
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
        "percentiles": "interpolated within log2 buckets",
    }
