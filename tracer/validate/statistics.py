"""The statistics of an A/B, taken the way mmtests' compare-kernels and
benchstat take them: the unit of replication is the run (a boot); each run
is summarised first, and a figure's statistics are taken across runs.

Per figure and side: the median of the runs' values with a 95% bootstrap
interval, mean, standard deviation, IQR, coefficient of variation, n.
The change: the percent change of the medians with a 95% interval from a
hierarchical bootstrap (runs resampled within each side, and each chosen
run's own samples, e.g. its 30 rebinds, resampled within it), and the
p-value of a two-sided Mann-Whitney U test across runs (scipy). A change is
significant at ALPHA with at least MIN_RUNS runs a side; below that U can
never reach ALPHA (3 against 3 gives p >= 0.1), and the verdict says so in
words. With one run a side the test is taken within the run, on its samples,
and labelled: boot-to-boot variation is then unknown.

scipy and numpy are imported here only: the daemon never loads this.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ALPHA = 0.05
MIN_RUNS = 4            # fewer a side and Mann-Whitney U at 0.05 cannot reject
BOOTSTRAP = 4000
SEED = 1729             # fixed: the same inputs give the same intervals
WITHIN_ONE_BOOT = "within one boot: boot-to-boot variation unknown"

STATS = {"median": "median", "mean": "mean", "min": "min", "max": "max"}


@dataclass
class Runs:
    """One side of one figure: a value per run, and where a run has them,
    the samples its value summarises (with `stat`, how: median, mean, ...)."""
    values: list[float]
    samples: list[list[float]] = field(default_factory=list)   # per run, or empty
    stat: str | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    def has_samples(self) -> bool:
        return bool(self.stat) and len(self.samples) == self.n and all(len(s) >= 2 for s in self.samples)


def _np():
    import numpy as np
    return np


def _reduce(stat: str, a, axis):
    np = _np()
    return {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max}[stat](a, axis=axis)


def _bootstrap_side(runs: Runs, rng, b: int = BOOTSTRAP):
    """b bootstrap replicates of the side's statistic (the median of its
    runs' values): runs resampled, and within each chosen run its samples."""
    np = _np()
    n = runs.n
    if runs.has_samples():
        per_run = np.empty((n, b))
        for i, s in enumerate(runs.samples):
            s = np.asarray(s, dtype=float)
            idx = rng.integers(0, len(s), size=(b, len(s)))
            per_run[i] = _reduce(runs.stat, s[idx], axis=1)
    else:
        per_run = np.repeat(np.asarray(runs.values, dtype=float)[:, None], b, axis=1)
    choice = rng.integers(0, n, size=(b, n))
    picked = per_run[choice, np.arange(b)[:, None]]
    return np.median(picked, axis=1)


def describe(runs: Runs) -> dict:
    """The side's figures: n, median with its 95% interval, mean, stdev,
    IQR, CoV (stdev/mean, percent)."""
    np = _np()
    v = np.asarray(runs.values, dtype=float)
    out = {"n": runs.n, "values": [float(x) for x in v], "median": float(np.median(v)), "mean": float(np.mean(v)),
           "stdev": float(np.std(v, ddof=1)) if runs.n > 1 else None,
           "iqr": float(np.subtract(*np.percentile(v, [75, 25]))) if runs.n > 1 else None}
    out["cov_pct"] = (100.0 * out["stdev"] / abs(out["mean"])) if out["stdev"] is not None and out["mean"] else None
    if runs.n > 1 or runs.has_samples():
        reps = _bootstrap_side(runs, _np().random.default_rng(SEED))
        lo, hi = np.percentile(reps, [2.5, 97.5])
        out["median_ci"] = [float(lo), float(hi)]
        out["median_ci_basis"] = "runs" + (" and their samples" if runs.has_samples() else "") if runs.n > 1 \
            else WITHIN_ONE_BOOT
    else:
        out["median_ci"] = None
        out["median_ci_basis"] = "one run, no samples: no interval"
    return out


def compare(base: Runs, cur: Runs) -> dict:
    """The change from base to cur with its interval, test and verdict."""
    np = _np()
    from scipy.stats import mannwhitneyu
    b_med, c_med = float(np.median(base.values)), float(np.median(cur.values))
    out = {"base": describe(base), "current": describe(cur), "alpha": ALPHA, "min_runs": MIN_RUNS}
    out["change_pct"] = 100.0 * (c_med - b_med) / abs(b_med) if b_med else None
    rng = np.random.default_rng(SEED + 1)
    if b_med and (base.n > 1 or cur.n > 1 or (base.has_samples() and cur.has_samples())):
        rb, rc = _bootstrap_side(base, rng), _bootstrap_side(cur, rng)
        ok = rb != 0
        pct = 100.0 * (rc[ok] - rb[ok]) / np.abs(rb[ok])
        lo, hi = np.percentile(pct, [2.5, 97.5])
        out["change_ci"] = [float(lo), float(hi)]
    else:
        out["change_ci"] = None
    p, basis, verdict = None, None, None
    if base.n >= 2 and cur.n >= 2:
        p = float(mannwhitneyu(base.values, cur.values, alternative="two-sided").pvalue)
        basis = f"Mann-Whitney U across runs ({base.n} vs {cur.n})"
        if min(base.n, cur.n) < MIN_RUNS:
            verdict = f"too few runs to be significant (need >= {MIN_RUNS} a side)"
    elif base.n == 1 and cur.n == 1 and base.has_samples() and cur.has_samples() and base.stat in ("median", "mean"):
        # U compares the two boots' sample distributions: a test of their
        # location (median, mean), not of their extremes
        p = float(mannwhitneyu(base.samples[0], cur.samples[0], alternative="two-sided").pvalue)
        basis = f"Mann-Whitney U within the run ({len(base.samples[0])} vs {len(cur.samples[0])} samples); " \
                + WITHIN_ONE_BOOT
    elif base.n == 1 and cur.n == 1 and base.has_samples() and cur.has_samples():
        verdict = f"one run a side: a {base.stat} is not tested within the run"
    else:
        verdict = f"too few runs to test (need >= {MIN_RUNS} a side)"
    out["p"], out["test"] = p, basis
    out["significant"] = bool(p is not None and p < ALPHA and verdict is None)
    out["verdict"] = verdict or ("significant" if out["significant"] else "not significant")
    return out
