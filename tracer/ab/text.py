# SPDX-License-Identifier: Apache-2.0
"""The A/B in words: its header, its table's cells and columns, the legend
that says what the marks mean and what the runs cannot say, and the text
and markdown forms (nttrace.ab.html is the HTML page; the figures are
nttrace.ab.compare's).

The header says where each side was measured and under what host
conditions (recorded by the run, or for a lab guest by the lab around its
boot), and warns where a side was not quiet or the sides' conditions differ.
"""
from __future__ import annotations

import sys

from nttrace.kernel import machine
from nttrace.ab import statistics
from nttrace.ab.compare import is_number, label, measured_on, reports_of, runs_of, side_conditions
from nttrace.ab.statistics import ALPHA, NOT_TESTED_ONE_RUN, POWER
from nttrace.validate import evidence


def conditions_line(name: str, s: dict | None) -> str:
    if s is None:
        return f"{name}: host conditions not recorded (reports from before nttrace recorded them)"
    states = ", ".join(f"{v} {k}" for k, v in s["states"].items())
    line = (f"{name}: host {states} of {s['windows']} run{'s' if s['windows'] != 1 else ''}; others used at most "
            f"{100 * (s['others_share_max'] or 0):.0f}% of a CPU")
    if s["busy_beside"]:
        line += "; beside: " + ", ".join(s["busy_beside"])
    if s["accelerators"]:
        line += "; guest accelerator: " + ", ".join(s["accelerators"])
    if s.get("unrecorded"):
        line += f"; {s['unrecorded']} run(s) unrecorded"
    return line


def condition_warnings(base: dict | None, cur: dict | None) -> list[str]:
    """What a reader must know about the sides' conditions: a side measured
    under contention, sides measured under different conditions."""
    out = []
    for name, s in (("base", base), ("patched", cur)):
        if s and any(k != "quiet" for k in s["states"]):
            bad = sum(v for k, v in s["states"].items() if k != "quiet")
            beside = ", ".join(s["busy_beside"]) or "other processes busy"
            if s["accelerators"] and all("icount" in a for a in s["accelerators"]):
                out.append(f"note: {name} side's host was not quiet in {bad} of {s['windows']} runs ({beside}); its "
                           "guest's clock counts instructions (icount), so that load is not in its timings")
            else:
                out.append(f"warning: {name} side measured on a host that was not quiet in {bad} of {s['windows']} "
                           f"runs ({beside}): its timings include that load")
    if base and cur:
        icount = all("icount" in a for s in (base, cur) for a in s["accelerators"]) and \
            base["accelerators"] and cur["accelerators"]
        if set(base["states"]) != set(cur["states"]) and not icount:
            out.append(f"warning: the sides were measured under different host conditions "
                       f"({', '.join(base['states'])} | {', '.join(cur['states'])}): the change includes that "
                       "difference")
        if base["accelerators"] != cur["accelerators"]:
            out.append(f"warning: the sides ran under different accelerators ({', '.join(base['accelerators'])} | "
                       f"{', '.join(cur['accelerators'])}): not comparable")
    elif (base is None) != (cur is None):
        out.append("warning: only one side recorded its host conditions")
    return out


def header(baseline, current) -> list[str]:
    lines = []
    sides = (("base", reports_of(baseline)), ("patched", reports_of(current)))
    for name, reports in sides:
        r = reports[0]
        m = measured_on(r)
        where = m.get("kind", "unrecorded")
        if m.get("hypervisor"):
            where += f" ({m['hypervisor']})"
        kernel = r.get("kernel", {}) or {}
        release = r.get("kernel_release") or "kernel release unrecorded"
        lab = r.get("lab_kernel") or {}
        build = f" (lab kernel {lab['variant']})" if lab.get("variant") else ""
        lines.append(f"{name}: {release}{build}, NT revision {kernel.get('nt_revision', '?')}, measured on {where}; "
                     f"{runs_of(reports)} run{'s' if runs_of(reports) != 1 else ''}, {len(reports)} "
                     f"report{'s' if len(reports) != 1 else ''}")
    conds = [side_conditions(reports) for _n, reports in sides]
    for (name, _r), c in zip(sides, conds):
        lines.append(conditions_line(name, c))
    lines += condition_warnings(*conds)
    kinds = {measured_on(r).get("kind") for _n, rs in sides for r in rs}
    for kind in ("emulated", "vm"):
        if kind in kinds:
            lines.append("note: " + machine.caveat(kind))
            break
    differ = machine.mitigations_differ(measured_on(sides[0][1][0]), measured_on(sides[1][1][0]))
    if differ:
        lines.append("note: the sides ran with different CPU mitigations (base | patched): " + "; ".join(differ))
    return lines


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _change(r: dict) -> str:
    numeric = r.get("kind") == "number" or all(is_number(r[k]) for k in ("baseline", "current"))
    if numeric and r["metric"].endswith("_pct"):     # a share: the change in points
        return f"{r['current'] - r['baseline']:+.1f} pts"
    if r["delta_pct"] is not None:
        return f"{_pct(r['delta_pct'])}%"
    if r["baseline"] == r["current"]:
        return "same"
    if isinstance(r["current"], str) or isinstance(r["baseline"], str):
        return "changed"
    return "n/a"


