# SPDX-License-Identifier: Apache-2.0
"""The lab: base against nt-v3 on the icount guest (`python3 -m lab.ab`, an
A/A beside the A/B), and the series step by step (`python3 -m lab.steps`)."""
from __future__ import annotations

import sys
from pathlib import Path

from ._format import command, mmss

CHECKOUT = Path(__file__).resolve().parents[2]


def lab_ab_icount(raw: dict) -> str:
    """The A/A and A/B on the A/B's guest CPU: per figure tested, the change,
    its interval, verdict and what the boots could detect; host and wall time."""
    rows = ["| run | primary figure | base | patched | change [interval] | verdict, p | detectable |",
            "|---|---|--:|--:|--:|---|--:|"]
    for label, (ab, run) in raw.items():
        for r in ab["baseline_comparison"]:
            st = r.get("stats")
            if not st or st["role"] != "primary":     # the secondaries are in the raw files
                continue
            ci = st["change_ci"]
            verdict = ("*" if st["significant"] else "~") if st["p"] is not None else st["verdict"]
            p = f", {st['p']:.2g}" if st["p"] is not None else ""
            det = st.get("detectable_pct")
            name = r["check"] + (f" [{r['subject']}]" if r["subject"] else "")
            rows.append(f"| {label} | {name}: {r['label']} | {st['base']['median']:.4g} | "
                        f"{st['current']['median']:.4g} | {st['change_pct']:+.3g}%"
                        + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" | {verdict}{p} | "
                        + ("-" if det is None else f"±{det:.2g}%") + " |")
    rows.append("")
    for label, (ab, run) in raw.items():
        conds = ab["baseline_conditions"]
        host = "; ".join(f"{side}: " + ", ".join(f"{v} {k}" for k, v in c["states"].items())
                         + f" of {c['windows']} boots, others at most {100 * c['others_share_max']:.0f}% of a CPU"
                         + (f", beside {', '.join(c['busy_beside'])}" if c["busy_beside"] else "")
                         for side, c in conds.items() if c)
        rows.append(f"- {label} ({run['finished'][:10]}, {run.get('machine', 'machine not recorded')}, commit "
                    f"{run.get('commit', 'not recorded')}): `{command(run['command'])}`, {run['boots']} boots a side, "
                    f"{mmss(run['wall_s'])}, "
                    f"{run['cpu']}; host {host}.")
    return "\n".join(rows)


def lab_steps(raw: dict) -> str:
    """lab.steps' table, both namespaces side by side: each step's fastest
    rebind, its change from the step before with interval and verdict, its
    share of the series, and the series' own per-patch figures."""
    sys.path.insert(0, str(CHECKOUT))     # the checkout: the lab package's own formatting
    from lab import steps
    meta, subjects = raw["meta"], raw["table"]["subjects"]
    fs, dd = subjects["fsdax"]["rows"], subjects["devdax"]["rows"]
    rows = ["| step | fsdax ms | change from the step before | share | devdax ms | change from the step before "
            "| share | path, page_ref_set on | the series' own: fsdax / devdax |", "|---|--:|--:|--:|--:|--:|--:|---|---|"]

    def cells(r):
        share = f"{r['share_pct']:.0f}%" if r.get("share_pct") is not None else ""
        verdict = steps.step_verdict(r)
        verdict = verdict if len(verdict) <= 2 else "not testable"
        return [f"{r['median']:.3f}", f"{steps.change_cell(r)} {verdict}".strip(), share]
    for f, d in zip(fs, dd):
        seeds = " / ".join(filter(None, (steps.seeds_cell(subjects["fsdax"]["seeds"], f["step"]),
                                         steps.seeds_cell(subjects["devdax"]["seeds"], d["step"]))))
        rows.append(f"| {f['step']} | " + " | ".join(cells(f) + cells(d)) + f" | {f.get('page_ref_path', '')} | {seeds} |")
    rows += ["", f"Whole series: fsdax {subjects['fsdax']['total_pct']:+.1f}%, devdax "
                 f"{subjects['devdax']['total_pct']:+.1f}%. Patches: "
             + "; ".join(f"{r['step']}: " + ", ".join(r["patches"]) for r in fs if r.get("patches")) + "."]
    cannot: dict[str, list[str]] = {}
    for r in fs:     # read from the patches' titles by today's lab.steps (an interpretation, not a figure)
        for note in steps.Step(0, 0, r.get("patches") or []).cannot():
            cannot.setdefault(note, []).append(r["step"])
    rows += [""] + [f"- The lab cannot attribute step {', '.join(st)}: it {note}." for note, st in cannot.items()]
    rows += ["", f"{meta['boots']} boots a step and of base, in rounds; ms: the median over boots of each boot's "
                 f"fastest rebind; changes: Hodges-Lehmann with the exact rank interval, * / ~ by the exact "
                 f"Mann-Whitney test at alpha 0.05/{len(fs) - 1} (Bonferroni over the steps); share: of the "
                 f"series' log change. {meta['finished'][:10]}, {meta['machine']}, commit {meta['commit']}, "
                 f"{meta['cpu']}, {mmss(meta['wall_s'])}: `{command(meta['command'])}`."]
    return "\n".join(rows)


ICOUNT_RUNS = {label: (f"{d}/ab.json", f"{d}/run.json") for label, d in (
    ("A/A base/base", "lab-aa-base-icount-xeon-vm-2026-12-05-8621d6f"),
    ("A/B base/nt-v3", "lab-ab-base-nt-v3-icount-xeon-vm-2026-12-05-dfb5153"))}
BLOCKS = {
    "lab-ab-icount": (lab_ab_icount, ICOUNT_RUNS),
    "lab-steps": (lab_steps, ["lab-steps-v8-xeon-vm-2026-12-05-45ed58d/steps.json"]),
}
