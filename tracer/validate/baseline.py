"""`nttrace validate --baseline A1.json [A2.json ...] [--current B1.json ...]`:
base against patched, check by check, each side one run (a boot) or several.

Every report given on one side is one run of the checks it holds (the lab
writes a report per check per boot, so a boot's reports merge, and the same
check from several boots makes several runs). A side must be one kernel
(release and NT revision) measured on one kind of machine. Numeric figures
get the statistics of nttrace.validate.statistics (median and its 95%
interval per side, spread, the change with its interval, Mann-Whitney U
across runs); categorical ones (mode, copy routines) show every value the
side's runs had, with how many runs had it.

Each check's figures are the ones a reviewer asks for (FIGURES below):
memmap init time and ns/page for the first bind and the rebinds (min, median,
mean, max), the demotion mode and the NT share of demoted pages, the copy
routines that ran. Checks without a list compare every number of their
evidence. A check that ran once per namespace mode (fsdax, devdax) is
compared per mode. The header says where each report was measured, and
under emulation what that means for the figures.
"""
from __future__ import annotations

import json
import sys

from dataclasses import dataclass

from nttrace.errors import UsageError
from nttrace.kernel import machine
from nttrace.probes.contract import row_value
from nttrace.probes.copy import CopyProbe
from nttrace.validate import checks


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
    kernel = report.get("kernel") or {}
    return (report.get("kernel_release"), kernel.get("nt_revision"), (report.get("machine") or {}).get("kind"))


def check_side(reports: list[dict], flag: str) -> None:
    """One side is one kernel on one kind of machine: a release, NT revision
    or machine kind that differs between its reports is an input error."""
    first = reports[0]
    names = ("kernel release", "NT revision", "machine kind")
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
@dataclass
class Figure:
    metric: str
    label: str
    value: object                          # a number, a string or None
    samples: list[float] | None = None     # what the value summarises, within the run
    stat: str | None = None                # how: median, mean, min, max


def _rebinds(ev: dict, per_page: bool) -> list[float] | None:
    """The run's rebind latencies (the calls after the first bind), in ms or
    ns/page, where the report carries its calls."""
    calls = [c for c in ev.get("calls") or [] if isinstance(c, dict) and c.get("latency_ns")]
    if len(calls) < 3:
        return None
    if per_page:
        return [c["latency_ns"] / c["pages_initialised"] for c in calls[1:] if c.get("pages_initialised")] or None
    return [c["latency_ns"] / 1e6 for c in calls[1:]]


def _memmap(ev: dict) -> list[Figure]:
    out = [Figure("first_bind_ms", "first bind, ms", ev.get("first_bind_ms")),
           Figure("first_bind_ns_per_page", "first bind, ns/page", ev.get("first_bind_ns_per_page"))]
    n = row_value(ev, "rebind_ms.n")
    tag = f" (n={n})" if n else ""
    ms, ns = _rebinds(ev, False), _rebinds(ev, True)
    for stat in ("min", "median", "max"):
        out.append(Figure(f"rebind_ms.{stat}", f"rebinds{tag}, {stat} ms", row_value(ev, f"rebind_ms.{stat}"), ms, stat))
    out.append(Figure("rebind_avg_ms", f"rebinds{tag}, mean ms", ev.get("rebind_avg_ms"), ms, "mean"))
    for stat in ("min", "median", "max"):
        out.append(Figure(f"rebind_ns_per_page.{stat}", f"rebinds, {stat} ns/page",
                          row_value(ev, f"rebind_ns_per_page.{stat}"), ns, stat))
    paths = ev.get("template_path")
    if paths:
        out.append(Figure("template_path", "memmap path (page_ref_set)", ", ".join(paths)))
        out.append(Figure("page_ref_sets_per_page.median", "page_ref_set events per page",
                          row_value(ev, "page_ref_sets_per_page.median")))
    return out


def _demotion(ev: dict) -> list[Figure]:
    rows = ev.get("rows") or []
    pages = sum(r.get("succeeded", 0) for r in rows)
    nt_pages = sum(r.get("succeeded", 0) for r in rows if r.get("nt"))
    modes = ", ".join(sorted({r["mode"] for r in rows if "mode" in r})) or None
    copy = ev.get(CopyProbe.name) or {}
    copy_rows = copy.get("rows") or []
    routines = ", ".join(f"{r['routine']} {r['calls']}" for r in copy_rows if r.get("calls")) or None
    calls = sum(r.get("calls", 0) for r in rows)
    lat = [r.get("latency_ns", {}).get("mean") for r in rows if isinstance(r.get("latency_ns"), dict)]
    lat = [x for x in lat if x is not None]
    out = [Figure("mode", "demotion migrate mode", modes),
           Figure("nt_share_pct", "NT share of demoted pages, %", (100.0 * nt_pages / pages) if pages else None),
           Figure("probe_succeeded_pages", "pages demoted", ev.get("probe_succeeded_pages")),
           Figure("copy_routines", "copy routines (calls)", routines),
           Figure("migrate_pages_mean_us", "migrate_pages() mean, us",
                  (sum(lat) / len(lat) / 1000.0) if lat and calls else None)]
    untraceable = copy.get("untraceable")
    if untraceable:
        out.append(Figure("copy_untraceable", "copy routines not traceable", ", ".join(sorted(untraceable))))
    return out


