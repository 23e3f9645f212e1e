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

A report may carry sections beside the comparison (the lab's modelled
traffic): a Section is a title, notes and tables, and the data the JSON
holds under its key; each format renders it here, after the table in text
and markdown, between the figures and the plots in HTML, under its key in
JSON. document() renders sections alone, as a page of their own.
"""
from __future__ import annotations

import html as html_escape
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from nttrace.ab import compare, text

# each format's file where a report is written whole (ab report, lab.ab)
FILES = {"text": "ab.txt", "markdown": "ab.md", "json": "ab.json", "html": "ab.html"}
FORMATS = tuple(FILES)


@dataclass
class Note:
    """A paragraph of a section; a warning is marked as one."""
    text: str
    warning: bool = False


@dataclass
class Table:
    """A section's table: its head, its rows of cells (strings), and from
    which column on the cells are numbers (right-aligned)."""
    head: list[str]
    rows: list[list[str]]
    numeric_from: int = 1
    caption: str = ""


@dataclass
class Section:
    """A titled part of a report: notes and tables in order, and `data`,
    what the JSON form holds under `key`."""
    title: str
    blocks: list = field(default_factory=list)
    key: str = ""
    data: object = None


def _text_table(t: Table) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in t.rows if i < len(r)]) for i, h in enumerate(t.head)]

    def line(cells):
        return "  ".join(f"{c:{'>' if i >= t.numeric_from else '<'}{w}}"
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return ([t.caption] if t.caption else []) + [line(t.head)] + [line(r) for r in t.rows]


def _markdown_table(t: Table) -> list[str]:
    def cell(c: str) -> str:
        return c.replace("|", "\\|")
    return (([t.caption, ""] if t.caption else [])
            + ["| " + " | ".join(map(cell, t.head)) + " |",
               "|" + "|".join("--:" if i >= t.numeric_from else "---" for i in range(len(t.head))) + "|"]
            + ["| " + " | ".join(map(cell, r)) + " |" for r in t.rows])


def _html_table(t: Table) -> str:
    e = html_escape.escape
    out = ([f"<p class='note'>{e(t.caption, quote=False)}</p>"] if t.caption else []) + [
        "<table class='section'><tr>" + "".join(f"<th>{e(h, quote=False)}</th>" for h in t.head) + "</tr>"]
    for r in t.rows:
        out.append("<tr>" + "".join(f"<td class='{'num' if i >= t.numeric_from else 'text'}'>{e(c, quote=False)}</td>"
                                    for i, c in enumerate(r)) + "</tr>")
    return "\n".join(out + ["</table>"])


def section_text(fmt: str, s: Section) -> str:
    """One section in text, markdown or HTML."""
    if fmt == "html":
        e = html_escape.escape
        out = [f"<h2>{e(s.title, quote=False)}</h2>"]
        for b in s.blocks:
            out.append(_html_table(b) if isinstance(b, Table) else
                       f"<p class='{'warning' if b.warning else 'note'}'>{e(b.text, quote=False)}</p>")
        return "\n".join(out) + "\n"
    if fmt not in ("text", "markdown"):
        raise ValueError(f"no section format {fmt!r}: text, markdown or html")
    out = ["", f"## {s.title}" if fmt == "markdown" else s.title, ""]
    for b in s.blocks:
        if isinstance(b, Table):
            out += (_markdown_table if fmt == "markdown" else _text_table)(b) + [""]
        else:
            out += [b.text, ""]
    return "\n".join(out)


def _with_sections(fmt: str, page: str, sections: list[Section]) -> str:
    """An A/B already rendered in fmt with the sections added where each
    format has them: after the text and markdown, before the HTML's plots
    (else its script or the body's end), under their keys in the JSON."""
    if not sections:
        return page
    if fmt == "json":
        doc = json.loads(page)
        doc.update({s.key: s.data for s in sections})
        return json.dumps(doc, indent=2, sort_keys=False) + "\n"
    added = "".join(section_text(fmt, s) for s in sections)
    if fmt != "html":
        return page.rstrip("\n") + "\n" + added
    for mark in ("<h2>Plots</h2>", "<script>", "</body>"):
        i = page.find(mark)
        if i >= 0:
            return page[:i] + added + page[i:]
    return page + added


def document(fmt: str, title: str, sections: list[Section]) -> str:
    """Sections as a report of their own (lab.traffic.ab's), in fmt: the
    title and the sections; in JSON {"title", and each section's key: its data}."""
    if fmt == "json":
        return json.dumps({"title": title, **{s.key: s.data for s in sections}}, indent=2) + "\n"
    if fmt == "html":
        from nttrace.ab.html import STYLE
        e = html_escape.escape
        return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
                f"<title>{e(title, quote=False)}</title><style>{STYLE}</style></head>\n<body>\n"
                f"<h1>{e(title, quote=False)}</h1>\n" + "".join(section_text(fmt, s) for s in sections)
                + "</body></html>\n")
    if fmt not in ("text", "markdown"):
        raise ValueError(f"no A/B format {fmt!r}: one of {', '.join(FORMATS)}")
    head = f"# {title}" if fmt == "markdown" else title
    return head + "\n" + "".join(section_text(fmt, s) for s in sections)


def write_documents(out: Path, stem: str, title: str, sections: list[Section]) -> dict[str, Path]:
    """document() in every format, as out/<stem>.txt, .md, .json, .html
    (FILES' extensions); format -> path written."""
    written = {}
    for fmt, name in FILES.items():
        path = out / (stem + Path(name).suffix)
        path.write_text(document(fmt, title, sections))
        written[fmt] = path
    return written


def render(fmt: str, rows: list[dict], base: list[dict], cur: list[dict], report: dict,
           sections: list[Section] | None = None) -> str:
    """The A/B of rows (compare.compare(base, cur)) in fmt, with `sections`
    where the format has them (_with_sections). `report` is the current
    side's report (compare.merge of its runs, or a run just taken): the JSON
    form is that report with the comparison added."""
    return _with_sections(fmt, _render(fmt, rows, base, cur, report), sections or [])


def _render(fmt: str, rows: list[dict], base: list[dict], cur: list[dict], report: dict) -> str:
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
