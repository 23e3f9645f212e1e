# SPDX-License-Identifier: Apache-2.0
"""The modelled memory traffic beside lab.ab's and lab.steps' instruction
figures: one traffic boot a kernel (lab.traffic.run, the plugin on, the
guest's memmap and demotion steps each in windows of their own), read with
lab.traffic.ab.per_page(), and rendered as a section of their reports
(markdown, HTML, JSON; the text report gets the markdown).

It models memory traffic, not time: bytes and lines moved between a
modelled LLC and the pmem device, never latency or bandwidth.

No statistics are run on these figures: the plugin counts, and the guest
runs under icount (one vCPU, guest time counts instructions), so a
kernel's device counts are its path's own. The memmap init's repeat
exactly; demotion's vary by a few pages' lines (which pages reclaim takes).
The section says so in words, from each boot's own in-boot repeat of the
step.
"""
from __future__ import annotations

import html
import json
import subprocess
from pathlib import Path
from typing import Callable

from lab.traffic import ab as tab
from lab.traffic import build as tbuild
from lab.traffic import header as theader
from lab.traffic import run as trun

WHAT = "memory traffic, not time"
# lab.ab's scenarios -> the traffic guest's window that models the same path
WINDOW_OF = {"memmap_fsdax": "rebind_fsdax", "memmap_devdax": "rebind_devdax", "demotion": "demotion"}
# the traffic guest's step (guest-traffic.sh) that opens each window
STEP_OF = {"rebind_fsdax": "memmap", "rebind_devdax": "memmap", "demotion": "demotion"}
# what a window's whole run is: one rebind of the namespace, one reclaim
RUN_OF = {"rebind_fsdax": "rebind", "rebind_devdax": "rebind", "demotion": "demotion run"}
SHORT = {"rebind_fsdax": "fsdax", "rebind_devdax": "devdax", "demotion": "demotion"}
# per_page()'s figures, in the order the tables give them
PER_PAGE = (("device_read_per_page", "device bytes read / {page}"),
            ("device_written_per_page", "device bytes written / {page}"),
            ("pmem_fills_per_page", "LLC fills from the device / {page}"),
            ("llc_fills_per_page", "LLC fills, all / {page}"),
            ("nt_lines_per_page", "NT full-line writes / {page}"))
PER_RUN = (("read", "device bytes read / {run}"), ("written", "device bytes written / {run}"))
PAGE_OF = {"rebind_fsdax": "initialised page", "rebind_devdax": "initialised page", "demotion": "demoted page"}
# Demotion's device counts in the recorded boots of base (two runs of
# lab.traffic.ab, tests/fixtures/recorded/traffic/ab-base-*): at most this
# many bytes a page apart (tests/unit/test_traffic_report.py holds it to them).
RECORDED_DEMOTION_SPREAD = 1.75
PAGE = 4096


# -- which windows, which steps --------------------------------------------------
def windows_for(scenarios: list[str]) -> list[str]:
    """The traffic windows that model these lab scenarios, in the guest's order."""
    want = {WINDOW_OF[s] for s in scenarios if s in WINDOW_OF}
    return [w for w in tab.STEP_LABELS if w in want]


def steps_for(windows: list[str]) -> tuple[str, ...]:
    """The traffic guest's steps that open these windows."""
    want = {STEP_OF[w] for w in windows}
    return tuple(s for s in trun.STEPS if s in want)


def unavailable() -> str | None:
    """Why the plugin cannot be built here, in one line, or None when it
    can (the cached qemu-plugin.h, fetched once when missing, and the
    system compiler: lab/traffic/header.py, build.py)."""
    try:
        tbuild.build()
    except (theader.HeaderError, tbuild.BuildError, OSError, subprocess.SubprocessError, ValueError) as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        return f"the traffic plugin cannot be built here: {first}"
    return None


# -- the figures -----------------------------------------------------------------
def per_run(summary: dict) -> dict[str, dict[str, int]]:
    """label -> the device's bytes read and written over the step's whole
    first window (one rebind, one demotion run): the window per_page() reads."""
    out = {}
    for w in summary["windows"]:
        if w["label"] in tab.STEP_LABELS and w["label"] not in out and w.get("pages"):
            out[w["label"]] = dict(w["pmem_device_bytes"])
    return out


