# SPDX-License-Identifier: Apache-2.0
"""The A/B's statistics (nttrace.ab.statistics) held to what they
promise: the interval and the test agree by construction, the p is the exact
Mann-Whitney p, one run a side is never tested, and, calibrated on the lab's
recorded boots, an A/A marks at most about alpha of the time while a change
of the size a report calls detectable is found at least 80% of the time.
The primary figure's choice is derived again from the raw boots it was
chosen on."""
import json
import math
import statistics as pystats
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from conftest import FIXTURES, REPO
from nttrace.ab import statistics as st
from nttrace.validate import evidence
from nttrace.validate.checks.memmap_latency import MemmapEvidence

RECORDED_AA = FIXTURES / "recorded" / "ab" / "aa-base"
RAW = REPO / "benchmarks"


def test_the_interval_and_the_test_agree_whatever_the_data():
    """Significant exactly when the interval excludes no change, and exactly
    when p <= alpha, ties included (integer values tie often)."""
    rng = np.random.default_rng(7)
    seen = {True: 0, False: 0}
    for i in range(600):
        m, n = int(rng.integers(2, 10)), int(rng.integers(2, 10))
        if i % 2:
            b = list(rng.integers(10, 14, m).astype(float))
            c = list(rng.integers(10, 14, n).astype(float) + rng.integers(0, 3))
        else:
            b = list(np.exp(rng.normal(3, 0.05, m)))
            c = list(np.exp(rng.normal(3 + rng.choice([0, 0.04, 0.1]), 0.05, n)))
        for alpha in (0.05, 0.01):
            s = st.shift(b, c, alpha)
            excludes = s["change_ci"] is not None and (s["change_ci"][0] > 0 or s["change_ci"][1] < 0)
            assert s["significant"] == excludes == (s["p"] <= alpha), (b, c, alpha, s)
            seen[s["significant"]] += 1
    assert seen[True] > 50 and seen[False] > 50, seen     # both outcomes were exercised


def test_p_is_the_exact_mann_whitney_p_without_ties():
    rng = np.random.default_rng(11)
    for _ in range(200):
        m, n = int(rng.integers(2, 9)), int(rng.integers(2, 9))
        b, c = list(rng.normal(10, 1, m)), list(rng.normal(10.5, 1, n))
        assert st.shift(b, c)["p"] == pytest.approx(mannwhitneyu(c, b, method="exact").pvalue, abs=1e-12)


def test_smallest_p_and_the_sizes_that_cannot_reach_alpha():
    # C(6,3) = 20 arrangements: at best 2/20; C(8,4) = 70: 2/70
    assert st.smallest_p(3, 3) == pytest.approx(0.1) and st.critical_k(3, 3, 0.05) == 0
    assert st.smallest_p(4, 4) == pytest.approx(2 / 70) and st.critical_k(4, 4, 0.05) == 1
    r = st.compare(st.Runs([1.0, 1.1, 1.2]), st.Runs([2.0, 2.1, 2.2]))
    assert not r["significant"] and r["verdict"].startswith("cannot be significant at 3 vs 3")


def test_a_test_is_possible_exactly_where_the_most_extreme_runs_reach_alpha():
    """testable(m, n) holds exactly where m runs all below n others give
    p <= alpha (that arrangement's p is 2 / C(m + n, m), the smallest), and
    fewest_runs lists the boundary: 3 against 5 reaches 0.036 and 2 against
    8 reaches 0.044, so "4 a side" is not the rule."""
    for alpha in (0.05, 0.05 / 6, 0.01):
        for m in range(1, 11):
            for n in range(1, 11):
                if min(m, n) < 2:
                    assert not st.testable(m, n, alpha)
                    continue
                p = st.shift([float(i + 1) for i in range(m)], [float(100 + i) for i in range(n)], alpha)["p"]
                assert p == pytest.approx(2 / math.comb(m + n, m)) == pytest.approx(st.smallest_p(m, n))
                assert st.testable(m, n, alpha) == (p <= alpha) == st.testable(n, m, alpha), (m, n, alpha, p)
        pairs = st.fewest_runs(alpha)
        for small, other in pairs:
            assert st.testable(small, other, alpha) and not st.testable(small, other - 1, alpha) or small == other
        assert pairs[-1][0] == pairs[-1][1] and not st.testable(pairs[-1][0] - 1, pairs[-1][0] - 1, alpha)
    assert st.fewest_runs(0.05) == [(2, 8), (3, 5), (4, 4)]
    assert st.smallest_p(3, 5) == pytest.approx(0.0357, abs=1e-4) and st.smallest_p(2, 8) == pytest.approx(0.0444, abs=1e-4)
    assert not st.testable(3, 4) and not st.testable(2, 7)


