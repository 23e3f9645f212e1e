# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate --baseline ... --current ... --format html`: the A/B as
one self-contained page that opens offline (styles inline, plots as inline
SVG from matplotlib, no external resource). At the top, where each side was
measured; then the table with its statistics; then the plots: for each
latency figure, every boot's samples of base and patched side by side (each
rebind a dot, the boot's median a bar), the demotion modes' share of pages
and the copy routines' calls per side. A small inline script counts the
plots and marks the page ready (tests/unit/test_ab_report.py opens it in a real
headless browser).

matplotlib runs with the Agg backend and fixed SVG ids and no date, so the
same reports give the same page.
"""
from __future__ import annotations

import html
import io
import statistics
from pathlib import Path

from nttrace.errors import CapabilityError
from nttrace.ab import text as ab_text
from nttrace.ab.compare import side_conditions
from nttrace.validate import evidence
from nttrace.validate.checks.kernel import DemotionEvidence

BASE_COLOR, CUR_COLOR = "#4c72b0", "#dd8452"


def _svg(fig) -> str:
    import matplotlib.pyplot as plt
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise CapabilityError("the HTML report's plots need matplotlib (Debian: apt install python3-matplotlib); "
                              "--format text, markdown and json need nothing more") from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "nttrace"
    matplotlib.rcParams["svg.fonttype"] = "none"     # text stays text: smaller, and readable in the DOM
    import matplotlib.pyplot as plt
    return plt


def _per_boot_plot(row: dict) -> str:
    """Each boot's samples (e.g. its rebinds) as dots, base boots then
    patched boots, the boot's own median as a bar."""
    plt = _pyplot()
    samples = row["samples"]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * (len(samples["baseline"]) + len(samples["current"])) + 2), 3.2))
    x, ticks, labels = 0, [], []
    for side, color, name in (("baseline", BASE_COLOR, "base"), ("current", CUR_COLOR, "patched")):
        for i, s in enumerate(samples[side]):
            jitter = [x + 0.3 * ((k * 0.618) % 1 - 0.5) for k in range(len(s))]
            ax.scatter(jitter, s, s=9, color=color, alpha=0.6, linewidths=0)
            med = statistics.median(s)          # the boot's summary, as the table takes it
            ax.hlines(med, x - 0.3, x + 0.3, color="black", linewidth=1.5)
            ticks.append(x)
            labels.append(f"{name}\n{i + 1}")
            x += 1
        x += 0.6
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel(row["label"].split(", ", 1)[-1])
    ax.set_title(f"{ab_text.row_name(row)}: {row['label']}, each boot", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def _per_run_plot(row: dict) -> str:
    """A figure with one value per run (the first bind): the runs as dots."""
    plt = _pyplot()
    st = row["stats"]
    fig, ax = plt.subplots(figsize=(4.0, 3.0))
    for i, (side, color) in enumerate((("base", BASE_COLOR), ("current", CUR_COLOR))):
        vals = st[side]["values"]
        ax.scatter([i + 0.2 * ((k * 0.618) % 1 - 0.5) for k in range(len(vals))], vals, color=color, s=18)
        ax.hlines(st[side]["median"], i - 0.25, i + 0.25, color="black", linewidth=1.5)
    ax.set_xticks([0, 1])
    ax.set_xticklabels(["base", "patched"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_title(f"{ab_text.row_name(row)}: {row['label']}, each run", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def _demotion(side_reports: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """Pages demoted by migrate mode, and copy routine calls, per side, summed over runs."""
    modes, routines = [{}, {}], [{}, {}]
    for i, reports in enumerate(side_reports):
        for r in reports:
            for c in r.get("checks", []):
                ev = evidence.of(c) if isinstance(c, dict) else None
                if not isinstance(ev, DemotionEvidence):
                    continue
                for mode, pages in ev.modes().items():
                    modes[i][mode] = modes[i].get(mode, 0) + pages
                for routine, calls in ev.routines().items():
                    routines[i][routine] = routines[i].get(routine, 0) + calls
    return modes, routines


def _bars(per_side: list[dict], title: str, share: bool) -> str | None:
    if not any(per_side):
        return None
    plt = _pyplot()
    keys = sorted({k for d in per_side for k in d})
    fig, ax = plt.subplots(figsize=(6.0, 0.45 * len(keys) * 2 + 1.2))
    y = 0
    for name, d, color in (("base", per_side[0], BASE_COLOR), ("patched", per_side[1], CUR_COLOR)):
        total = sum(d.values()) or 1
        for k in keys:
            v = d.get(k, 0)
            ax.barh(y, 100.0 * v / total if share else v, color=color)
            ax.text(0, y, f" {name}: {k}", va="center", fontsize=7)
            y += 1
        y += 0.5
    ax.set_yticks([])
    ax.set_xlabel("share of demoted pages, %" if share else "calls")
    ax.set_title(title, fontsize=9)
    return _svg(fig)


def _environment(side_reports: list[list[dict]]) -> str:
    out = ["<table class='env'><tr><th></th><th>kernel</th><th>NT revision</th><th>measured on</th><th>CPU</th>"
           "<th>host conditions</th><th>reports</th></tr>"]
    notes = []
    for name, reports in (("base", side_reports[0]), ("patched", side_reports[1])):
        r = reports[0]
        m = r.get("machine") or {}
        chosen = {k: v for k, v in (m.get("mitigations") or {}).items() if v != "Not affected"}
        if chosen:
            notes.append(f"<p class='note mitigations'>{name}'s CPU mitigations: " +
                         "; ".join(f"{html.escape(k)}: {html.escape(v)}" for k, v in chosen.items()) + "</p>")
        where = m.get("kind", "unrecorded") + (f" ({m['hypervisor']})" if m.get("hypervisor") else "")
        files = ", ".join(html.escape("/".join(Path(str(x.get("_source", "?"))).parts[-2:])) for x in reports)
        out.append(f"<tr><th>{name}</th><td>{html.escape(str(r.get('kernel_release') or '?'))}</td>"
                   f"<td>{html.escape(str((r.get('kernel') or {}).get('nt_revision', '?')))}</td>"
                   f"<td>{html.escape(where)}</td><td>{html.escape(str(m.get('cpu') or '?'))}</td>"
                   f"<td class='conditions'>{html.escape(ab_text.conditions_line(name, side_conditions(reports)).split(': ', 1)[1])}</td>"
                   f"<td>{len(reports)}: <span class='files'>{files}</span></td></tr>")
    out.append("</table>")
    return "\n".join(out + notes)


STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.sig td.change { font-weight: bold; }
.files { color: #666; font-size: 0.85em; }
.note { color: #444; font-size: 0.9em; }
.warning { color: #a40000; font-size: 0.9em; font-weight: bold; }
figure { display: inline-block; margin: 0.5em 1em 0.5em 0; vertical-align: top; }
"""

SCRIPT = """
(function () {
  var plots = document.querySelectorAll('figure.plot svg');
  var expected = parseInt(document.body.getAttribute('data-plots'), 10);
  document.body.setAttribute('data-rendered-plots', String(plots.length));
  document.body.setAttribute('data-ready', plots.length === expected ? 'yes' : 'missing-plots');
})();
"""


def render(rows: list[dict], baseline: list[dict], current: list[dict]) -> str:
    sides = [baseline, current]
    head = ab_text.header(baseline, current)
    def kernel(reports):
        r = reports[0]
        return f"{r.get('kernel_release') or '?'} (NT {(r.get('kernel') or {}).get('nt_revision', '?')})"
    parts = [f"<h1>nttrace A/B: {html.escape(kernel(baseline))} against {html.escape(kernel(current))}</h1>",
             "<h2>Where it was measured</h2>", _environment(sides)]
    # the header's lines after the sides' own: conditions, warnings, notes
    parts += [f"<p class='{'warning' if line.startswith('warning') else 'note'}'>{html.escape(line)}</p>"
              for line in head[2:] if not line.startswith(("base:", "patched:"))]
    parts.append("<h2>Figures</h2><table class='figures'><tr>"
                 + "".join(f"<th>{html.escape(h)}</th>" for h, _f, _a in ab_text.COLUMNS) + "</tr>")
    for r in rows:
        sig = " class='sig'" if r.get("stats") and r["stats"]["significant"] else ""
        parts.append(f"<tr{sig}>" + "".join(
            f"<td class='{'num' if a == '>' else 'text'} {h.split()[0]}'>{html.escape(fn(r))}</td>"
            for h, fn, a in ab_text.COLUMNS) + "</tr>")
    parts.append("</table>")
    parts += [f"<p class='note'>{html.escape(line)}</p>" for line in ab_text.legend(rows)]

    plots = []
    for r in rows:
        if r.get("kind") != "number":
            continue
        if r.get("samples"):
            if r["metric"].endswith(".median"):    # min/median/max/mean summarise the same samples: one plot
                plots.append((f"{ab_text.row_name(r)} {r['label']}", _per_boot_plot(r)))
        elif r["metric"].endswith(("_ms", "_us")):
            plots.append((f"{ab_text.row_name(r)} {r['label']}", _per_run_plot(r)))
    modes, routines = _demotion(sides)
    for title, svg in (("demotion: migrate modes' share of demoted pages", _bars(modes, "demotion migrate modes", True)),
                       ("demotion: copy routine calls (all runs)", _bars(routines, "copy routines, calls", False))):
        if svg:
            plots.append((title, svg))
    parts.append("<h2>Plots</h2>")
    for title, svg in plots:
        parts.append(f"<figure class='plot'>{svg}<figcaption>{html.escape(title)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>nttrace A/B</title>"
            f"<style>{STYLE}</style></head>\n<body data-plots='{len(plots)}'>\n" + "\n".join(parts)
            + f"\n<script>{SCRIPT}</script>\n</body></html>\n")
