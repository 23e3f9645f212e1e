# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab`'s loop in the lab (python3 -m lab.ab_loop), via kexec and
via reboot, beside lab.ab's boots of the same kernels."""
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


def _loop_line(via: str, report: dict, run: dict) -> str:
    slots = run["boots"][1:-1]     # the default kernel's first boot and its last are not the schedule's
    per = sorted(b["host_s"] for b in slots)
    lp = report["loop"]
    return (f"- via {via} ({run['finished'][:10]}, {run['machine']}, commit {run['commit']}): "
            f"`{command(run['command'])}`; one QEMU run of {mmss(run['wall_s'])}: {len(run['boots'])} boots "
            f"(the default kernel's first, {len(slots)} of the schedule, the default's last; order {lp['order']}, "
            f"seed {lp['seed']}); a schedule boot took {mmss(statistics.median(per))} of host time (median; "
            f"{mmss(per[0])} to {mmss(per[-1])}), from its early unit to the next boot's; failed boots "
            f"{len(lp['failed_boots'])}; runs kept "
            + ", ".join(f"{side} {r['kept']} of {r['planned']}" for side, r in lp["runs"].items()) + ".")


def lab_ab_loop(raw: dict) -> str:
    """Each primary figure as lab.ab and each loop measured it: medians,
    change, interval and verdict; then each loop's wall time per boot."""
    (ab, ab_run) = raw["lab.ab"]
    loops = {via: raw[via] for via in ("kexec", "reboot")}
    theirs = _primary(ab)
    mine = {via: _primary(rep["ab"]) for via, (rep, _run) in loops.items()}
    a_side = {via: run["boots_a_side"] for via, (_rep, run) in loops.items()}
    rows = [f"| primary figure | lab.ab, {ab_run['boots']} a side: base / nt-v3 | change | "
            + " | ".join(f"loop via {via}, {a_side[via]} a side | change" for via in loops) + " |",
            "|---|--:|--:|" + "--:|--:|" * len(loops)]
    for key in [k for k in theirs if all(k in m for m in mine.values())]:
        a = theirs[key]
        row = f"| {key[0]}: {key[1]} | {a['base']['median']:.4g} / {a['current']['median']:.4g} | {_change(a)} |"
        for via in loops:
            b = mine[via][key]
            row += f" {b['base']['median']:.4g} / {b['current']['median']:.4g} | {_change(b)} |"
        rows.append(row)
    rows += ["", f"Each loop one QEMU run: {loops['kexec'][1]['cpu']}.", ""]
    rows += [_loop_line(via, rep, run) for via, (rep, run) in loops.items()]
    rows.append(f"- lab.ab ({ab_run['finished'][:10]}, {ab_run['machine']}, commit {ab_run['commit']}): "
                f"`{command(ab_run['command'])}`, {mmss(ab_run['wall_s'])} for {2 * ab_run['boots']} boots, "
                "one QEMU run a boot.")
    return "\n".join(rows)


AB_LOOPS = {"kexec": "lab-ab-loop-kexec-base-nt-v3-xeon-vm-2026-12-06-fdd0ab1",
            "reboot": "lab-ab-loop-reboot-base-nt-v3-xeon-vm-2026-12-06-fdd0ab1"}


# The v8 template series in the steps lab.steps measures (1-3, 4, 5, 6-8, 9) and its base
V8_KERNELS = 6
V8_BOOTS = 5


def lab_ab_series(raw: dict) -> str:
    """A series loop in the lab: the step table of each primary figure (each
    step against the one before and against the base, at the series'
    alpha), the loop's time per boot, and the night the v8 series needs at
    that pace."""
    report, run = raw["series"]
    lp = report["loop"]
    labels = list(lp["kernels"])
    rows = ["| primary figure | " + " | ".join(f"{label}: runs, median" for label in labels)
            + " | " + " | ".join(f"{label} against {before}" for before, label in zip(labels, labels[1:]))
            + " | from the base to the last |",
            "|---|" + "--:|" * len(labels) + "--:|" * (len(labels) - 1) + "--:|"]
    first = None
    for name, t in report["steps"].items():
        first = first or t
        by = {r["step"]: r for r in t["rows"]}
        cells = [f"{by[lab]['boots']}, {by[lab]['median']:.4g}" if by[lab].get("median") is not None else "0"
                 for lab in labels]
        changes = [_step_change(by[lab].get("from_before")) for lab in labels[1:]]
        last = by[labels[-1]].get("from_base")
        rows.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(changes) + f" | {_step_change(last)} |")
    per = sorted(b["host_s"] for b in run["boots"][1:-1])
    median = statistics.median(per)
    night = V8_KERNELS * V8_BOOTS * median
    rows += ["", f"Each step tested at alpha 0.05/{first['steps']} = {first['alpha']:.3g} (Bonferroni over the "
             f"{first['steps']} steps); a step can be marked from {first['boots_to_mark']} boots a kernel. "
             f"{run['cpu']}.", "",
             f"- {run['finished'][:10]}, {run['machine']}, commit {run['commit']}: `{command(run['command'])}`; one "
             f"QEMU run of {mmss(run['wall_s'])}: {len(run['boots'])} boots (order {lp['order']}, seed {lp['seed']}); "
             f"a schedule boot took {mmss(median)} of host time (median; {mmss(per[0])} to {mmss(per[-1])}), from its "
             f"early unit to the next boot's, validate included; failed boots {len(lp['failed_boots'])}; runs kept "
             + ", ".join(f"{side} {r['kept']} of {r['planned']}" for side, r in lp["runs"].items()) + ".",
             f"- The v8 series at {V8_BOOTS} boots a kernel ({V8_KERNELS} kernels: base and the steps 1-3, 4, 5, 6-8, "
             f"9), at this pace: {V8_KERNELS * V8_BOOTS} boots, {night / 3600:.1f} h. On a server each boot adds "
             "its firmware's and its own boot time, which `ab start`'s plan measures there (`systemd-analyze "
             "time`), and validate's 30 rebinds of a real namespace (the seeds' 97 to 273 ms each)."]
    return "\n".join(rows)


def _step_change(change: dict | None) -> str:
    if not change or change.get("change_pct") is None:
        return "-"
    ci = change.get("change_ci")
    mark = "*" if change.get("significant") else ("~" if change.get("verdict") == "not significant" else
                                                  change.get("verdict", ""))
    return f"{change['change_pct']:+.3g}%" + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" {mark}"


SERIES_RUN = "lab-ab-series-base-nt-v2-nt-v3-epyc-vm-2026-12-07-aa786f4"
BLOCKS = {
    "lab-ab-loop": (lab_ab_loop, {**{via: (f"{d}/ab.json", f"{d}/run.json") for via, d in AB_LOOPS.items()},
                                  "lab.ab": ICOUNT_RUNS["A/B base/nt-v3"]}),
    "lab-ab-series": (lab_ab_series, {"series": (f"{SERIES_RUN}/ab.json", f"{SERIES_RUN}/run.json")}),
}
