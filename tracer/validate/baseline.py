"""`nttrace validate --baseline A1.json [A2.json ...] [--current B1.json ...]`:
base against patched, check by check, each side one run (a boot) or several.

Every report given on one side is one run of the checks it holds (the lab
writes a report per check per boot, so a boot's reports merge, and the same
check from several boots makes several runs). A side must be one kernel
(release, NT revision, build) measured on one kind of machine. A check's
figures come from its typed evidence (nttrace.validate.evidence), each with
its role: the scenario's primary figure is tested at alpha, the secondary
ones with a Bonferroni correction, the rest described; the statistics are
nttrace.validate.statistics' (runs as the unit, exact rank test and the
interval inverted from it, the smallest detectable change). Categorical
figures (mode, copy routines) show every value the side's runs had.

The header says where each side was measured and under what host
conditions (recorded by the run, or for a lab guest by the lab around its
boot), and warns where a side was not quiet or the sides' conditions differ.
"""
from __future__ import annotations

import json
import sys

from nttrace.errors import UsageError
from nttrace.kernel import conditions, machine
from nttrace.validate import checks, evidence
from nttrace.validate.statistics import NOT_TESTED_ONE_RUN


def load_report(path: str, flag: str = "--baseline") -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {path}: not valid JSON ({exc.msg} at line {exc.lineno}); truncated?") from None
    if not (isinstance(data, dict) and isinstance(data.get("checks"), list) and "version" in data):
        raise UsageError(f"{flag} {path}: not an `nttrace validate --json` report")
    if not any(isinstance(c, dict) and "id" in c for c in data["checks"]):
        raise UsageError(f"{flag} {path}: the report holds no check")
    data["_source"] = path
    return data


def side_identity(report: dict) -> tuple:
    """What one side must share: the kernel (release, NT revision, and where
    recorded the build: the lab's kernel variant and its cache key, or uname's
    version line) and the kind of machine."""
    kernel = report.get("kernel") or {}
    lab = report.get("lab_kernel") or {}
    build = f"{lab['variant']} ({lab.get('key', '?')})" if lab.get("variant") else None
    return (report.get("kernel_release"), kernel.get("nt_revision"), (report.get("machine") or {}).get("kind"),
            build)


def check_side(reports: list[dict], flag: str) -> None:
    """One side is one kernel on one kind of machine: a release, NT revision,
    kernel build or machine kind that differs between its reports is an input
    error."""
    first = reports[0]
    names = ("kernel release", "NT revision", "machine kind", "kernel build")
    for r in reports[1:]:
        for name, a, b in zip(names, side_identity(first), side_identity(r)):
            if a != b:
                raise UsageError(f"{flag}: {r.get('_source', '?')} has {name} {b!r} but {first.get('_source', '?')} "
                                 f"has {a!r}; one side is one kernel on one kind of machine")


def merge(reports: list[dict]) -> dict:
    """One report holding the checks of several runs on the same kernel (the
    lab times fsdax and devdax in separate runs)."""
    out = dict(reports[0])
    out["checks"] = [c for r in reports for c in r.get("checks", [])]
    out["summary"] = checks.tally(out["checks"])
    return out


# -- figures -------------------------------------------------------------------
def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _runs_by_check(reports: list[dict]) -> dict[tuple[str, str], list]:
    """{(check id, subject): [typed evidence of each run]}; the subject is what
    a check measured when it runs more than once per kernel (a memmap run's
    namespace mode: fsdax, devdax)."""
    out: dict[tuple[str, str], list] = {}
    for r in reports:
        for c in r.get("checks", []):
            if isinstance(c, dict) and "id" in c:
                ev = evidence.of(c)
                out.setdefault((c["id"], ev.subject()), []).append((c.get("status"), ev))
    return out