def _nt_support(ev: dict) -> list[Figure]:
    return [Figure("nt_revision", "NT demotion revision", ev.get("nt_revision"))]


def _migrate_observed(ev: dict) -> list[Figure]:
    rows = [r for r in ev.get("rows") or [] if r.get("reason") == "MR_COMPACTION"]
    modes = ", ".join(sorted({f"{r['mode']}={r['mode_value']}" if r.get("mode_value") is not None else r["mode"]
                              for r in rows})) or None
    return [Figure("compaction_modes", "compaction migrate modes", modes),
            Figure("compaction_calls", "compaction calls", ev.get("compaction_calls"))]


FIGURES = {
    "kernel.memmap_latency": _memmap,
    "kernel.demotion_nt": _demotion,
    "kernel.nt_support": _nt_support,
    "kernel.migrate_observed": _migrate_observed,
}


def _numbers(evidence, prefix=""):
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            yield from _numbers(value, f"{prefix}{key}.")
    elif isinstance(evidence, (int, float)) and not isinstance(evidence, bool):
        yield prefix.rstrip("."), float(evidence)


def figures(check: dict) -> list[Figure]:
    """The figures of one check (one run)."""
    ev = check.get("evidence") or {}
    fn = FIGURES.get(check.get("id"))
    if fn is not None:
        return fn(ev)
    return [Figure(k, k, v) for k, v in _numbers(ev)]