def _pct(x: float, sign: bool = True) -> str:
    """A percent to one decimal, or to two significant digits below 0.1
    (the lab's icount A/A differs by thousandths of a percent)."""
    f = ("+" if sign else "") + (".1f" if abs(x) >= 0.1 or x == 0 else ".2g")
    return f"{x:{f}}"


def _ci(ci) -> str:
    return f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else ""


def verdict(r: dict) -> str:
    """The row's verdict in a few words: '*' significant, '~' tested and not,
    or why it was not tested."""
    st = r.get("stats")
    if not st:
        return ""
    if st["significant"]:
        return "*"
    if st.get("p") is not None and st["verdict"] == "not significant":
        return "~"
    if st["verdict"] == NOT_TESTED_ONE_RUN:
        return "not tested: 1 run a side"
    if st["verdict"].startswith("cannot be significant"):
        return f"not testable at {st['base']['n']}/{st['current']['n']} runs"
    if st["verdict"].startswith("descriptive"):
        return "descriptive"
    return st["verdict"]


def _side(r: dict, side: str) -> str:
    st = r.get("stats")
    if not st:
        return _fmt(r[side])
    d = st["base" if side == "baseline" else "current"]
    cov = f" ±{_pct(d['cov_pct'], sign=False)}%" if d.get("cov_pct") is not None else ""
    return _fmt(d["median"]) + cov


def _change_cell(r: dict) -> str:
    st = r.get("stats")
    if not st or r["metric"].endswith("_pct"):
        return _change(r)
    return _change(r) + _ci(st.get("change_ci"))


def _p(r: dict) -> str:
    st = r.get("stats")
    return "-" if not st or st.get("p") is None else (f"{st['p']:.3f}" if st["p"] >= 0.001 else f"{st['p']:.1e}")


def _detectable(r: dict) -> str:
    st = r.get("stats")
    if not st or st["role"] == "descriptive" or st["base"]["n"] < 2 or st["current"]["n"] < 2:
        return "-"
    return f"±{_pct(st['detectable_pct'], sign=False)}%" if st.get("detectable_pct") is not None else "none"


def _role(r: dict) -> str:
    return r.get("role", "descriptive") if r.get("kind") == "number" else ""


def _n(r: dict) -> str:
    return f"{r['runs'][0]}/{r['runs'][1]}"


def row_name(r: dict) -> str:
    return label(r["check"], r["subject"])


COLUMNS = (("check", row_name, "<"), ("figure", lambda r: r["label"], "<"), ("role", _role, "<"),
           ("base", lambda r: _side(r, "baseline"), ">"), ("patched", lambda r: _side(r, "current"), ">"),
           ("change [interval]", _change_cell, ">"), ("verdict", verdict, "<"), ("p", _p, ">"),
           ("detectable", _detectable, ">"), ("n", _n, ">"))


def testable_sizes(alpha: float) -> str:
    """When a test is possible at alpha (statistics.fewest_runs) in words:
    'at least 2 runs against 8, 3 against 5, or 4 a side' at 0.05."""
    words = [f"{a} against {b}" if a != b else f"{a} a side" for a, b in statistics.fewest_runs(alpha)]
    if len(words) > 1:
        words[0] = words[0].replace(" against", " runs against", 1)
    return "at least " + (", ".join(words[:-1]) + ", or " + words[-1] if len(words) > 1 else words[0])


