# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate --baseline A1.json [A2.json ...] [--current B1.json ...]`:
base against patched, check by check, each side one run (a boot) or several.

Every report given on one side is one run of the checks it holds (the lab
writes a report per check per boot, so a boot's reports merge, and the same
check from several boots makes several runs). A side must be one kernel
(release, NT revision, build) measured on one kind of machine. A check's
figures come from its typed evidence (nttrace.validate.evidence), each with
its role: the scenario's primary figure is tested at alpha, the secondary
ones with a Bonferroni correction, the rest described; the statistics are
nttrace.ab.statistics' (runs as the unit, exact rank test and the
interval inverted from it, the smallest detectable change). Categorical
figures (mode, copy routines) show every value the side's runs had.

This file computes; nttrace.ab.text puts the rows into words (text,
markdown), nttrace.ab.html into a page, and nttrace.ab.formats gives the
whole output in each format.
"""
from __future__ import annotations

import json
import math

from nttrace.errors import UsageError
from nttrace.kernel import conditions
from nttrace.validate import checks, evidence


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


def refuse_a_run_on_both_sides(base: list[dict], cur: list[dict]) -> None:
    """An A/B compares runs (boots) of one kernel with runs of the other: a
    run on both sides would be compared with itself, and every figure of it
    would show no change, with a verdict that reads as evidence. A report
    of one side that holds the boot of a report of the other (the same
    boot_id) or is the same report (equal but for the file it was read
    from) is an input error naming both; refused, not marked, since no part
    of such an A/B is the comparison it claims to be. A current side of
    {"boot_id": ...} alone stands for the run validate is about to make."""
    def content(r: dict) -> dict:
        return {k: v for k, v in r.items() if k != "_source"}

    for b in base:
        for c in cur:
            same_boot = b.get("boot_id") is not None and b.get("boot_id") == c.get("boot_id")
            if same_boot and "_source" not in c:       # the run about to be made
                raise UsageError(f"--baseline {b.get('_source', '?')} was recorded in this boot ({b['boot_id']}): "
                                 "an A/B compares different boots of the two kernels (boot the other one first)")
            if same_boot or content(b) == content(c):
                what = f"the same boot ({b['boot_id']})" if same_boot else "the same report"
                raise UsageError(f"--baseline {b.get('_source', '?')} and --current {c.get('_source', '?')} "
                                 f"are {what}: an A/B compares different boots of the two kernels")


def merge(reports: list[dict]) -> dict:
    """One report holding the checks of several runs on the same kernel (the
    lab times fsdax and devdax in separate runs)."""
    out = dict(reports[0])
    out["checks"] = [c for r in reports for c in r.get("checks", [])]
    out["summary"] = checks.tally(out["checks"])
    return out


# -- figures -------------------------------------------------------------------
def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def label(check: str, subject: str) -> str:
    """A check as the report names it: its id, and its subject where it has one."""
    return check + (f" [{subject}]" if subject else "")


def _runs_by_check(reports: list[dict]) -> dict[tuple[str, str], list]:
    """{(check id, subject): [(status, typed evidence, report file) of each
    run]}; the subject is what a check measured when it runs more than once
    per kernel (a memmap run's namespace mode: fsdax, devdax)."""
    out: dict[tuple[str, str], list] = {}
    for r in reports:
        for c in r.get("checks", []):
            if isinstance(c, dict) and "id" in c:
                ev = evidence.of(c)
                out.setdefault((c["id"], ev.subject()), []).append((c.get("status"), ev, r.get("_source")))
    return out


def _figures(key: tuple[str, str], runs: list, flag: str) -> list[dict]:
    """Each run's figures by metric. A number that is not finite (Python's
    JSON reader takes Infinity and NaN) is an input error naming the file
    and the figure: no statistic means anything of it."""
    out = []
    for _status, ev, source in runs:
        figs = {f.metric: f for f in ev.figures()}
        for f in figs.values():
            bad = [v for v in [f.value, *(f.samples or [])] if is_number(v) and not math.isfinite(v)]
            if bad:
                what = "is" if is_number(f.value) and not math.isfinite(f.value) else "has a sample of"
                raise UsageError(f"{flag} {source or 'run'}: {label(*key)} {f.label} {what} {json.dumps(bad[0])}: "
                                 "a run's figures must be finite numbers")
        out.append(figs)
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
    from nttrace.ab import statistics
    refuse_a_run_on_both_sides(reports_of(baseline), reports_of(current))
    base_runs = _runs_by_check(baseline if isinstance(baseline, list) else [baseline])
    cur_runs = _runs_by_check(current if isinstance(current, list) else [current])
    if strict:
        for have, lack, runs, other in (("--baseline", "--current", base_runs, cur_runs),
                                        ("--current", "--baseline", cur_runs, base_runs)):
            missing = [k for k in runs if k not in other]
            if missing:
                raise UsageError(f"{lack} has no run of {label(*missing[0])} (the {have} side has "
                                 f"{len(runs[missing[0]])}); give both sides the same checks")
    rows, sides_of = [], []
    for key, cur_checks in cur_runs.items():
        base_checks = base_runs.get(key)
        if not base_checks:
            continue
        b_figs = _figures(key, base_checks, "--baseline")
        c_figs = _figures(key, cur_checks, "--current")
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
            if bf and cf and all(is_number(f.value) for f in bf + cf):
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


def reports_of(side) -> list[dict]:
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