def repeat_spread(summary: dict) -> dict[str, float]:
    """label -> how far apart (bytes a page, read or written, whichever is
    further) the boot's runs of the step counted the device: the guest runs
    each step twice a boot, so every boot measures its own spread."""
    runs: dict[str, list[tuple[float, float]]] = {}
    for w in summary["windows"]:
        if w["label"] in tab.STEP_LABELS and w.get("pages"):
            b = w["pmem_device_bytes"]
            runs.setdefault(w["label"], []).append((b["read"] / w["pages"], b["written"] / w["pages"]))
    out = {}
    for label, rs in runs.items():
        out[label] = round(max(max(r[i] for r in rs) - min(r[i] for r in rs) for i in (0, 1)), 2)
    return out


def figures(runs: dict[str, dict | str], windows: list[str]) -> dict:
    """The traffic section as data (the JSON's "traffic"): per kernel name,
    its per-page figures (lab.traffic.ab.per_page), its device bytes a
    whole run of each step, and its in-boot repeat's spread; or the one line
    its traffic boot failed with. `runs`: name -> the boot's summary
    (lab.traffic.run.summary) or that line."""
    kernels: dict[str, dict] = {}
    model = None
    for name, s in runs.items():
        if isinstance(s, str):
            kernels[name] = {"failed": s}
            continue
        model = model or s["model"]
        if s["model"] != model:
            kernels[name] = {"failed": f"its model differs from the first kernel's: {s['model']}"}
            continue
        pp, pr, sp = tab.per_page(s), per_run(s), repeat_spread(s)
        kernels[name] = {"per_page": {w: pp[w] for w in windows if w in pp},
                         "per_run": {w: pr[w] for w in windows if w in pr},
                         "repeat_spread_bytes_per_page": {w: sp[w] for w in windows if w in sp},
                         "qemu_cpu_s": s.get("qemu_cpu_s"), "host": s.get("host")}
    t = {"what": WHAT, "model": model, "windows": windows, "kernels": kernels}
    t["spread"] = spread_words(t)
    return t


def unavailable_record(why: str) -> dict:
    return {"what": WHAT, "unavailable": why}


def collect(kernels: dict[str, object], scenarios: list[str], out: Path, timeout: float = 1800,
            say: Callable[[str], None] = print) -> dict:
    """One traffic boot for each kernel (name -> lab kernel; one boot a
    name, so an A/A boots once), its summary in out/<name>/traffic-summary.json,
    and the section's data (figures()). A plugin that cannot be built, or
    scenarios no traffic window models, give unavailable_record()."""
    windows = windows_for(scenarios)
    if not windows:
        return unavailable_record(f"no traffic window models the scenarios {', '.join(scenarios)} "
                                  f"(memmap_fsdax, memmap_devdax and demotion have one)")
    why = unavailable()
    if why:
        return unavailable_record(why)
    steps = steps_for(windows)
    runs: dict[str, dict | str] = {}
    for i, (name, kernel) in enumerate(kernels.items(), 1):
        say(f"traffic boot {i} of {len(kernels)}: {name} under the traffic plugin, steps {', '.join(steps)} "
            "(counts, not times: no quiet host needed)")
        try:
            t = trun.run(out / name, kernel=kernel, steps=steps, timeout=timeout)
            s = trun.summary(t)
        except (trun.TrafficError, trun.lab.LabError, tbuild.BuildError, theader.HeaderError, OSError,
                subprocess.SubprocessError, ValueError) as exc:
            # the A/B stands without it: the row says why, in the error's first line
            runs[name] = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            say(f"traffic boot {i} of {len(kernels)}: {name} FAILED ({runs[name]})")
            continue
        (out / name / "traffic-summary.json").write_text(json.dumps(s, indent=1))
        runs[name] = s
        say(f"traffic boot {i} of {len(kernels)}: done in {t.elapsed_s:.0f} s")
    fig = figures(runs, windows)
    for name, s in runs.items():
        if not isinstance(s, str) and "failed" not in fig["kernels"][name]:
            fig["kernels"][name]["summary_file"] = str(out / name / "traffic-summary.json")
    return fig


def failed(t: dict) -> dict[str, str]:
    """name -> why, for each kernel whose traffic boot failed."""
    return {n: k["failed"] for n, k in t.get("kernels", {}).items() if "failed" in k}


# -- words -----------------------------------------------------------------------
def model_words(model: dict) -> str:
    """The model's parameters as lab/traffic records them with every result."""
    return (f"LLC {model['llc_bytes'] >> 20} MiB, {model['ways']} ways, {model['line']}-byte lines "
            f"({model['sets']} sets), {model['wc_buffers']} write-combining buffers; {model['policy']}")


def _bytes(v: float) -> str:
    return f"{v:g} byte" + ("" if v == 1 else "s")