def test_one_run_a_side_is_never_tested():
    rng = np.random.default_rng(3)
    for _ in range(200):
        b, c = float(rng.uniform(1, 100)), float(rng.uniform(1, 100))
        r = st.compare(st.Runs([b], [list(rng.normal(b, 1, 30))], "min"),
                       st.Runs([c], [list(rng.normal(c, 1, 30))], "min"))
        assert not r["significant"] and r["p"] is None and r["change_ci"] is None
        assert r["verdict"] == st.NOT_TESTED_ONE_RUN
        assert r["change_pct"] == pytest.approx(100 * (c - b) / b)


# -- calibration on the recorded boots -------------------------------------------------
def recorded_primary(root: Path) -> dict[str, list[float]]:
    """{scenario: the primary figure of every boot of both sides} of an A/A."""
    out: dict[str, list[float]] = {}
    for p in sorted(root.glob("*/boot-*/memmap_*.report.json")):
        for c in json.loads(p.read_text())["checks"]:
            ev = evidence.of(c)
            prim = [f for f in ev.figures() if f.role == "primary"]
            if prim:
                out.setdefault(ev.subject(), []).append(float(prim[0].value))
    return out


@pytest.fixture(scope="module")
def aa_residuals() -> dict[str, list[float]]:
    values = recorded_primary(RECORDED_AA)
    assert set(values) == {"fsdax", "devdax"} and all(len(v) >= 10 for v in values.values()), values
    return {k: st.residuals(v) for k, v in values.items()}


def _mark_rate(resid, m, n, log_shift, reps, seed) -> float:
    """How often the A/B's verdict marks synthetic runs drawn from the
    residuals (compare()'s verdict: shift()'s, where runs allow a test)."""
    rng = np.random.default_rng(seed)
    marks = 0
    for _ in range(reps):
        b = list(np.exp(rng.choice(resid, m)))
        c = list(np.exp(rng.choice(resid, n) + log_shift))
        marks += (st.shift(b, c)["significant"] if min(m, n) >= 2 and st.smallest_p(m, n) <= st.ALPHA
                  else st.compare(st.Runs(b), st.Runs(c))["significant"])
    return marks / reps


def test_the_simulations_verdict_is_compares():
    rng = np.random.default_rng(2)
    for _ in range(30):
        b, c = list(np.exp(rng.normal(0, .05, 5))), list(np.exp(rng.normal(.05, .05, 5)))
        assert st.shift(b, c)["significant"] == st.compare(st.Runs(b), st.Runs(c))["significant"]


@pytest.fixture(scope="module")
def resampled_aa_rates(aa_residuals) -> dict[tuple[str, int], float]:
    """{(scenario, boots a side): how often a synthetic A/A drawn from the
    recorded A/A's residuals (10 values a scenario, resampled: ties) is
    marked}."""
    return {(subject, boots): _mark_rate(resid, boots, boots, 0.0, 1500, seed=100 + boots)
            for boots in (5, 8) for subject, resid in aa_residuals.items()}


def test_a_synthetic_a_a_at_the_recorded_spread_marks_about_alpha(resampled_aa_rates, capsys):
    for (subject, boots), rate in resampled_aa_rates.items():
        with capsys.disabled():
            print(f"\nA/A false-mark rate, {subject} primary, {boots} boots a side: {rate:.3f} (alpha 0.05)")
        assert rate <= 0.10, (subject, boots, rate)