def legend(rows: list[dict]) -> list[str]:
    """What the columns and marks mean, and what the runs cannot say."""
    stats = [(r, r["stats"]) for r in rows if r.get("stats")]
    if not stats:
        return []
    out = ["base, patched: the median across runs (boots) ±CoV between runs; change: the Hodges-Lehmann shift of "
           "the runs' log values with its exact rank interval; verdict: * significant, ~ not, by the exact "
           "Mann-Whitney U test across runs, significant exactly when the interval excludes no change; n: runs "
           "base/patched"]
    primary = sorted({(r["check"], r["stats"]["alpha"]) for r, _s in stats if r.get("role") == "primary"})
    for check, alpha in primary:
        fig = next(r["label"] for r, _s in stats if r["check"] == check and r.get("role") == "primary")
        out.append(f"primary ({check}): {fig}, tested at alpha {alpha:.2g}: "
                   f"{evidence.primary_reason(check)}")
    sec = [s for r, s in stats if r.get("role") == "secondary"]
    if sec:
        m = sec[0]["multiplicity"]["m"]
        out.append(f"secondary: the other latency figures, Bonferroni-corrected over their m = {m}: each tested at "
                   f"alpha {ALPHA:.2g}/{m} = {ALPHA / m:.2g}, its interval at {100 * (1 - ALPHA / m):.2f}%")
    if any(r.get("role") == "descriptive" for r, _s in stats):
        out.append("descriptive: shown with their interval, never tested (counts, shares, per-page forms of "
                   "tested figures)")
    out.append(f"detectable: the smallest change these runs would mark with {100 * POWER:.0f}% probability at the "
               "row's alpha, from their own boot-to-boot spread; 'none': no change is detectable at this n")
    one = sorted({r["check"] for r, s in stats if min(s["base"]["n"], s["current"]["n"]) == 1})
    if one:
        out.append("one run on a side: the change is printed, boot-to-boot variation unknown: not tested, no mark "
                   "(the spread inside one run says nothing of the next boot)")
    few = sorted({(s["base"]["n"], s["current"]["n"], s["alpha"]) for r, s in stats
                  if s["verdict"].startswith("cannot be significant")}, key=lambda f: (-f[2], f[0], f[1]))
    for m, n, alpha in few:
        out.append(f"not testable at {m}/{n} runs: the exact test's smallest p at {m} against {n} is "
                   f"2/C({m + n}, {min(m, n)}) = {statistics.smallest_p(m, n):.2g}, above the row's alpha "
                   f"{alpha:.2g}; a test at alpha {alpha:.2g} needs {testable_sizes(alpha)}")
    for r, s in stats:
        if s.get("detect"):
            need = s["detect"]["boots_needed"]
            out.append(f"to detect a {s['detect']['pct']:g}% change of {row_name(r)} {r['label']}: "
                       + (f"{need} runs a side at this spread" if need else
                          "more runs than nttrace estimates (over 60 a side), or the spread is unknown"))
    return out


def print_text(rows: list[dict], baseline, current, out=sys.stdout) -> None:
    for line in header(baseline, current):
        print(line, file=out)
    cells = [[fn(r) for _h, fn, _a in COLUMNS] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (h, _f, _a) in enumerate(COLUMNS)]
    print("  ".join(f"{h:{a}{w}}" for (h, _f, a), w in zip(COLUMNS, widths)).rstrip(), file=out)
    for c in cells:
        print("  ".join(f"{v:{a}{w}}" for v, (_h, _f, a), w in zip(c, COLUMNS, widths)).rstrip(), file=out)
    for line in legend(rows):
        print(line, file=out)


def print_markdown(rows: list[dict], baseline, current, out=sys.stdout) -> None:
    for line in header(baseline, current):
        print(f"_{line}_  ", file=out)
    print("", file=out)
    print("| " + " | ".join(h for h, _f, _a in COLUMNS) + " |", file=out)
    print("|" + "|".join("--:" if a == ">" else "---" for _h, _f, a in COLUMNS) + "|", file=out)
    for r in rows:
        print("| " + " | ".join(fn(r).replace("|", "\\|") for _h, fn, _a in COLUMNS) + " |", file=out)
    lines = legend(rows)
    if lines:
        print("", file=out)
        for line in lines:
            print(f"_{line}_  ", file=out)


def shift_line(base_name: str, base: list[float], cur_name: str, cur: list[float], unit: str = "") -> str:
    """One comparison of two sets of rounds in one line, as the A/B states
    every change (statistics.compare): each side's n, median and range, the
    change of cur against base with its exact interval, the p of the same
    test and the verdict (benchmarks of nttrace's own code use it for their
    before/after)."""
    r = statistics.compare(statistics.Runs(base), statistics.Runs(cur))
    sides = "; ".join(f"{name} n {d['n']}, median {_fmt(d['median'])}{unit} ({_fmt(d['min'])}-{_fmt(d['max'])})"
                      for name, d in ((base_name, r["base"]), (cur_name, r["current"])))
    p = f", p {r['p']:.3g}" if r["p"] is not None else ""
    return f"{cur_name} against {base_name}: {_pct(r['change_pct'])}%{_ci(r['change_ci'])}{p}, {r['verdict']} [{sides}]"
