# SPDX-License-Identifier: Apache-2.0
"""The statistics of an A/B. The unit of replication is the run (a boot):
each run is summarised first (e.g. the fastest of its 30 rebinds), and a
figure is compared across runs, never across the samples inside one run,
which cannot see boot-to-boot or host variation.

The test and its interval are one procedure, so they cannot disagree:

* the change is the Hodges-Lehmann shift of log(run value), patched minus
  base: the median of all m*n pairwise differences, reported as a percent
  (exp(shift) - 1);
* its interval is the Mann-Whitney (Wilcoxon rank-sum) interval inverted
  from the exact null distribution of U: the k-th smallest and k-th largest
  pairwise difference, k the largest with P(U <= k-1) <= alpha/2;
* its test is the exact two-sided Mann-Whitney test on the same pairwise
  differences, counting ties against significance: p = 2 min(F(#d<=0),
  F(#d>=0)). So p <= alpha exactly when the interval excludes zero
  (`significant`), ties included.

Exact rank procedures need no normality (the lab's boots are bimodal) and
are exact at every n, at a price: m against n runs can give no two-sided p
below 2 / C(m + n, m), so a test is possible only where that reaches alpha
(`testable`; at 0.05: 2 runs against at least 8, 3 against 5, or 4 a side,
`fewest_runs`), and elsewhere the verdict says so instead of marking
anything. One run a side is never tested: boot-to-boot variation is
unknown.

A report holds many figures. Each figure has a role: `primary` (one per
scenario, tested at ALPHA), `secondary` (tested at ALPHA / m, m the report's
secondary figures: Bonferroni, whose intervals at 1 - ALPHA/m keep the
interval and the test in step), or `descriptive` (the change and interval
shown, no test, no mark).

The smallest detectable change: the shift this procedure detects with
probability POWER at the row's alpha, given the runs' own boot-to-boot
spread (their residuals about each side's median, pooled and resampled);
`boots_needed` turns a change to detect into runs a side.

scipy and numpy are imported here only: the daemon never loads this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from nttrace.errors import CapabilityError

ALPHA = 0.05
POWER = 0.80
SIMULATIONS = 2000
SEED = 1729             # fixed: the same inputs give the same figures
MAX_BOOTS = 60          # boots_needed gives up above this
NOT_TESTED_ONE_RUN = "boot-to-boot variation unknown: not tested"
ROLES = ("primary", "secondary", "descriptive")


@dataclass
class Runs:
    """One side of one figure: a value per run, and where a run has them,
    the samples its value summarises (with `stat`, how: min, median, ...)."""
    values: list[float]
    samples: list[list[float]] = field(default_factory=list)   # per run, or empty
    stat: str | None = None

    @property
    def n(self) -> int:
        return len(self.values)


def _np():
    try:
        import numpy as np
    except ImportError:
        raise CapabilityError("the A/B's statistics need numpy (Debian: apt install python3-numpy)") from None
    return np


# -- the exact null distribution of U ------------------------------------------
@lru_cache(maxsize=256)
def _u_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..m*n under no shift, U the Mann-Whitney count of
    pairs (x_i < y_j) of m against n continuous values: the number of rank
    arrangements with U = u, by the recursion N(u; m, n) = N(u - n; m - 1, n)
    + N(u; m, n - 1), over C(m + n, m)."""
    np = _np()
    # counts[j] for the current m: the distribution of U for (m, j), j = 0..n
    counts = [np.ones(1, dtype=float) for _ in range(n + 1)]          # m = 0: U = 0 only
    for mm in range(1, m + 1):
        new = [np.ones(1, dtype=float)]                                # n = 0: U = 0 only
        for nn in range(1, n + 1):
            a = np.zeros(mm * nn + 1)
            prev = counts[nn]                      # (mm - 1, nn), shifted by nn
            a[nn:nn + len(prev)] += prev
            left = new[nn - 1]                     # (mm, nn - 1)
            a[:len(left)] += left
            new.append(a)
        counts = new
    dist = counts[n]
    cdf = np.cumsum(dist) / dist.sum()
    return tuple(float(x) for x in cdf)


def critical_k(m: int, n: int, alpha: float) -> int:
    """The largest k with P(U <= k - 1) <= alpha / 2 (0: no interval at
    this level, and no test can reject: the sides are too small)."""
    cdf = _u_cdf(m, n)
    k = 0
    while k < len(cdf) and cdf[k] <= alpha / 2:
        k += 1
    return k


def smallest_p(m: int, n: int) -> float:
    """The smallest two-sided p the exact test can give at m against n:
    2 / C(m + n, m), every base run on one side of every patched run."""
    return min(1.0, 2 * _u_cdf(m, n)[0])


def false_mark_rate(m: int, n: int, alpha: float = ALPHA) -> float:
    """How often the exact test marks an A/A of m against n runs whose
    values never tie: 2 P(U <= k - 1), at most alpha (the rank test's
    discrete steps keep it below). Ties, which count against significance,
    lower it further."""
    k = critical_k(m, n, alpha)
    return 2 * _u_cdf(m, n)[k - 1] if k >= 1 else 0.0


