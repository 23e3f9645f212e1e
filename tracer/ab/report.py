# SPDX-License-Identifier: Apache-2.0
"""The loop's report: validate's own A/B over the kept runs (exactly what
`nttrace validate --baseline BASE-RUNS --current PATCHED-RUNS --format F`
prints, computed in this process by the same functions, nttrace.ab.formats,
so its statistics rules hold unchanged: one run a side is never tested, the
primary figure needs 4 a side), preceded by what only the loop knows: the
kernels and their hashes, the via, the command line, the reset the loop
relied on, the kernels' config differences, the seed and the schedule, the
failed boots and failed measurements (with who is blamed and the evidence),
the runs cut short and redone, a state recovered, the boot settings of the
runs (and any that differ between them), the runs' kernel build-ids, the
runs taken on a host that never became quiet (and whether leaving them out
changes any verdict: the A/B computed both ways by validate's own
statistics), and whether nttrace itself changed during the loop.

A loop of a series (more than two kernels) reports each step: first the
step table (nttrace.ab.series: each primary figure across the kernels, each
step against the one before and against the base at the series' alpha, the
fewest boots a step needs to be markable), then each step's own A/B against
the kernel before it, as validate prints it. A loop of two is a series of
one step, whose report is that step's A/B alone.

`write_all` writes every format to NAME/report/ab.{txt,md,json,html} (each
whole); `render` returns one format for `ab report --format`.
"""
from __future__ import annotations

import html
import json
import re
import textwrap
import time
from pathlib import Path

from nttrace.ab import compare, formats, schedule, series, store
from nttrace.validate import evidence
from nttrace.ab.loop import Loop, slot_state, why_failed
from nttrace.errors import UsageError
from nttrace.kernel import boot_settings

_WIDTH = 110     # the text report's wrapped lines


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "?"


def facts(loop: Loop) -> dict:
    """What the loop knows beyond the runs, as JSON."""
    sched, st = loop.schedule(), loop.state()
    slots = schedule.from_json(sched["slots"])
    labels = schedule.sides(sched)
    runs = loop.runs()
    per_side = {side: [s.slot for s in slots if s.side == side and s.slot in runs] for side in labels}
    planned = {side: sum(1 for s in slots if s.side == side) for side in labels}
    failed = []
    for s in slots:
        ss = slot_state(st, s.slot)
        for f in ss["failures"]:
            failed.append({"slot": s.slot, "side": s.side, "expected": f["expected"], "found": f["found"],
                           "kind": f.get("kind", "boot"), "blamed": f.get("blamed"), "why": f.get("why")
                           or why_failed(f), "at": f["at"], "slot_given_up": ss["outcome"] == "failed boot",
                           **{k: f[k] for k in ("known", "cause", "reached", "records") if k in f}})
    identities = {}
    for n, r in sorted(runs.items()):
        ident = (r.get("ab_run") or {}).get("nttrace") or {}
        key = (ident.get("version"), ident.get("package_sha256"))
        identities.setdefault(key, {"version": ident.get("version"), "commit": ident.get("commit"),
                                    "package_sha256": ident.get("package_sha256"), "slots": []})["slots"].append(n)
    state = st["state"]
    if state == "complete" and not all(per_side.values()):     # a loop from before the rule: not complete
        state = "incomplete"
    settings = {n: (r.get("ab_run") or {}).get("machine") for n, r in sorted(runs.items())}
    settings = {n: v for n, v in settings.items() if isinstance(v, dict)}
    reached = {n: boot_settings.reached_text(v.get("reached") or {}) for n, v in settings.items()}
    build_ids = {side: sorted({(runs[n].get("ab_run") or {}).get("kernel_identity", {}).get("build_id") or "?"
                               for n in per_side[side]}) for side in labels if per_side[side]}
    return {"name": loop.name, "state": state, "why": st.get("why"), "via": sched["via"],
            "reset": (sched.get("reset") or {}).get("text"),
            "config_diffs": schedule.config_diffs(sched), "build_ids": build_ids,
            "deadline_s": sched.get("deadline_s"), "until": sched.get("until"),
            "recoveries": [r.get("text") for r in st.get("recoveries") or []]
            + ([st["recovered_now"]["text"]] if st.get("recovered_now") else []),
            "boot_settings": ({"same": boot_settings.summary(next(iter(settings.values())))
                               if not boot_settings.differences({str(n): v for n, v in settings.items()}) else None,
                               "differ": boot_settings.differences({f"slot {n}": v for n, v in settings.items()}),
                               "reached": reached, "unrecorded": sorted(set(runs) - set(settings))}
                              if settings else None),
            "quiet_timed_out": quiet_effect(loop, slots, runs),
            "cmdline": sched["cmdline"], "seed": sched["seed"], "rounds": sched["rounds"],
            "kernels": sched["kernels"], "schedule": sched["slots"], "order": schedule.order_text(slots, labels),
            "legend": schedule.legend(labels),
            "runs": {side: {"kept": len(per_side[side]), "planned": planned[side], "slots": per_side[side]}
                     for side in labels},
            "failed_boots": failed, "runs_redone": st.get("interrupted", []),
            "nttrace": list(identities.values()), "nttrace_changed": len(identities) > 1,
            "validate_args": sched["validate_args"], "started": sched.get("created")}


