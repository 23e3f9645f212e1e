# SPDX-License-Identifier: Apache-2.0
"""A series of kernels compared step by step: the base K0, then each step Ki
against the one before it and against the base, for each primary figure
the runs hold.

The statistics are the A/B's (nttrace.ab.statistics): runs (boots) as the
unit, the Hodges-Lehmann change with the exact rank interval, the exact
Mann-Whitney test. A series of n steps makes two families of n tests (each
step against the one before; each against the base): each test is made at
alpha / n (Bonferroni), so each family's chance of any false mark stays at
most alpha, and the report says how many boots a kernel a step needs to be
markable at all at that alpha. A step's share is its log change of the
medians over the whole series' (the shares add up to 100%). A kernel with no
run is skipped: the change of the next one measured is from the last one
measured, and says so.

`nttrace ab report` of a loop of more than two kernels writes this table
before each step's own A/B; the lab's step table (lab.steps) is made by
`steps()` too.
"""
from __future__ import annotations

from nttrace.ab import statistics


def _change(before: list[float], after: list[float], alpha: float) -> dict:
    st = statistics.compare(statistics.Runs(before), statistics.Runs(after), "primary", alpha)
    return {k: st.get(k) for k in ("change_pct", "change_ci", "p", "significant", "verdict", "detectable_pct")}


def steps(labels: list[str], values: dict[str, list[float]]) -> dict:
    """One figure across the series `labels` (the base first), each label's
    run values in `values`: {"alpha": each step's, "boots_to_mark": the
    fewest boots a kernel that can mark a step, "total_pct": base to the
    last kernel measured (medians), "rows": [{"step", "boots", "median",
    "cov_pct", "from_before": change, "before": its label, "from_base":
    change, "share_pct", "skipped": labels without a run since the one
    before}]}."""
    n = max(1, len(labels) - 1)
    alpha = statistics.family_alpha(n)
    measured = [lab for lab in labels if values.get(lab)]
    base = values.get(labels[0]) or []
    last = values.get(measured[-1]) if measured else None
    whole = (base, last) if base and len(measured) > 1 and measured[-1] != labels[0] else None
    out = {"alpha": alpha, "steps": n, "boots_to_mark": statistics.fewest_runs_for(alpha),
           "total_pct": statistics.median_change_pct(*whole) if whole else None, "rows": []}
    prev, skipped = None, []
    for lab in labels:
        vals = values.get(lab) or []
        row = {"step": lab, "boots": len(vals)}
        if not vals:
            if lab != labels[0]:
                skipped.append(lab)
            out["rows"].append(row)
            continue
        d = statistics.describe(statistics.Runs(vals))
        row.update(median=d["median"], cov_pct=d["cov_pct"])
        if prev is not None:
            row["before"] = prev
            row["from_before"] = _change(values[prev], vals, alpha)
            if skipped:
                row["skipped"] = skipped
                skipped = []
            if whole and statistics.median(whole[0]) != statistics.median(whole[1]):
                row["share_pct"] = statistics.share_pct(values[prev], vals, *whole)
        if lab != labels[0] and base:
            row["from_base"] = _change(base, vals, alpha)
        prev = lab
        out["rows"].append(row)
    return out


def mark(change: dict | None) -> str:
    """'*' significant, '~' tested and not, else the verdict's words."""
    if not change:
        return ""
    if change.get("significant"):
        return "*"
    if change.get("verdict") == "not significant":
        return "~"
    return str(change.get("verdict") or "")


def change_cell(change: dict | None) -> str:
    """'-12.3% [-13.0, -11.8] *' (the interval where the runs give one)."""
    if not change or change.get("change_pct") is None:
        return "-"
    ci = change.get("change_ci")
    return (f"{change['change_pct']:+.1f}%" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")
            + (f" {mark(change)}" if mark(change) else ""))