def spread_words(t: dict) -> str:
    """Why no statistics are run, and each step's spread in words, from
    the boots' own in-boot repeats."""
    parts = []
    for w in t["windows"]:
        got = [k["repeat_spread_bytes_per_page"][w] for k in t["kernels"].values()
               if w in k.get("repeat_spread_bytes_per_page", {})]
        if not got:
            continue
        worst = max(got)
        if worst == 0:
            parts.append(f"{SHORT[w]}: zero (both runs of the step in each boot counted the same device bytes)")
        else:
            parts.append(f"{SHORT[w]}: the boot's two runs of the step differ by up to {_bytes(worst)} a page "
                         f"({100 * worst / PAGE:.2g}% of a page)")
    return ("Spread: no statistics are run on these counts. The plugin counts, it does not time, and the guest "
            "runs under icount (one vCPU, guest time counts instructions), so every boot of one kernel counts "
            "the same device traffic for the same path (the A/A of tests/lab/test_traffic.py proves it for the "
            "reference copies): one traffic boot a kernel is the figure. The memmap init's device counts repeat "
            "exactly, from boot to boot and within a boot; demotion's vary by a few pages' lines (which pages "
            f"reclaim takes, and a 256-line read some boots make): {RECORDED_DEMOTION_SPREAD:g} bytes a page at "
            f"most ({100 * RECORDED_DEMOTION_SPREAD / PAGE:.2g}% of a page) between the recorded boots of base. "
            "In these boots: " + ("; ".join(parts) if parts else "no step ran") + ".")


def _lead(t: dict) -> str:
    return (f"The QEMU traffic plugin's counts (lab/traffic/): it models {WHAT}: bytes and lines moved "
            f"between a modelled LLC and the pmem device, never latency or bandwidth. Model: "
            f"{model_words(t['model'])}.")


# -- the A/B's section -------------------------------------------------------------
def ab_rows(t: dict, names: list[str]) -> list[list[str]]:
    """The A/B's traffic table: [step, figure, one cell a kernel, B - A
    (two kernels only)], a row a figure."""
    names = list(dict.fromkeys(names))
    k = t["kernels"]
    rows = []
    for w in t["windows"]:
        step = tab.STEP_LABELS[w].split(" (")[0]      # the figure names the page or run it is per
        figs = [("pages", PAGE_OF[w] + "s", lambda kn: kn["per_page"][w]["pages"])]
        figs += [(key, name.format(page=PAGE_OF[w]), lambda kn, key=key: kn["per_page"][w][key])
                 for key, name in PER_PAGE]
        figs += [(key, name.format(run=RUN_OF[w]), lambda kn, key=key: kn["per_run"][w][key]) for key, name in PER_RUN]
        for key, name, get in figs:
            vals = []
            for n in names:
                kn = k.get(n, {})
                vals.append(get(kn) if w in kn.get("per_page", {}) else None)
            row = [step, name] + [("-" if v is None else _cell(v)) for v in vals]
            if len(names) == 2:
                row.append("" if key == "pages" or None in vals else _change(vals[1] - vals[0]))
            rows.append(row)
    return rows


def _cell(v: float | int) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v}"


def _change(d: float | int) -> str:
    """B - A, signed; '0' when the kernels count the same."""
    if isinstance(d, float):
        d = round(d, 2)
    if d == 0:
        return "0"
    return f"{d:+,}" if isinstance(d, int) else f"{d:+}"


def _failures(t: dict) -> list[str]:
    return [f"the traffic boot of {n} failed: {why}" for n, why in failed(t).items()]


def _not_measured(t: dict | None, lines: list[str]) -> str | None:
    """The section when there is no table to show: '' where traffic was
    left out, its heading and why where it could not be measured; None
    where there is a table."""
    if t is None:
        return ""
    if "unavailable" in t:
        return "\n".join(lines + [f"Not measured: {t['unavailable']}.", ""])
    if t["model"] is None:
        return "\n".join(lines + ["Not measured: " + "; ".join(_failures(t)) + ".", ""])
    return None


def ab_markdown(t: dict | None, names: list[str]) -> str:
    """The A/B's markdown section ('' when traffic was left out)."""
    lines = ["", "## Modelled memory traffic (not time)", ""]
    missing = _not_measured(t, lines)
    if missing is not None:
        return missing
    names = list(dict.fromkeys(names))
    lines += [_lead(t), "", t["spread"], ""]
    head = ["step", "figure", *names] + (["B - A"] if len(names) == 2 else [])
    lines += ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    lines += ["| " + " | ".join(r) + " |" for r in ab_rows(t, names)]
    lines += [""] + [f"{f[0].upper()}{f[1:]}." for f in _failures(t)] + ([""] if _failures(t) else [])
    return "\n".join(lines)