def testable(m: int, n: int, alpha: float = ALPHA) -> bool:
    """Whether m against n runs can be tested at alpha: two runs a side at
    least, and a smallest possible p at most alpha."""
    return min(m, n) >= 2 and smallest_p(m, n) <= alpha


def fewest_runs(alpha: float = ALPHA) -> list[tuple[int, int]]:
    """When a test is possible at alpha, by both sides' sizes: for each size
    of the smaller side from 2, the fewest runs the other side needs, up to
    the size where both sides are equal ([(2, 8), (3, 5), (4, 4)] at 0.05).
    Sizes at or beyond a pair are testable; below every pair, not."""
    out: list[tuple[int, int]] = []
    small = 2
    while True:
        other = small
        while not testable(small, other, alpha):
            other += 1
        out.append((small, other))
        if other == small:
            return out
        small += 1


# -- one side -----------------------------------------------------------------
def describe(runs: Runs) -> dict:
    """The side's figures across runs: n, the values, median, mean, stdev,
    IQR, CoV (stdev/mean, percent), and where a run holds samples, each
    run's own spread (within one run: never a verdict)."""
    np = _np()
    v = np.asarray(runs.values, dtype=float)
    out = {"n": runs.n, "values": [float(x) for x in v], "median": float(np.median(v)), "mean": float(np.mean(v)),
           "min": float(np.min(v)), "max": float(np.max(v)),
           "stdev": float(np.std(v, ddof=1)) if runs.n > 1 else None,
           "iqr": float(np.subtract(*np.percentile(v, [75, 25]))) if runs.n > 1 else None}
    out["cov_pct"] = (100.0 * out["stdev"] / abs(out["mean"])) if out["stdev"] is not None and out["mean"] else None
    if runs.samples and all(len(s) >= 2 for s in runs.samples):
        out["within_run_iqr"] = [float(np.subtract(*np.percentile(s, [75, 25]))) for s in runs.samples]
    return out


# -- the shift, its interval and its test --------------------------------------
def _logs(values) -> list[float] | None:
    return [math.log(x) for x in values] if all(x > 0 for x in values) else None


def _pct(log_shift: float) -> float:
    return 100.0 * math.expm1(log_shift)


def shift(base: list[float], cur: list[float], alpha: float = ALPHA) -> dict:
    """Hodges-Lehmann change of cur against base (log scale, as a percent)
    with its rank-inverted interval at 1 - alpha and the exact two-sided
    Mann-Whitney p of the same differences. Values must be > 0."""
    np = _np()
    lb, lc = _logs(base), _logs(cur)
    if lb is None or lc is None:
        raise ValueError("a figure compared as a ratio needs values above zero")
    m, n = len(lb), len(lc)
    d = np.sort((np.asarray(lc)[None, :] - np.asarray(lb)[:, None]).ravel())
    hl = float(np.median(d))
    k = critical_k(m, n, alpha)
    cdf = _u_cdf(m, n)
    at_most_zero, at_least_zero = int(np.sum(d <= 0)), int(np.sum(d >= 0))
    p = min(1.0, 2 * min(cdf[min(at_most_zero, m * n)], cdf[min(at_least_zero, m * n)]))
    out = {"change_pct": _pct(hl), "p": p, "alpha": alpha, "k": k, "pairs": m * n,
           "smallest_p": smallest_p(m, n)}
    if k >= 1:
        lo, hi = float(d[k - 1]), float(d[m * n - k])
        out["change_ci"] = [_pct(lo), _pct(hi)]
        out["ci_level"] = 1 - 2 * cdf[k - 1]        # the exact coverage, >= 1 - alpha
        out["significant"] = bool(lo > 0 or hi < 0)
    else:
        out["change_ci"] = None
        out["ci_level"] = None
        out["significant"] = False
    # the construction's promise, checked on every call
    assert out["significant"] == (p <= alpha), (out, at_most_zero, at_least_zero)
    return out


def _rejects(b, c, k: int):
    """For arrays of replicates (R, m) and (R, n): whether each rejects."""
    np = _np()
    d = c[:, None, :] - b[:, :, None]
    le = (d <= 0).sum(axis=(1, 2))
    ge = (d >= 0).sum(axis=(1, 2))
    return np.minimum(le, ge) <= k - 1


def residuals(*sides: list[float]) -> list[float] | None:
    """The runs' boot-to-boot spread on the log scale: each side's log
    values about their median, pooled, scaled up for the medians estimated
    (sqrt(N / (N - sides))). None with fewer than two runs on every side."""
    np = _np()
    logs = [_logs(s) for s in sides if len(s) >= 2]
    if not logs or any(x is None for x in logs):
        return None
    r = np.concatenate([np.asarray(x) - np.median(x) for x in logs])
    if len(r) <= len(logs) or not np.any(r):
        return [float(x) for x in r] if len(r) > len(logs) else None
    return [float(x) for x in r * math.sqrt(len(r) / (len(r) - len(logs)))]


