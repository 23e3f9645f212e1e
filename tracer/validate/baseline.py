"""`nttrace validate --baseline A.json [--current B.json]`: base against
patched, check by check.

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

from nttrace.errors import UsageError
from nttrace.kernel import machine
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
    return data


def merge(reports: list[dict]) -> dict:
    """One report holding the checks of several runs on the same kernel (the
    lab times fsdax and devdax in separate runs)."""
    out = dict(reports[0])
    out["checks"] = [c for r in reports for c in r.get("checks", [])]
    out["summary"] = checks.tally(out["checks"])
    return out


# -- figures -------------------------------------------------------------------
def _get(ev: dict, path: str):
    for part in path.split("."):
        if not isinstance(ev, dict) or part not in ev:
            return None
        ev = ev[part]
    return ev


def _memmap(ev: dict) -> list[tuple[str, str, object]]:
    out = [("first_bind_ms", "first bind, ms", ev.get("first_bind_ms")),
           ("first_bind_ns_per_page", "first bind, ns/page", ev.get("first_bind_ns_per_page"))]
    n = _get(ev, "rebind_ms.n")
    tag = f" (n={n})" if n else ""
    for stat in ("min", "median", "max"):
        out.append((f"rebind_ms.{stat}", f"rebinds{tag}, {stat} ms", _get(ev, f"rebind_ms.{stat}")))
    out.append(("rebind_avg_ms", f"rebinds{tag}, mean ms", ev.get("rebind_avg_ms")))
    for stat in ("min", "median", "max"):
        out.append((f"rebind_ns_per_page.{stat}", f"rebinds, {stat} ns/page", _get(ev, f"rebind_ns_per_page.{stat}")))
    paths = ev.get("template_path")
    if paths:
        out.append(("template_path", "memmap path (page_ref_set)", ", ".join(paths)))
        out.append(("page_ref_sets_per_page.median", "page_ref_set events per page",
                    _get(ev, "page_ref_sets_per_page.median")))
    return out


def _demotion(ev: dict) -> list[tuple[str, str, object]]:
    rows = ev.get("rows") or []
    pages = sum(r.get("succeeded", 0) for r in rows)
    nt_pages = sum(r.get("succeeded", 0) for r in rows if r.get("nt"))
    modes = ", ".join(sorted({r["mode"] for r in rows if "mode" in r})) or None
    copy_rows = (_get(ev, "copy.rows") or [])
    routines = ", ".join(f"{r['routine']} {r['calls']}" for r in copy_rows if r.get("calls")) or None
    calls = sum(r.get("calls", 0) for r in rows)
    lat = [r.get("latency_ns", {}).get("mean") for r in rows if isinstance(r.get("latency_ns"), dict)]
    lat = [x for x in lat if x is not None]
    out = [("mode", "demotion migrate mode", modes),
           ("nt_share_pct", "NT share of demoted pages, %", (100.0 * nt_pages / pages) if pages else None),
           ("probe_succeeded_pages", "pages demoted", ev.get("probe_succeeded_pages")),
           ("copy_routines", "copy routines (calls)", routines),
           ("migrate_pages_mean_us", "migrate_pages() mean, us",
            (sum(lat) / len(lat) / 1000.0) if lat and calls else None)]
    untraceable = _get(ev, "copy.untraceable")
    if untraceable:
        out.append(("copy_untraceable", "copy routines not traceable", ", ".join(sorted(untraceable))))
    return out


def _nt_support(ev: dict) -> list[tuple[str, str, object]]:
    return [("nt_revision", "NT demotion revision", ev.get("nt_revision"))]


def _migrate_observed(ev: dict) -> list[tuple[str, str, object]]:
    rows = [r for r in ev.get("rows") or [] if r.get("reason") == "MR_COMPACTION"]
    modes = ", ".join(sorted({f"{r['mode']}={r['mode_value']}" if r.get("mode_value") is not None else r["mode"]
                              for r in rows})) or None
    return [("compaction_modes", "compaction migrate modes", modes),
            ("compaction_calls", "compaction calls", ev.get("compaction_calls"))]


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


def figures(check: dict) -> list[tuple[str, str, object]]:
    """(metric, label, value) of one check; value a number, a string or None."""
    ev = check.get("evidence") or {}
    fn = FIGURES.get(check.get("id"))
    if fn is not None:
        return fn(ev)
    return [(k, k, v) for k, v in _numbers(ev)]


def _subject(check: dict) -> str:
    """What a check measured when it runs more than once per kernel: the
    namespace mode for memmap (fsdax, devdax)."""
    ev = check.get("evidence") or {}
    return str(ev.get("mode") or "") if check.get("id") == "kernel.memmap_latency" else ""


def compare(baseline: dict, current: dict) -> list[dict]:
    """Per-check, per-figure rows: baseline, current and the change (percent
    for numbers, None where either side is missing or not a number)."""
    base = {(c["id"], _subject(c)): c for c in baseline["checks"] if isinstance(c, dict) and "id" in c}
    rows = []
    for c in current["checks"]:
        if not isinstance(c, dict) or "id" not in c:
            continue
        b = base.get((c["id"], _subject(c)))
        if b is None:
            continue
        old = {m: (label, v) for m, label, v in figures(b)}
        for metric, label, new_value in figures(c):
            if metric not in old:
                continue
            old_value = old[metric][1]
            if old_value is None and new_value is None:
                continue
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old_value, new_value))
            pct = (100.0 * (new_value - old_value) / abs(old_value)) if numeric and old_value else None
            rows.append({"check": c["id"], "subject": _subject(c), "metric": metric, "label": label,
                         "baseline": old_value, "current": new_value, "delta_pct": pct,
                         "status": f"{b.get('status')}->{c.get('status')}"})
    return rows


def measured_on(report: dict) -> dict:
    return report.get("machine") or {}


def header(baseline: dict, current: dict) -> list[str]:
    lines = []
    for name, r in (("base", baseline), ("patched", current)):
        m = measured_on(r)
        where = m.get("kind", "unrecorded")
        if m.get("hypervisor"):
            where += f" ({m['hypervisor']})"
        kernel = r.get("kernel", {}) or {}
        release = r.get("kernel_release") or "kernel release unrecorded"
        lines.append(f"{name}: {release}, NT revision {kernel.get('nt_revision', '?')}, measured on {where}")
    kinds = {measured_on(r).get("kind") for r in (baseline, current)}
    for kind in ("emulated", "vm"):
        if kind in kinds:
            lines.append("note: " + machine.caveat(kind))
            break
    return lines


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _change(r: dict) -> str:
    numeric = all(isinstance(r[k], (int, float)) and not isinstance(r[k], bool) for k in ("baseline", "current"))
    if numeric and r["metric"].endswith("_pct"):     # a share: the change in points
        return f"{r['current'] - r['baseline']:+.1f} pts"
    if r["delta_pct"] is not None:
        return f"{r['delta_pct']:+.1f}%"
    if r["baseline"] == r["current"]:
        return "same"
    if isinstance(r["current"], str) or isinstance(r["baseline"], str):
        return "changed"
    return "n/a"


def _name(r: dict) -> str:
    return r["check"] + (f" [{r['subject']}]" if r["subject"] else "")


def print_text(rows: list[dict], baseline: dict, current: dict, out=sys.stdout) -> None:
    for line in header(baseline, current):
        print(line, file=out)
    cw = max([len(_name(r)) for r in rows] + [5])
    lw = max([len(r["label"]) for r in rows] + [6])
    vw = max([len(_fmt(r[k])) for r in rows for k in ("baseline", "current")] + [8])
    print(f"{'check':<{cw}}  {'figure':<{lw}}  {'base':>{vw}}  {'patched':>{vw}}  {'change':>8}", file=out)
    for r in rows:
        print(f"{_name(r):<{cw}}  {r['label']:<{lw}}  {_fmt(r['baseline']):>{vw}}  {_fmt(r['current']):>{vw}}  "
              f"{_change(r):>8}", file=out)


def print_markdown(rows: list[dict], baseline: dict, current: dict, out=sys.stdout) -> None:
    for line in header(baseline, current):
        print(f"_{line}_  ", file=out)
    print("", file=out)
    print("| check | figure | base | patched | change |", file=out)
    print("|---|---|--:|--:|--:|", file=out)
    for r in rows:
        cells = [_name(r), r["label"], _fmt(r["baseline"]), _fmt(r["current"]), _change(r)]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |", file=out)