def _loop_lines(f: dict) -> list[str]:
    k = f["kernels"]
    width = max(8, *(len(label) for label in k))
    lines = [f"nttrace ab {f['name']}: {f['state']}" + (f" ({f['why']})" if f.get("why") else "")]
    for label, kern in k.items():
        lines += [f"  {label:{width}} {kern['release']}  {kern['image']}  sha256 {kern['sha256'][:16]}",
                  f"  {'':{width}} {kern['build']}"]
    lines += [f"  via {f['via']}; command line: {f['cmdline'] or '(grub entry)'}",
              *([f"  reset: {f['reset']}"] if f.get("reset") else []),
              *([f"  boot deadline: {f['deadline_s']} s"] if f.get("deadline_s") else []),
              f"  checks: nttrace validate --json {' '.join(f['validate_args'])}".rstrip(),
              f"  schedule: {f['rounds']} rounds, seed {f['seed']}, order ({f['legend']}): {f['order']}",
              "  runs kept: " + ", ".join(f"{side} {r['kept']} of {r['planned']}" for side, r in f["runs"].items())]
    differ = {side: ids for side, ids in (f.get("build_ids") or {}).items() if len(ids) > 1}
    for side, ids in differ.items():
        lines.append(f"  BUILD-IDS DIFFER between the {side} runs: {', '.join(i[:16] for i in ids)}")
    for r in f.get("recoveries") or []:
        lines.append(f"  STATE RECOVERED: {r}")
    if f["failed_boots"]:
        lines.append(f"  failed boots ({len(f['failed_boots'])}):")
        for b in f["failed_boots"]:
            kind = "failed measurement" if b.get("kind") == "measurement" else "failed boot"
            lines.append(f"    slot {b['slot']} ({b['side']}) at {_when(b['at'])}, {kind}"
                         + (f" [blamed: {b['blamed']}]" if b.get("blamed") else "")
                         + ("; slot given up" if b["slot_given_up"] else "") + ":")
            # the reason can run to several hundred characters: wrapped, so the text report reads in a terminal
            lines.extend(textwrap.wrap(f"{b['why']}; found {b['found']['build']}", width=_WIDTH,
                                       initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False))
    else:
        lines.append("  failed boots: none")
    for r in f["runs_redone"]:
        lines.append(f"  run cut short and redone: slot {r['slot']} (at {_when(r['at'])})"
                     + (f": an orderly shutdown ({r.get('how')})" if r.get("by") == "shutdown" else ""))
    bs = f.get("boot_settings")
    if bs:
        if bs["same"]:
            lines.append(f"  boot settings, the same in every run: {bs['same']}")
        else:
            lines.append("  BOOT SETTINGS DIFFER between runs:")
            for key, values in bs["differ"].items():
                lines.append(f"    {key}: " + "; ".join(f"{n} {json.dumps(v)}" for n, v in values.items()))
        how: dict[str, list[int]] = {}
        for n, text in bs["reached"].items():
            how.setdefault("by kexec" if text.startswith("by kexec") else text, []).append(n)
        lines.append("  boots reached " + "; ".join(f"{k}: slots {', '.join(map(str, v))}" for k, v in how.items()))
        if bs["unrecorded"]:
            lines.append(f"  runs without recorded boot settings: slots {', '.join(map(str, bs['unrecorded']))}")
    q = f.get("quiet_timed_out")
    if q:
        lines.append(f"  runs on a host that never became quiet (the wait timed out): slots "
                     f"{', '.join(map(str, q['slots']))}; {q['text']}")
        for c in q.get("changes") or []:
            lines.append(f"    {c['figure']}: {c['with']} with them, {c['without']} without")
    labels = list(k)
    for label, diff in (f.get("config_diffs") or {}).items():
        before = labels[labels.index(label) - 1] if label in labels and labels.index(label) else "base"
        lines.append(f"  config differences ({before} vs {label}): {len(diff) or 'none'}")
        lines.extend(f"    {d}" for d in diff)
    if f["nttrace_changed"]:
        lines.append("  NTTRACE CHANGED DURING THE LOOP: the runs were taken by different nttrace builds:")
        for i in f["nttrace"]:
            lines.append(f"    {i['version']} commit {i['commit'] or 'unknown'} (package {str(i['package_sha256'])[:12]}): "
                         f"slots {', '.join(map(str, i['slots']))}")
    elif f["nttrace"]:
        i = f["nttrace"][0]
        lines.append(f"  nttrace {i['version']} commit {i['commit'] or 'unknown'} in every run")
    return lines


