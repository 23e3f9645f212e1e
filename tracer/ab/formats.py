# SPDX-License-Identifier: Apache-2.0
"""The A/B's whole output in each of its formats: what `nttrace validate
--baseline ... [--current ...] --format F` prints, and what `nttrace ab
report` and the lab's A/B (lab.ab) write, from the same functions, so the
three cannot differ.

    text, markdown  the header, the table and the legend (nttrace.ab.text)
    json            the current side's report with the comparison's rows,
                    header, legend, host conditions and run files added
    html            one self-contained page (nttrace.ab.html)

The rows are nttrace.ab.compare's, each computed before any output is
written, so an input error leaves no half-written report.
"""
from __future__ import annotations

import io
import json

from nttrace.ab import compare, text

# each format's file where a report is written whole (ab report, lab.ab)
FILES = {"text": "ab.txt", "markdown": "ab.md", "json": "ab.json", "html": "ab.html"}
FORMATS = tuple(FILES)


def render(fmt: str, rows: list[dict], base: list[dict], cur: list[dict], report: dict) -> str:
    """The A/B of rows (compare.compare(base, cur)) in fmt. `report` is the
    current side's report (compare.merge of its runs, or a run just
    taken): the JSON form is that report with the comparison added."""
    if fmt == "json":
        out = dict(report, baseline_comparison=rows, baseline_header=text.header(base, cur),
                   baseline_legend=text.legend(rows),
                   baseline_conditions={"baseline": compare.side_conditions(base),
                                        "current": compare.side_conditions(cur)},
                   baseline_runs={"baseline": [r.get("_source") for r in base],
                                  "current": [r.get("_source") for r in cur]})
        out.pop("_source", None)
        return json.dumps(out, indent=2, sort_keys=False) + "\n"
    if fmt == "html":
        from nttrace.ab import html     # matplotlib: only the page needs it
        return html.render(rows, base, cur)
    if fmt not in ("text", "markdown"):
        raise ValueError(f"no A/B format {fmt!r}: one of {', '.join(FORMATS)}")
    buf = io.StringIO()
    (text.print_markdown if fmt == "markdown" else text.print_text)(rows, base, cur, out=buf)
    return buf.getvalue()


def load_sides(base_paths: list[str], cur_paths: list[str]) -> tuple[list[dict], list[dict]]:
    """The two sides' saved runs (`validate --json` reports), each side
    checked to be one kernel on one kind of machine; UsageError naming the
    file and the flag (--baseline, --current) otherwise."""
    base = [compare.load_report(p, "--baseline") for p in base_paths]
    compare.check_side(base, "--baseline")
    cur = [compare.load_report(p, "--current") for p in cur_paths]
    compare.check_side(cur, "--current")
    return base, cur


def compare_files(base_paths: list[str], cur_paths: list[str], detect_pct: float | None = None) -> tuple:
    """(rows, base, cur, report): render()'s arguments for two sides of
    saved runs, compared once for as many formats as are rendered."""
    base, cur = load_sides(base_paths, cur_paths)
    rows = compare.compare(base, cur, strict=True, detect_pct=detect_pct)
    return rows, base, cur, compare.merge(cur)


def of_files(fmt: str, base_paths: list[str], cur_paths: list[str], detect_pct: float | None = None) -> str:
    """The A/B of two sides of saved runs in fmt: exactly what `nttrace
    validate --baseline BASE... --current CUR... [--detect PCT] --format fmt`
    prints."""
    return render(fmt, *compare_files(base_paths, cur_paths, detect_pct))