def _categories(values: list) -> str:
    """Every value a side's runs had; with how many runs where they differ."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return "; ".join(f"{v} ({k} of {len(values)} runs)" for v, k in counts.items())


def compare(baseline: dict | list[dict], current: dict | list[dict], strict: bool = False,
            detect_pct: float | None = None) -> list[dict]:
    """Per-check, per-figure rows of base against current, each side one
    report or a list of runs. A numeric figure's row carries its statistics
    ("stats": statistics.compare at its role's alpha); "baseline"/"current"
    are the sides' medians across runs and "delta_pct" the change. Secondary
    figures are tested at ALPHA / m, m the secondary figures of the whole
    comparison. `detect_pct`: each primary row also says how many runs a side
    a change of that size needs at these runs' spread. With `strict` (two
    sets of saved runs), a check that only one side ran is an input error."""
    from nttrace.validate import statistics
    base_runs = _runs_by_check(baseline if isinstance(baseline, list) else [baseline])
    cur_runs = _runs_by_check(current if isinstance(current, list) else [current])
    if strict:
        for have, lack, runs, other in (("--baseline", "--current", base_runs, cur_runs),
                                        ("--current", "--baseline", cur_runs, base_runs)):
            missing = [k for k in runs if k not in other]
            if missing:
                raise UsageError(f"{lack} has no run of {_label(*missing[0])} (the {have} side has "
                                 f"{len(runs[missing[0]])}); give both sides the same checks")
    rows, sides_of = [], []
    for key, cur_checks in cur_runs.items():
        base_checks = base_runs.get(key)
        if not base_checks:
            continue
        b_figs = [{f.metric: f for f in ev.figures()} for _s, ev in base_checks]
        c_figs = [{f.metric: f for f in ev.figures()} for _s, ev in cur_checks]
        for fig in cur_checks[0][1].figures():
            if not all(fig.metric in f for f in b_figs):
                continue
            bf = [f[fig.metric] for f in b_figs if f[fig.metric].value is not None]
            cf = [f.get(fig.metric) for f in c_figs]
            cf = [f for f in cf if f is not None and f.value is not None]
            if not bf and not cf:
                continue
            row = {"check": key[0], "subject": key[1], "metric": fig.metric, "label": fig.label,
                   "runs": [len(bf), len(cf)], "status": f"{base_checks[0][0]}->{cur_checks[0][0]}"}
            if bf and cf and all(_is_number(f.value) for f in bf + cf):
                with_samples = all(f.samples for f in bf + cf)
                sides_of.append((row, fig.role, [statistics.Runs([float(f.value) for f in fs],
                                                                 [f.samples for f in fs] if with_samples else [],
                                                                 fig.stat) for fs in (bf, cf)]))
                row.update(kind="number", role=fig.role, samples={"baseline": [f.samples for f in bf],
                                                                  "current": [f.samples for f in cf]}
                           if with_samples else None)
            else:
                row.update(kind="category", role="descriptive",
                           baseline=_categories([f.value for f in bf]) if bf else None,
                           current=_categories([f.value for f in cf]) if cf else None, delta_pct=None)
            rows.append(row)
    m = sum(1 for _r, role, _s in sides_of if role == "secondary")
    for row, role, (b, c) in sides_of:
        alpha = statistics.ALPHA / m if role == "secondary" and m else statistics.ALPHA
        st = statistics.compare(b, c, role, alpha)
        if role == "secondary":
            st["multiplicity"] = {"method": "Bonferroni", "m": m}
        if detect_pct and role == "primary":
            resid = statistics.residuals(b.values, c.values)
            st["detect"] = {"pct": detect_pct, "boots_needed": statistics.boots_needed(resid, detect_pct, alpha)}
        row.update(baseline=st["base"]["median"], current=st["current"]["median"], delta_pct=st["change_pct"],
                   stats=st)
    return rows


def measured_on(report: dict) -> dict:
    return report.get("machine") or {}


def _reports(side) -> list[dict]:
    return side if isinstance(side, list) else [side]


def _boots(reports: list[dict]) -> list[list[dict]]:
    """The side's reports grouped by run: a lab boot writes a report per
    scenario, all with the boot's id (reports from before nttrace recorded
    it: grouped by their host window where they have one, else one a report)."""
    groups: dict = {}
    for r in reports:
        c = r.get("host_conditions") or r.get("conditions")
        key = r.get("boot_id") or ((c.get("window_s"), c.get("loadavg_start"), c.get("others_cpu_s")) if c else id(r))
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def runs_of(reports: list[dict]) -> int:
    """How many runs a side holds: its boots where the reports say, else the
    most reports of any one check (a boot runs each check once)."""
    if all(r.get("boot_id") for r in reports):
        return len(_boots(reports))
    per_check: dict = {}
    for r in reports:
        for c in r.get("checks", []):
            if isinstance(c, dict) and "id" in c:
                key = (c["id"], evidence.of(c).subject())
                per_check[key] = per_check.get(key, 0) + 1
    return max(per_check.values(), default=len(reports))


def side_conditions(reports: list[dict]) -> dict | None:
    """The side's recorded conditions over its runs (for a guest, the host's
    during each boot; else the machine's during the run), or None where no
    run recorded any."""
    records = []
    for group in _boots(reports):
        r = group[0]
        c = r.get("host_conditions") or r.get("conditions")
        if c:
            records.append(c)
    if not records:
        return None
    out = conditions.summary(records)
    out["unrecorded"] = max(0, runs_of(reports) - len(records))
    return out


def _conditions_line(name: str, s: dict | None) -> str:
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
    sides = (("base", _reports(baseline)), ("patched", _reports(current)))
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
        lines.append(_conditions_line(name, c))
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
    numeric = r.get("kind") == "number" or all(_is_number(r[k]) for k in ("baseline", "current"))
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


def _label(check: str, subject: str) -> str:
    return check + (f" [{subject}]" if subject else "")


def _name(r: dict) -> str:
    return _label(r["check"], r["subject"])


COLUMNS = (("check", _name, "<"), ("figure", lambda r: r["label"], "<"), ("role", _role, "<"),
           ("base", lambda r: _side(r, "baseline"), ">"), ("patched", lambda r: _side(r, "current"), ">"),
           ("change [interval]", _change_cell, ">"), ("verdict", verdict, "<"), ("p", _p, ">"),
           ("detectable", _detectable, ">"), ("n", _n, ">"))


def legend(rows: list[dict]) -> list[str]:
    """What the columns and marks mean, and what the runs cannot say."""
    from nttrace.validate.statistics import ALPHA, POWER  # noqa: I001 - beside its use
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
    few = sorted({f"{s['base']['n']}/{s['current']['n']}" for r, s in stats
                  if s["verdict"].startswith("cannot be significant")})
    if few:
        out.append(f"not testable at {', '.join(few)} runs: no arrangement of so few runs reaches the row's alpha "
                   "(the exact test needs 4 a side at 0.05)")
    for r, s in stats:
        if s.get("detect"):
            need = s["detect"]["boots_needed"]
            out.append(f"to detect a {s['detect']['pct']:g}% change of {_name(r)} {r['label']}: "
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