def _verdicts(base: list[dict], cur: list[dict]) -> dict[str, str]:
    """{figure: its verdict} of an A/B of these runs, by validate's own
    comparison and statistics: "significant (+x%)", "not significant" or
    "not tested"."""
    out = {}
    for r in compare.compare(base, cur):
        st = r.get("stats")
        if not st:
            continue
        name = f"{compare.label(r['check'], r['subject'])} {r['label']}"
        if st.get("significant"):
            out[name] = f"significant ({st['change_pct']:+.1f}%)" if st.get("change_pct") is not None else "significant"
        elif str(st.get("verdict", "")).startswith("not significant"):
            out[name] = "not significant"
        else:
            out[name] = "not tested"
    return out


def quiet_effect(loop: Loop, slots: list[schedule.Slot], runs: dict[int, dict]) -> dict | None:
    """The runs whose quiet-host wait timed out, and whether the A/B's
    verdicts change when they are left out; None where there are none."""
    timed = sorted(n for n, r in runs.items() if (r.get("ab_run") or {}).get("quiet_timed_out"))
    if not timed:
        return None
    labels = schedule.sides(loop.schedule())
    sides = {side: [runs[s.slot] for s in slots if s.side == side and s.slot in runs] for side in labels}
    kept = {side: [r for r in rs if r["ab_run"]["slot"] not in timed] for side, rs in sides.items()}
    if not all(sides.values()):
        return {"slots": timed, "changes": None, "text": "no A/B to change (a side has no run)"}
    if not all(kept.values()):
        return {"slots": timed, "changes": None,
                "text": "leaving them out leaves a side without a run: no verdict stands without them"}
    with_them, without = {}, {}
    try:
        for before, after in zip(labels, labels[1:]):
            step = "" if len(labels) == 2 else f"{after}: "
            with_them.update({step + k: v for k, v in _verdicts(sides[before], sides[after]).items()})
            without.update({step + k: v for k, v in _verdicts(kept[before], kept[after]).items()})
    except Exception as exc:      # runs validate's A/B refuses: the report says so rather than fail
        return {"slots": timed, "changes": None, "text": f"the A/B without them could not be computed ({exc})"}
    changes = [{"figure": k, "with": v, "without": without.get(k, "not compared")}
               for k, v in with_them.items() if without.get(k, "not compared") != v]
    text = (f"leaving them out changes {len(changes)} verdict{'s' if len(changes) != 1 else ''}:" if changes
            else "leaving them out changes no verdict")
    return {"slots": timed, "changes": changes, "text": text}