def test_an_a_a_without_ties_is_marked_at_the_exact_rate_never_above_alpha():
    """Values that never tie put every rank arrangement at the same odds, so
    the exact test marks an A/A at 2 P(U <= k - 1): counted here again by
    simulating tie-free A/As."""
    exact = {n: st.false_mark_rate(n, n) for n in range(4, 9)}
    assert all(0 < r <= st.ALPHA for r in exact.values()), exact
    assert st.false_mark_rate(3, 3) == 0.0 and st.false_mark_rate(3, 5) == pytest.approx(2 / 56)
    rng = np.random.default_rng(31)
    for n in (4, 8):
        reps = 3000
        marks = sum(st.shift(list(np.exp(rng.normal(0, .05, n))), list(np.exp(rng.normal(0, .05, n))))["significant"]
                    for _ in range(reps))
        assert marks / reps == pytest.approx(exact[n], abs=4 * math.sqrt(exact[n] / reps)), (n, marks / reps)


def test_the_docs_quote_both_a_a_mark_rates_computed_here(resampled_aa_rates):
    """docs/ab.md quotes the tie-free exact rate from 4 to 8 runs a side and
    the rate of the recorded A/A's values resampled, as this file computes
    them."""
    doc = (REPO / "docs" / "ab.md").read_text()
    exact = [100 * st.false_mark_rate(n, n) for n in range(4, 9)]
    resampled = [100 * r for r in resampled_aa_rates.values()]
    assert f"{min(exact):.1f}-{max(exact):.1f}%" in doc, (min(exact), max(exact))
    assert f"{min(resampled):.1f}-{max(resampled):.1f}%" in doc, (min(resampled), max(resampled))


def test_one_boot_a_side_is_never_marked_at_the_recorded_spread(aa_residuals):
    for resid in aa_residuals.values():
        assert _mark_rate(resid, 1, 1, math.log(1.5), 300, seed=5) == 0.0


@pytest.mark.parametrize("boots", [5, 8])
def test_the_change_called_detectable_is_found_at_least_80_percent_of_the_time(aa_residuals, boots):
    for subject, resid in aa_residuals.items():
        pct = st.detectable_pct(resid, boots, boots)
        assert pct is not None and 0 < pct < 50, (subject, pct)
        # an independent simulation (another seed) of an A/B of that size
        rate = _mark_rate(resid, boots, boots, math.log1p(pct / 100), 2000, seed=900 + boots)
        assert rate >= 0.80, (subject, boots, pct, rate)
        # and half of it is not reliably found: the figure is not a floor
        assert _mark_rate(resid, boots, boots, math.log1p(pct / 200), 2000, seed=950 + boots) < 0.80


def test_boots_needed_grows_as_the_change_shrinks(aa_residuals):
    resid = aa_residuals["fsdax"]
    big, small = st.boots_needed(resid, 20), st.boots_needed(resid, 5)
    assert big is not None and small is not None and 4 <= big < small


# -- the primary figure's choice, from the raw boots it was made on ------------------------
def _raw_boot_covs(ab_json: Path) -> dict[str, list[float]]:
    """{stat: the boot-to-boot CoV of each of the file's scenarios and sides}
    for each candidate summary of a boot's rebinds."""
    rows = json.loads(ab_json.read_text())["baseline_comparison"]
    out: dict[str, list[float]] = {}
    for r in rows:
        if r["check"] != "kernel.memmap_latency" or r["metric"] != "rebind_ms.median" or not r.get("samples"):
            continue
        for side in ("baseline", "current"):
            for name, fn in (("min", min), ("median", pystats.median), ("mean", pystats.mean)):
                v = [fn(s) for s in r["samples"][side]]
                out.setdefault(name, []).append(100 * pystats.stdev(v) / pystats.mean(v))
    return out


def _raw_boot_cov(ab_json: Path) -> dict[str, float]:
    """{stat: worst boot-to-boot CoV over the file's scenarios and sides}."""
    return {name: max(covs) for name, covs in _raw_boot_covs(ab_json).items()}


RAW_BOOTS = ["lab-aa-base-2026-12-01", "lab-aa-base-contended-2026-12-01", "lab-ab-base-nt-v3-2026-12-01",
             "lab-ab-base-nt-v3-contended-2026-12-01"]