def _subject(check: dict) -> str:
    """What a check measured when it runs more than once per kernel: the
    namespace mode for memmap (fsdax, devdax)."""
    ev = check.get("evidence") or {}
    return str(ev.get("mode") or "") if check.get("id") == "kernel.memmap_latency" else ""


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _runs_by_check(reports: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in reports:
        for c in r.get("checks", []):
            if isinstance(c, dict) and "id" in c:
                out.setdefault((c["id"], _subject(c)), []).append(c)
    return out


def _categories(values: list) -> str:
    """Every value a side's runs had; with how many runs where they differ."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return "; ".join(f"{v} ({k} of {len(values)} runs)" for v, k in counts.items())


def compare(baseline: dict | list[dict], current: dict | list[dict], strict: bool = False) -> list[dict]:
    """Per-check, per-figure rows of base against current, each side one
    report or a list of runs. A numeric figure's row carries its statistics
    ("stats"); "baseline"/"current" are the sides' medians across runs and
    "delta_pct" their change. With `strict` (two sets of saved runs), a
    check that only one side ran is an input error."""
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
    rows = []
    for key, cur_checks in cur_runs.items():
        base_checks = base_runs.get(key)
        if not base_checks:
            continue
        b_figs = [{f.metric: f for f in figures(c)} for c in base_checks]
        c_figs = [{f.metric: f for f in figures(c)} for c in cur_checks]
        for fig in figures(cur_checks[0]):
            if not all(fig.metric in f for f in b_figs):
                continue
            bf = [f[fig.metric] for f in b_figs if f[fig.metric].value is not None]
            cf = [f.get(fig.metric) for f in c_figs]
            cf = [f for f in cf if f is not None and f.value is not None]
            if not bf and not cf:
                continue
            row = {"check": key[0], "subject": key[1], "metric": fig.metric, "label": fig.label,
                   "runs": [len(bf), len(cf)],
                   "status": f"{base_checks[0].get('status')}->{cur_checks[0].get('status')}"}
            if bf and cf and all(_is_number(f.value) for f in bf + cf):
                sides = [statistics.Runs([float(f.value) for f in fs],
                                         [f.samples for f in fs] if all(f.samples for f in fs) else [],
                                         fig.stat) for fs in (bf, cf)]
                st = statistics.compare(*sides)
                row.update(kind="number", baseline=st["base"]["median"], current=st["current"]["median"],
                           delta_pct=st["change_pct"], stats=st,
                           samples={"baseline": [f.samples for f in bf], "current": [f.samples for f in cf]}
                           if all(f.samples for f in bf + cf) else None)
            else:
                row.update(kind="category", baseline=_categories([f.value for f in bf]) if bf else None,
                           current=_categories([f.value for f in cf]) if cf else None, delta_pct=None)
            rows.append(row)
    return rows


def measured_on(report: dict) -> dict:
    return report.get("machine") or {}


def _reports(side) -> list[dict]:
    return side if isinstance(side, list) else [side]


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
        lines.append(f"{name}: {release}, NT revision {kernel.get('nt_revision', '?')}, measured on {where}; "
                     f"{len(reports)} report{'s' if len(reports) != 1 else ''}")
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
        return f"{r['delta_pct']:+.1f}%"
    if r["baseline"] == r["current"]:
        return "same"
    if isinstance(r["current"], str) or isinstance(r["baseline"], str):
        return "changed"
    return "n/a"


def _ci(ci, pct: bool = False) -> str:
    if not ci:
        return ""
    return f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if pct else f" [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _mark(r: dict) -> str:
    st = r.get("stats")
    if not st or st.get("p") is None:
        return ""          # nothing was tested: no verdict to mark
    return "*" if st["significant"] else "~"


def _side(r: dict, side: str) -> str:
    st = r.get("stats")
    if not st:
        return _fmt(r[side])
    d = st["base" if side == "baseline" else "current"]
    cov = f" ±{d['cov_pct']:.1f}%" if d.get("cov_pct") is not None else ""
    return _fmt(d["median"]) + _ci(d.get("median_ci")) + cov


def _change_cell(r: dict) -> str:
    st = r.get("stats")
    if not st:
        return _change(r)
    if r["metric"].endswith("_pct"):
        return (_change(r) + " " + _mark(r)).rstrip()
    return (_change(r) + _ci(st.get("change_ci"), pct=True) + " " + _mark(r)).rstrip()


def _p(r: dict) -> str:
    st = r.get("stats")
    return "-" if not st or st.get("p") is None else (f"{st['p']:.3f}" if st["p"] >= 0.001 else f"{st['p']:.1e}")


def _n(r: dict) -> str:
    return f"{r['runs'][0]}/{r['runs'][1]}"


def _label(check: str, subject: str) -> str:
    return check + (f" [{subject}]" if subject else "")


def _name(r: dict) -> str:
    return _label(r["check"], r["subject"])


def legend(rows: list[dict]) -> list[str]:
    """What the marks mean, and what the runs cannot say."""
    out = []
    stats = [r["stats"] for r in rows if r.get("stats")]
    if not stats:
        return out
    from nttrace.validate.statistics import ALPHA, MIN_RUNS, WITHIN_ONE_BOOT
    out.append(f"medians across runs [95% bootstrap interval] ±CoV; change [95% interval]; "
               f"* significant, ~ not (Mann-Whitney U, p < {ALPHA}); n = runs base/patched")
    few = sorted({min(r["runs"]) for r in rows if r.get("stats") and 1 < min(r["runs"]) < MIN_RUNS})
    if few:
        out.append(f"too few runs to be significant (need >= {MIN_RUNS} a side): some figures have "
                   f"{', '.join(map(str, few))}; their p cannot reach {ALPHA}")
    if any(st.get("test") and WITHIN_ONE_BOOT in st["test"] for st in stats):
        out.append(f"one run a side: medians and means tested {WITHIN_ONE_BOOT} (samples against samples)")
    if any(st.get("p") is None for st in stats):
        out.append("no mark: not tested (a single value a side)")
    return out


def print_text(rows: list[dict], baseline, current, out=sys.stdout) -> None:
    for line in header(baseline, current):
        print(line, file=out)
    cols = [("check", _name, "<"), ("figure", lambda r: r["label"], "<"),
            ("base", lambda r: _side(r, "baseline"), ">"), ("patched", lambda r: _side(r, "current"), ">"),
            ("change", _change_cell, ">"), ("p", _p, ">"), ("n", _n, ">")]
    cells = [[fn(r) for _h, fn, _a in cols] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (h, _f, _a) in enumerate(cols)]
    print("  ".join(f"{h:{a}{w}}" for (h, _f, a), w in zip(cols, widths)).rstrip(), file=out)
    for c in cells:
        print("  ".join(f"{v:{a}{w}}" for v, (_h, _f, a), w in zip(c, cols, widths)).rstrip(), file=out)
    for line in legend(rows):
        print(line, file=out)


def print_markdown(rows: list[dict], baseline, current, out=sys.stdout) -> None:
    for line in header(baseline, current):
        print(f"_{line}_  ", file=out)
    print("", file=out)
    print("| check | figure | base | patched | change | p | n |", file=out)
    print("|---|---|--:|--:|--:|--:|--:|", file=out)
    for r in rows:
        cells = [_name(r), r["label"], _side(r, "baseline"), _side(r, "current"), _change_cell(r), _p(r), _n(r)]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |", file=out)
    lines = legend(rows)
    if lines:
        print("", file=out)
        for line in lines:
            print(f"_{line}_  ", file=out)