def _ab_of_runs(loop: Loop) -> list[tuple[str, str, tuple | None, str]]:
    """Each step's kept runs compared against the kernel's before it
    (formats.compare_files: what validate's A/B renders in each format):
    [(kernel before, kernel, compared or None, why there is none)]."""
    sched = loop.schedule()
    labels = schedule.sides(sched)
    slots = schedule.from_json(sched["slots"])
    runs = loop.runs()
    paths = {side: [str(loop.run_path(s)) for s in slots if s.side == side and s.slot in runs] for side in labels}
    out = []
    for before, after in zip(labels, labels[1:]):
        if not paths[before] or not paths[after]:
            out.append((before, after, None,
                        f"no A/B yet: {len(paths[before])} {before} and {len(paths[after])} {after} runs kept (each "
                        "side needs at least one run; 4 a side for the primary figure)"))
            continue
        try:
            out.append((before, after, formats.compare_files(paths[before], paths[after]), ""))
        except UsageError as exc:     # a kept run validate's A/B refuses: named, with the loop it is in
            step = "" if len(labels) == 2 else f" ({before} against {after})"
            raise UsageError(f"ab report: validate's A/B of the kept runs{step}: {exc}") from None
    return out


def step_table(loop: Loop) -> dict:
    """The series' step table (nttrace.ab.series) of each primary figure the
    kept runs hold: {figure: series.steps(...)}, the base first."""
    sched = loop.schedule()
    labels = schedule.sides(sched)
    values: dict[str, dict[str, list[float]]] = {}
    for n, run in sorted(loop.runs().items()):
        side = run["ab_run"]["side"]
        for c in run.get("checks") or []:
            if not isinstance(c, dict) or "id" not in c:
                continue
            try:
                ev = evidence.of(c)
                figures = ev.figures()
            except Exception:       # evidence this nttrace cannot read: not a figure
                continue
            for fig in figures:
                if fig.role == "primary" and compare.is_number(fig.value):
                    name = f"{compare.label(c['id'], ev.subject())} {fig.label}"
                    values.setdefault(name, {}).setdefault(side, []).append(float(fig.value))
    return {name: series.steps(labels, per) for name, per in values.items()}


def _series_lines(table: dict, kernels: dict) -> list[str]:
    lines = []
    first = next(iter(table.values()), None)
    if first is None:
        return ["step table: no primary figure in the kept runs"]
    lines.append(f"Step table: each step against the kernel before it and against the base, each tested at alpha "
                 f"0.05/{first['steps']} = {first['alpha']:.3g} (Bonferroni over the {first['steps']} steps); a step "
                 f"can be marked only from {first['boots_to_mark']} boots a kernel (* significant, ~ not; otherwise "
                 "the reason it is not tested)")
    for name, t in table.items():
        lines.append("")
        lines.append(f"{name}:")
        width = max(8, *(len(r["step"]) for r in t["rows"]))
        lines.append(f"  {'kernel':{width}}  boots  {'median':>10}  {'from the step before':<34}  "
                     f"{'from the base':<34}  share")
        for r in t["rows"]:
            med = f"{r['median']:.4g}" if r.get("median") is not None else "-"
            before = series.change_cell(r.get("from_before"))
            if r.get("skipped"):
                before += f" (from {r['before']}: {', '.join(r['skipped'])} not measured)"
            share = f"{r['share_pct']:.0f}%" if r.get("share_pct") is not None else ""
            lines.append(f"  {r['step']:{width}}  {r['boots']:>5}  {med:>10}  {before:<34}  "
                         f"{series.change_cell(r.get('from_base')):<34}  {share}")
        if t.get("total_pct") is not None:
            lines.append(f"  whole series, base to the last kernel measured: {t['total_pct']:+.1f}% (medians)")
    return lines


def render(loop: Loop, fmt: str) -> str:
    if fmt not in formats.FILES:
        raise UsageError(f"ab report --format {fmt}: one of {', '.join(formats.FILES)}")
    return _render(loop, fmt, facts(loop), _ab_of_runs(loop), step_table(loop))


def _body(page: str) -> tuple[str, int]:
    """An A/B page's body (without its script) and how many plots it has."""
    m = re.search(r"<body data-plots='(\d+)'>\n(.*)\n<script>", page, re.S)
    return (m.group(2), int(m.group(1))) if m else (page, 0)