def test_the_memmap_primary_figure_is_the_steadiest_in_the_recorded_boots():
    worst = {}
    for d in RAW_BOOTS:
        for stat, cov in _raw_boot_cov(RAW / d / "ab.json").items():
            worst[stat] = max(worst.get(stat, 0.0), cov)
    assert min(worst, key=worst.get) == "min", worst
    prim = [f for f in MemmapEvidence("ns", "fsdax", []).figures() if f.role == "primary"]
    assert [f.metric for f in prim] == ["rebind_ms.min"]
    # the reason printed in every report quotes these files' figures
    reason = MemmapEvidence.PRIMARY_REASON
    assert f"{worst['min']:.1f}%" in reason and f"{worst['median']:.1f}%" in reason, (worst, reason)


def test_the_primary_figures_note_quotes_the_icount_labs_spread_and_the_host_clocks():
    """The note printed under every memmap A/B quotes, for the lab as it runs
    now (icount: guest time counts instructions), the CoV of its recorded A/A
    boots, and for the host-clock boots the figure was chosen on, theirs,
    each said to be which."""
    reason = evidence.primary_reason("kernel.memmap_latency")
    icount = _raw_boot_covs(RAW / "lab-aa-base-icount-xeon-vm-2026-12-05-8621d6f" / "ab.json")
    assert len(icount["min"]) == 4          # fsdax and devdax, each side of the A/A
    for stat, words in (("min", "its boot-to-boot CoV: {}-{}% in the lab's icount A/A"),
                        ("median", "(the median's {}-{}%)")):
        lo, hi = min(icount[stat]), max(icount[stat])
        assert words.format(f"{lo:.2g}", f"{hi:.2g}") in reason, (stat, lo, hi, reason)
    host = {}
    for d in RAW_BOOTS:
        for stat, covs in _raw_boot_covs(RAW / d / "ab.json").items():
            host.setdefault(stat, []).extend(covs)
    lo, hi = min(host["min"]), max(host["min"])
    assert f"{lo:.1f}-{hi:.1f}% on the host clock, where it is the steadiest" in reason, (lo, hi)
    assert f"the median's {min(host['median']):.1f}-{max(host['median']):.1f}%)" in reason


def test_the_labs_recorded_spread_is_what_its_source_boots_give():
    sys.path.insert(0, str(REPO))
    from lab import ab
    rec = json.loads(ab.BOOT_SPREAD.read_text())
    source = REPO / rec["source"].split(" ")[0]
    reports = {s: sorted(source.glob(f"{s}/boot-*/memmap_*.report.json")) for s in ("A", "B")}
    assert all(reports.values()), source
    got = ab.spread_of(reports)
    assert got.keys() == rec["residuals"].keys()
    for key, resid in got.items():
        assert resid == pytest.approx(rec["residuals"][key]), key


def test_shift_line_states_n_spread_interval_and_verdict():
    from nttrace.ab.text import shift_line
    apart = shift_line("before", [1.0, 1.1, 1.2, 1.05, 1.15], "after", [0.5, 0.55, 0.6, 0.52, 0.58], " s")
    assert apart.startswith("after against before: -50.0% [") and ", significant [" in apart
    assert "before n 5, median 1.1 s (1-1.2)" in apart and "after n 5, median 0.55 s (0.5-0.6)" in apart
    same = shift_line("a", [1.0, 1.1, 1.2, 1.05, 1.15], "b", [1.01, 1.12, 1.19, 1.04, 1.16])
    assert "not significant" in same
    few = shift_line("a", [1.0, 1.1], "b", [0.5, 0.55])
    assert "cannot be significant at 2 vs 2 runs" in few and "significant [" not in few.replace("cannot be significant", "")


def test_a_series_steps_shares_add_up_and_their_family_alpha_is_bonferroni():
    steps = [[10.0, 10.2, 9.9], [12.0, 12.1, 11.8], [6.0, 6.2, 5.9], [5.0, 5.1, 4.9]]
    shares = [st.share_pct(a, b, steps[0], steps[-1]) for a, b in zip(steps, steps[1:])]
    assert abs(sum(shares) - 100.0) < 1e-9 and shares[0] < 0 < shares[1]
    assert abs(st.median_change_pct(steps[0], steps[-1]) - (5.0 / 10.0 - 1) * 100) < 1e-9
    assert st.family_alpha(5) == st.ALPHA / 5
    n = st.fewest_runs_for(st.family_alpha(5))
    assert st.testable(n, n, st.family_alpha(5)) and not st.testable(n - 1, n - 1, st.family_alpha(5))