def power(resid: list[float], m: int, n: int, log_shift: float, alpha: float = ALPHA,
          simulations: int = SIMULATIONS, seed: int = SEED) -> float:
    """The share of simulated A/Bs (m against n runs drawn from the residuals,
    the patched side moved by log_shift) that this procedure marks."""
    np = _np()
    k = critical_k(m, n, alpha)
    if k < 1:
        return 0.0
    rng = np.random.default_rng(seed)
    r = np.asarray(resid, dtype=float)
    b = rng.choice(r, size=(simulations, m))
    c = rng.choice(r, size=(simulations, n)) + log_shift
    return float(np.mean(_rejects(b, c, k)))


def detectable_pct(resid: list[float] | None, m: int, n: int, alpha: float = ALPHA) -> float | None:
    """The smallest slowdown (percent) detected with probability POWER at m
    against n runs of this spread; a speed-up of the same size in log terms is
    as detectable. None: the spread is unknown, or no change is detectable
    at this n (the exact test cannot reach alpha)."""
    if not resid or critical_k(m, n, alpha) < 1:
        return None
    hi = math.log(100.0)
    if power(resid, m, n, hi, alpha) < POWER:
        return None
    lo = 0.0
    for _ in range(24):
        mid = (lo + hi) / 2
        if power(resid, m, n, mid, alpha) >= POWER:
            hi = mid
        else:
            lo = mid
    return _pct(hi)


def boots_needed(resid: list[float] | None, pct: float, alpha: float = ALPHA) -> int | None:
    """Runs a side to detect a change of pct percent (either direction) with
    probability POWER; None when the spread is unknown or more than MAX_BOOTS
    would be needed."""
    if not resid or pct <= 0:
        return None
    target = min(math.log1p(pct / 100.0), -math.log1p(-min(pct, 99.9) / 100.0))
    for b in range(2, MAX_BOOTS + 1):
        if critical_k(b, b, alpha) >= 1 and power(resid, b, b, target, alpha) >= POWER:
            return b
    return None


# -- a figure's comparison ----------------------------------------------------
def compare(base: Runs, cur: Runs, role: str = "primary", alpha: float = ALPHA) -> dict:
    """The change from base to cur with its interval, test, verdict and the
    smallest change these runs could have detected."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: one of {ROLES}")
    np = _np()
    b_med, c_med = float(np.median(base.values)), float(np.median(cur.values))
    out = {"base": describe(base), "current": describe(cur), "role": role, "alpha": alpha,
           "change_pct": 100.0 * (c_med - b_med) / abs(b_med) if b_med else None,
           "change_basis": "medians", "change_ci": None, "p": None, "test": None, "significant": False,
           "detectable_pct": None}
    positive = all(x > 0 for x in base.values + cur.values)
    if base.n < 2 or cur.n < 2:
        out["verdict"] = NOT_TESTED_ONE_RUN if min(base.n, cur.n) == 1 else "no runs"
        return out
    if not positive:
        out["verdict"] = "not tested: a ratio needs values above zero"
        return out
    s = shift(base.values, cur.values, alpha)
    out.update(change_pct=s["change_pct"], change_basis="Hodges-Lehmann shift of log run values",
               change_ci=s["change_ci"], ci_level=s["ci_level"], smallest_p=s["smallest_p"])
    out["detectable_pct"] = detectable_pct(residuals(base.values, cur.values), base.n, cur.n, alpha)
    if role == "descriptive":
        out["verdict"] = "descriptive: not tested"
        return out
    out["p"] = s["p"]
    out["test"] = f"exact Mann-Whitney U across runs ({base.n} vs {cur.n}), alpha {alpha:.2g}"
    if not testable(base.n, cur.n, alpha):
        out["verdict"] = (f"cannot be significant at {base.n} vs {cur.n} runs (the smallest possible p is "
                          f"{s['smallest_p']:.3g} > alpha {alpha:.2g})")
        return out
    out["significant"] = s["significant"]
    out["verdict"] = "significant" if s["significant"] else "not significant"
    return out


# -- a family of changes: a series' steps -----------------------------------------
def family_alpha(tests: int, alpha: float = ALPHA) -> float:
    """The alpha of each test in a family of `tests` (a series' steps, each
    against the step before), Bonferroni: the family's chance of any false
    mark stays at most alpha."""
    return alpha / max(1, tests)


def fewest_runs_for(alpha: float) -> int:
    """The fewest runs a side (equal sides) whose exact test can reach
    alpha at all, at any spread."""
    n = 2
    while not testable(n, n, alpha):
        n += 1
    return n


def median(values: list[float]) -> float:
    return float(_np().median(values))


def median_change_pct(before: list[float], after: list[float]) -> float:
    """The change of the medians, after over before, as a percent."""
    return 100.0 * (median(after) / median(before) - 1)


def share_pct(before: list[float], after: list[float], first: list[float], last: list[float]) -> float:
    """A step's share of a whole series' change: the log change of the
    medians from `before` to `after` over the log change from `first` to
    `last` (shares of the steps add up to 100%)."""
    return 100.0 * math.log(median(after) / median(before)) / math.log(median(last) / median(first))