def _render(loop: Loop, fmt: str, f: dict, steps: list, table: dict) -> str:
    """The report in fmt: the loop's facts `f`, the step table of a series,
    then each step's A/B of the kept runs, or why there is none."""
    lines = _loop_lines(f)
    abs_ = [(b, a, formats.render(fmt, *c) if c is not None else None, why) for b, a, c, why in steps]
    if len(abs_) == 1:                 # two kernels: the report reads as validate's A/B of them
        _b, _a, ab, why = abs_[0]
        if fmt == "text":
            return "\n".join(lines) + "\n\n" + (ab if ab is not None else why + "\n")
        if fmt == "markdown":
            return "```\n" + "\n".join(lines) + "\n```\n\n" + (ab if ab is not None else f"_{why}_\n")
        if fmt == "json":
            return json.dumps({"loop": f, "ab": json.loads(ab) if ab is not None else None,
                               **({} if ab is not None else {"ab_missing": why})}, indent=1) + "\n"
        section = ("<section id='ab-loop'><h2>The loop</h2><pre>" + html.escape("\n".join(lines)) + "</pre></section>")
        if ab is None:
            return (f"<!doctype html><html><head><meta charset='utf-8'><title>nttrace ab {html.escape(loop.name)}"
                    f"</title></head><body>{section}<p>{html.escape(why)}</p></body></html>\n")
        at = ab.find("</h1>") + len("</h1>") if "</h1>" in ab else (ab.find(">", ab.find("<body")) + 1
                                                                    if "<body" in ab else 0)
        return ab[:at] + "\n" + section + "\n" + ab[at:]
    table_lines = _series_lines(table, f["kernels"])
    if fmt == "json":
        return json.dumps({"loop": f, "steps": table,
                           "ab": {a: json.loads(ab) if ab is not None else None for _b, a, ab, _w in abs_},
                           "ab_missing": {a: why for _b, a, ab, why in abs_ if ab is None}}, indent=1) + "\n"
    if fmt in ("text", "markdown"):
        fence = "```\n" if fmt == "markdown" else ""
        out = [fence + "\n".join(lines) + "\n" + fence, fence + "\n".join(table_lines) + "\n" + fence]
        for before, after, ab, why in abs_:
            head = f"Step {after} against {before}"
            out.append((f"## {head}\n\n" if fmt == "markdown" else f"{head}\n{'=' * len(head)}\n")
                       + (ab if ab is not None else (f"_{why}_\n" if fmt == "markdown" else why + "\n")))
        return "\n".join(out)
    parts, plots = [], 0
    for before, after, ab, why in abs_:
        parts.append(f"<section class='step'><h2>Step {html.escape(after)} against {html.escape(before)}</h2>")
        if ab is None:
            parts.append(f"<p>{html.escape(why)}</p>")
        else:
            body, n = _body(ab)
            parts.append(body)
            plots += n
        parts.append("</section>")
    from nttrace.ab import html as ab_html
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>nttrace ab {html.escape(loop.name)}"
            f"</title><style>{ab_html.STYLE}</style></head>\n<body data-plots='{plots}'>\n"
            f"<h1>nttrace ab {html.escape(loop.name)}: a series of {len(f['kernels'])} kernels</h1>\n"
            "<section id='ab-loop'><h2>The loop</h2><pre>" + html.escape("\n".join(lines)) + "</pre></section>\n"
            "<section id='steps'><h2>Step table</h2><pre>" + html.escape("\n".join(table_lines)) + "</pre></section>\n"
            + "\n".join(parts) + f"\n<script>{ab_html.SCRIPT}</script>\n</body></html>\n")


def write_all(loop: Loop, out: Path | None = None) -> dict[str, Path]:
    if out is None:
        out = loop.report_dir
        store.make_private_dir(out)
    else:
        out.mkdir(parents=True, exist_ok=True)
    f, steps, table = facts(loop), _ab_of_runs(loop), step_table(loop)    # read and compared once for every format
    written = {}
    for fmt, name in formats.FILES.items():
        store.write_atomic(out / name, _render(loop, fmt, f, steps, table))
        written[fmt] = out / name
    return written