def ab_html(t: dict | None, names: list[str]) -> str:
    """The A/B's HTML section ('' when traffic was left out); the report's
    own stylesheet's classes (td.num, p.note)."""
    if t is None:
        return ""

    def e(text: str) -> str:     # element text only: quotes stay as they are
        return html.escape(text, quote=False)
    out = ["<h2>Modelled memory traffic (not time)</h2>"]
    if "unavailable" in t:
        return "\n".join(out + [f"<p class='note traffic'>Not measured: {e(t['unavailable'])}.</p>"]) + "\n"
    if t["model"] is None:
        return "\n".join(out + [f"<p class='note traffic'>Not measured: {e('; '.join(_failures(t)))}.</p>"]) + "\n"
    names = list(dict.fromkeys(names))
    head = ["step", "figure", *names] + (["B - A"] if len(names) == 2 else [])
    out += [f"<p class='note'>{e(_lead(t))}</p>", f"<p class='note'>{e(t['spread'])}</p>",
            "<table class='traffic'><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    for r in ab_rows(t, names):
        out.append("<tr>" + "".join(f"<td class='text'>{e(c)}</td>" for c in r[:2])
                   + "".join(f"<td class='num'>{e(c)}</td>" for c in r[2:]) + "</tr>")
    out.append("</table>")
    out += [f"<p class='warning'>{e(f[0].upper() + f[1:])}.</p>" for f in _failures(t)]
    return "\n".join(out) + "\n"


def add_to_ab(written: dict[str, Path], t: dict | None, names: list[str]) -> None:
    """The section into lab.ab's reports as nttrace validate wrote them:
    appended to the markdown and the text, before the plots in the HTML
    (after the figures), and under "traffic" in the JSON. None: left out."""
    if t is None:
        return
    md = ab_markdown(t, names)
    for fmt in ("markdown", "text"):
        if fmt in written:
            p = written[fmt]
            _replace(p, p.read_text().rstrip("\n") + "\n" + md)
    if "html" in written:
        p = written["html"]
        _replace(p, insert_html(p.read_text(), ab_html(t, names)))
    if "json" in written:
        p = written["json"]
        doc = json.loads(p.read_text())
        doc["traffic"] = t
        _replace(p, json.dumps(doc, indent=2) + "\n")


def insert_html(page: str, section: str) -> str:
    """The section after the figures: before the plots' heading, else
    before the closing script or body."""
    for mark in ("<h2>Plots</h2>", "<script>", "</body>"):
        i = page.find(mark)
        if i >= 0:
            return page[:i] + section + page[i:]
    return page + section


def _replace(p: Path, text: str) -> None:
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(p)


# -- the step table's section --------------------------------------------------------
def steps_rows(t: dict, labels: list[str]) -> tuple[list[str], list[list[str]]]:
    """The step table's traffic: a row a step (base first), per window its
    device bytes read and written a page, its LLC fills a page and its NT
    full-line writes a page; a step whose traffic boot failed says so."""
    head = ["step"]
    cols = [("device_read_per_page", "read B/page"), ("device_written_per_page", "written B/page"),
            ("llc_fills_per_page", "LLC fills/page"), ("nt_lines_per_page", "NT lines/page")]
    for w in t["windows"]:
        head += [f"{SHORT[w]} {name}" for _k, name in cols]
    rows = []
    for lab_ in labels:
        k = t["kernels"].get(lab_)
        if k is None:
            continue
        if "failed" in k:
            rows.append([lab_, f"the traffic boot failed: {k['failed']}"] + [""] * (len(head) - 2))
            continue
        row = [lab_]
        for w in t["windows"]:
            pp = k["per_page"].get(w)
            row += [_cell(pp[key]) if pp else "-" for key, _n in cols]
        rows.append(row)
    return head, rows


def steps_markdown(t: dict | None, labels: list[str]) -> str:
    """The step table's markdown section ('' when traffic was left out)."""
    lines = ["", "## Modelled memory traffic per step (not time)", ""]
    missing = _not_measured(t, lines)
    if missing is not None:
        return missing
    head, rows = steps_rows(t, labels)
    lines += [_lead(t), "", "One traffic boot a step's kernel. The steps that add non-temporal stores, which the "
              "instruction figures cannot attribute, show here in bytes: an NT store reads no line from the "
              "device before writing it, and fills no LLC line.", "", t["spread"], "",
              "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines + [""])
