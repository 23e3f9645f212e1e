# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab`'s loop in the lab (python3 -m lab.ab_loop), beside lab.ab's
boots of the same kernels."""
from __future__ import annotations

import statistics

from ._format import command, mmss
from .lab import ICOUNT_RUNS


def _primary(ab: dict) -> dict:
    """(check [subject], label) -> stats of each primary figure of a validate A/B."""
    return {(r["check"] + (f" [{r['subject']}]" if r["subject"] else ""), r["label"]): r["stats"]
            for r in ab["baseline_comparison"] if (r.get("stats") or {}).get("role") == "primary"}


def _change(st: dict) -> str:
    ci = st["change_ci"]
    verdict = ("*" if st["significant"] else "~") if st["p"] is not None else st["verdict"]
    return (f"{st['change_pct']:+.3g}%" + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" {verdict}"
            + (f", p {st['p']:.2g}" if st["p"] is not None else ""))


def lab_ab_loop(raw: dict) -> str:
    """Each primary figure both measured: medians, change, interval and
    verdict, lab.ab's and the loop's; then the loop's wall time per boot."""
    (loop_report, loop_run), (ab, ab_run) = raw["loop"], raw["lab.ab"]
    mine, theirs = _primary(loop_report["ab"]), _primary(ab)
    rows = [f"| primary figure | lab.ab, {ab_run['boots']} boots a side: base / nt-v3 | change | "
            f"nttrace ab loop, {loop_run['boots_a_side']} a side: base / nt-v3 | change |", "|---|--:|--:|--:|--:|"]
    for key in [k for k in theirs if k in mine]:
        a, b = theirs[key], mine[key]
        rows.append(f"| {key[0]}: {key[1]} | {a['base']['median']:.4g} / {a['current']['median']:.4g} | {_change(a)} | "
                    f"{b['base']['median']:.4g} / {b['current']['median']:.4g} | {_change(b)} |")
    slots = loop_run["boots"][1:-1]     # the default kernel's first boot and its last are not the schedule's
    per = sorted(b["host_s"] for b in slots)
    lp = loop_report["loop"]
    rows += ["", f"- the loop ({loop_run['finished'][:10]}, {loop_run['machine']}, commit {loop_run['commit']}): "
                 f"`{command(loop_run['command'])}`; {loop_run['cpu']}; one QEMU run of {mmss(loop_run['wall_s'])}: "
                 f"{len(loop_run['boots'])} boots (the default kernel's first, "
                 f"{len(slots)} of the schedule, the default's last; order {lp['order']}, seed {lp['seed']}); "
                 f"a schedule boot took {mmss(statistics.median(per))} of host time (median; "
                 f"{mmss(per[0])} to {mmss(per[-1])}), from its early unit to the next boot's; "
                 f"failed boots {len(lp['failed_boots'])}; runs kept "
                 + ", ".join(f"{side} {r['kept']} of {r['planned']}" for side, r in lp["runs"].items()) + ".",
             f"- lab.ab ({ab_run['finished'][:10]}, {ab_run['machine']}, commit {ab_run['commit']}): "
             f"`{command(ab_run['command'])}`, {mmss(ab_run['wall_s'])} for {2 * ab_run['boots']} boots, "
             "one QEMU run a boot."]
    return "\n".join(rows)


AB_LOOP = "lab-ab-loop-base-nt-v3-epyc-vm-2026-12-06-baf1d45"
BLOCKS = {
    "lab-ab-loop": (lab_ab_loop, {"loop": (f"{AB_LOOP}/ab.json", f"{AB_LOOP}/run.json"),
                                  "lab.ab": ICOUNT_RUNS["A/B base/nt-v3"]}),
}
