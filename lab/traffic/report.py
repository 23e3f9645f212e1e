# SPDX-License-Identifier: Apache-2.0
"""The modelled memory traffic as figures and as a report: one traffic boot
a kernel (lab.traffic.run, the plugin on, the guest's memmap and demotion
steps each in windows of their own), read per page of each step and per
kernel function, and rendered as sections by nttrace.ab.formats, the one
renderer of every A/B output: a section of lab.ab's and lab.steps' reports
and the whole of lab.traffic.ab's (text, markdown, HTML, JSON), and the
plain-text review (review()).

It models memory traffic, not time: bytes and lines moved between a
modelled LLC and the pmem device, never latency or bandwidth. What the
model assumes, and so what its figures can show, is ASSUMES.

No statistics are run on these figures: the plugin counts, and the guest
runs under icount (one vCPU, guest time counts instructions), so a
kernel's device counts are its path's own. The memmap init's repeat
exactly; demotion's vary by a few pages' lines (which pages reclaim takes).
The section says so in words, from each boot's own in-boot repeat of the
step.

The modules above this one (lab.ab, lab.steps, lab.traffic.ab) import it;
it imports none of them.
"""
from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Callable

from lab.traffic import build as tbuild
from lab.traffic import header as theader
from lab.traffic import run as trun
from nttrace.ab.formats import Note, Section, Table

WHAT = "memory traffic, not time"
NO_RFO = "counts_fast_string_no_rfo"     # the no-RFO rule's counts (lab.traffic.run.RULES)
# The traffic guest's step windows and what each is per page of.
STEP_LABELS = {"rebind_fsdax": "memmap init, fsdax -M dev (per initialised page)",
               "rebind_devdax": "memmap init, devdax -a 2M (per initialised page)",
               "demotion": "demotion by memory.reclaim (per demoted page)"}
# lab.ab's scenarios -> the traffic guest's window that models the same path
WINDOW_OF = {"memmap_fsdax": "rebind_fsdax", "memmap_devdax": "rebind_devdax", "demotion": "demotion"}
# the traffic guest's step (guest-traffic.sh) that opens each window
STEP_OF = {"rebind_fsdax": "memmap", "rebind_devdax": "memmap", "demotion": "demotion"}
# what a window's whole run is: one rebind of the namespace, one reclaim
RUN_OF = {"rebind_fsdax": "rebind", "rebind_devdax": "rebind", "demotion": "demotion run"}
SHORT = {"rebind_fsdax": "fsdax", "rebind_devdax": "devdax", "demotion": "demotion"}
# per_page()'s figures under each rule, in the order the tables give them
RULE_FIGURES = (("device_read_per_page", "device bytes read / {page}"),
                ("device_written_per_page", "device bytes written / {page}"),
                ("pmem_fills_per_page", "LLC fills from the device / {page}"),
                ("llc_fills_per_page", "LLC fills, all / {page}"),
                ("nt_lines_per_page", "NT full-line writes / {page}"))
# the LLC's fills a page by who caused them (the path: the functions that moved
# a device line in the window; the rest: every other) and by target
CAUSES = (("path", "device", "LLC fills / {page}: the path's, from the device"),
          ("path", "dram", "LLC fills / {page}: the path's, from DRAM"),
          ("rest", "dram", "LLC fills / {page}: the rest's, from DRAM"))
PER_RUN = (("read", "device bytes read / {run}"), ("written", "device bytes written / {run}"))
PAGE_OF = {"rebind_fsdax": "initialised page", "rebind_devdax": "initialised page", "demotion": "demoted page"}
# Demotion's device bytes per demoted page in the recorded boots of base
# (two runs of lab.traffic.ab, tests/fixtures/recorded/traffic/ab-base-*),
# rounded to 0.01: at most this far apart (tests/unit/test_traffic_report.py
# holds it to them). Reclaim demotes a page or two more or fewer from boot to
# boot; per page the bytes agree.
RECORDED_DEMOTION_SPREAD = 0.0
PAGE = 4096
LINE = trun.LINE
# A window's function table in a report: every function that moved a device
# line, and this many more by their LLC fills from DRAM; the rest in one row.
DRAM_ONLY_SHOWN = 3
ASSUMES = ("What the model assumes, and so what it can show: an ordinary store that misses its line reads it "
           "first (write-allocate with a read for ownership); an NT store reads nothing and allocates nothing; a "
           "fast-string store (rep movs, rep stos) reads for ownership under one rule and not for a line it "
           "writes whole under the other (the SDM's fast-string operation), both shown where they differ. So "
           "base's device reads per page, and their fall under an NT series, follow from which instructions "
           "the path executes: the direction shows that the path executes NT stores, which the instruction "
           "figures showed already. What the model finds is what is left: the device lines the NT kernel still "
           "reads and writes, each named by the kernel function (and instruction class) that moved it.")


# -- which windows, which steps --------------------------------------------------
def windows_for(scenarios: list[str]) -> list[str]:
    """The traffic windows that model these lab scenarios, in the guest's order."""
    want = {WINDOW_OF[s] for s in scenarios if s in WINDOW_OF}
    return [w for w in STEP_LABELS if w in want]


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
def first_windows(summary: dict) -> dict[str, dict]:
    """label -> the first window of each step (the second is the in-boot repeat)."""
    out: dict[str, dict] = {}
    for w in summary["windows"]:
        if w["label"] in STEP_LABELS and w["label"] not in out and w.get("pages"):
            out[w["label"]] = w
    return out


def _lines(c: dict, *fields: str) -> int:
    return sum(c.get(f, 0) for f in fields)


def rule_figures(w: dict, rule: str = "counts") -> dict:
    """A window's per-page figures under a rule (RULE_FIGURES), and its LLC
    fills a page by cause and target (CAUSES) where it has a function table."""
    n, c = w["pages"], w["counts" if rule == "counts" else NO_RFO]
    pm, dr = c["pmem"], c["dram"]
    b = trun.device_bytes(pm)
    out = {"device_read_per_page": round(b["read"] / n, 1), "device_written_per_page": round(b["written"] / n, 1),
           "pmem_fills_per_page": round(_lines(pm, "fills_load", "fills_store") / n, 2),
           "llc_fills_per_page": round(_lines(pm, "fills_load", "fills_store") / n
                                       + _lines(dr, "fills_load", "fills_store") / n, 2),
           "nt_lines_per_page": round(pm["nt_line_writes"] / n, 2)}
    if w.get("functions") is not None:
        cause = {"path": {"device": 0, "dram": 0}, "rest": {"device": 0, "dram": 0}}
        path = {(r["function"], r.get("caller", "")) for r in w["functions"] if trun.device_lines(r)}
        for row in w["functions"]:
            rc = row.get(rule, row["counts"])
            who = cause["path" if (row["function"], row.get("caller", "")) in path else "rest"]
            who["device"] += _lines(rc.get("pmem", {}), "fills_load", "fills_store")
            who["dram"] += _lines(rc.get("dram", {}), "fills_load", "fills_store")
        out["llc_fills_by_cause_per_page"] = {k: {t: round(v / n, 3) for t, v in d.items()} for k, d in cause.items()}
    return out


def per_page(summary: dict) -> dict[str, dict]:
    """label -> the step's first window per page: its pages, its figures
    under the RFO rule, and where the boot counted both fast-string rules
    the no-RFO rule's figures under "fast_string_no_rfo"."""
    out = {}
    for label, w in first_windows(summary).items():
        out[label] = {"pages": w["pages"], **rule_figures(w)}
        if NO_RFO in w:
            out[label]["fast_string_no_rfo"] = rule_figures(w, NO_RFO)
    return out


def per_run(summary: dict) -> dict[str, dict[str, int]]:
    """label -> the device's bytes read and written over the step's whole
    first window (one rebind, one demotion run): the window per_page() reads."""
    return {label: dict(w["pmem_device_bytes"]) for label, w in first_windows(summary).items()}


def repeat_spread(summary: dict) -> dict[str, float]:
    """label -> how far apart (bytes a page, read or written, whichever is
    further) the boot's runs of the step counted the device: the guest runs
    each step twice a boot, so every boot measures its own spread."""
    runs: dict[str, list[tuple[float, float]]] = {}
    for w in summary["windows"]:
        if w["label"] in STEP_LABELS and w.get("pages"):
            b = w["pmem_device_bytes"]
            runs.setdefault(w["label"], []).append((b["read"] / w["pages"], b["written"] / w["pages"]))
    out = {}
    for label, rs in runs.items():
        out[label] = round(max(max(r[i] for r in rs) - min(r[i] for r in rs) for i in (0, 1)), 2)
    return out


def function_rows(w: dict, dram_only: int = DRAM_ONLY_SHOWN) -> list[dict]:
    """A step window's function table per page: each function (and class)
    that moved a device line, then the `dram_only` with most LLC fills from
    DRAM, then one row for the rest: device bytes read and written a page,
    device lines read and written, LLC fills a page from the device and
    from DRAM, under the RFO rule, and under "fast_string_no_rfo" the same
    where the no-RFO rule counts otherwise."""
    n = w["pages"]

    def figures(c: dict) -> dict:
        pm, dr = c.get("pmem", {}), c.get("dram", {})
        b = trun.device_bytes(pm)
        return {"device_read_per_page": round(b["read"] / n, 3), "device_written_per_page": round(b["written"] / n, 3),
                "device_lines_read": _lines(pm, "fills_load", "fills_store"),
                "device_lines_written": _lines(pm, "writebacks", "nt_line_writes"),
                "device_partial_bytes": pm.get("nt_partial_bytes", 0),
                "fills_device_per_page": round(_lines(pm, "fills_load", "fills_store") / n, 3),
                "fills_dram_per_page": round(_lines(dr, "fills_load", "fills_store") / n, 3)}
    rows = w["functions"]
    device = [r for r in rows if trun.device_lines(r)]
    others = [r for r in rows if not trun.device_lines(r)]
    others.sort(key=lambda r: (-_lines(r["counts"].get("dram", {}), "fills_load", "fills_store"), r["function"],
                               r.get("caller", "")))
    shown = [r for r in others if "folded" not in r][:dram_only]
    rest = [r for r in others if r not in shown]
    out = []
    for r in device + shown:
        row = {"function": r["function"], "caller": r.get("caller", ""), "class": r["class"], **figures(r["counts"])}
        if NO_RFO in r:
            row["fast_string_no_rfo"] = figures(r[NO_RFO])
        out.append(row)
    if rest:
        total: dict[str, dict] = {"counts": {"pmem": {}, "dram": {}}, NO_RFO: {"pmem": {}, "dram": {}}}
        for r in rest:
            for rule in ("counts", NO_RFO):
                for t, c in r.get(rule, r["counts"]).items():
                    for f, v in c.items():
                        total[rule][t][f] = total[rule][t].get(f, 0) + v
        count = sum(r.get("folded", 1) for r in rest)
        row = {"function": f"({count} more functions, no device line)", "caller": "", "class": "",
               **figures(total["counts"])}
        if total[NO_RFO] != total["counts"]:
            row["fast_string_no_rfo"] = figures(total[NO_RFO])
        out.append(row)
    return out


def figures(runs: dict[str, dict | str], windows: list[str]) -> dict:
    """The traffic section as data (the JSON's "traffic"): per kernel name,
    its per-page figures (per_page), its device bytes a whole run of each
    step, its in-boot repeat's spread and, where the boot named who moved
    the lines, each step's function table (function_rows); or the one line
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
        pp, pr, sp, fw = per_page(s), per_run(s), repeat_spread(s), first_windows(s)
        kernels[name] = {"per_page": {w: pp[w] for w in windows if w in pp},
                         "per_run": {w: pr[w] for w in windows if w in pr},
                         "repeat_spread_bytes_per_page": {w: sp[w] for w in windows if w in sp},
                         "qemu_cpu_s": s.get("qemu_cpu_s"), "host": s.get("host")}
        named = {w: function_rows(fw[w]) for w in windows if w in fw and fw[w].get("functions") is not None}
        if named:
            kernels[name]["functions"] = named
            kernels[name]["symbols"] = s.get("symbols")
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
        trun.write_summary(out / name, s)
        runs[name] = s
        say(f"traffic boot {i} of {len(kernels)}: done in {t.elapsed_s:.0f} s")
    fig = figures(runs, windows)
    for name, s in runs.items():
        if not isinstance(s, str) and "failed" not in fig["kernels"][name]:
            fig["kernels"][name]["summary_file"] = str(out / name / trun.SUMMARY)
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
            parts.append(f"{SHORT[w]}: zero (both runs of the step in each boot counted the same device bytes a "
                         "page, to 0.01 byte)")
        else:
            parts.append(f"{SHORT[w]}: the boot's two runs of the step differ by up to {_bytes(worst)} a page "
                         f"({100 * worst / PAGE:.2g}% of a page)")
    return ("Spread: no statistics are run on these counts. The plugin counts, it does not time, and the guest "
            "runs under icount (one vCPU, guest time counts instructions), so every boot of one kernel counts "
            "the same device traffic for the same path (the A/A of tests/lab/test_traffic.py proves it for the "
            "reference copies and the kernel's windows): one traffic boot a kernel is the figure. The memmap "
            "init's device counts repeat exactly, from boot to boot and within a boot; demotion's per demoted page "
            f"were at most {RECORDED_DEMOTION_SPREAD:g} bytes apart (rounded to 0.01) between the recorded boots "
            "of base, which demoted a page or two more or fewer. "
            "In these boots: " + ("; ".join(parts) if parts else "no step ran") + ".")


def lead(t: dict) -> str:
    return (f"The QEMU traffic plugin's counts (lab/traffic/): it models {WHAT}: bytes and lines moved "
            f"between a modelled LLC and the pmem device, never latency or bandwidth. Model: "
            f"{model_words(t['model'])}.")


CAUSE_WORDS = ("LLC fills by cause: the path is every function, called from its caller, that moved a device line "
               "in the window (all its instructions: an NT copy's loads too), the rest every other (the ndctl and "
               "reclaim processes, the kernel's own work in the window); each window "
               "starts with an empty LLC, so a fill is a line the step brought in, which a warm cache would have "
               "lost (the guest's warm windows measure that: tests/lab/test_traffic.py).")


# -- the tables --------------------------------------------------------------------
def _cell(v: float | int) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v}"


def _num(v: float) -> str:
    """A per-page figure of a function table: to 3 decimals, no trailing zeros."""
    return f"{round(v, 3):,.3f}".rstrip("0").rstrip(".") if v else "0"


def _change(d: float | int) -> str:
    """B - A, signed; '0' when the kernels count the same."""
    if isinstance(d, float):
        d = round(d, 2)
    if d == 0:
        return "0"
    return f"{d:+,}" if isinstance(d, int) else f"{d:+}"


def _differs(t: dict, names: list[str], w: str, key: str) -> bool:
    """Whether any kernel's figure differs under the no-RFO rule."""
    for n in names:
        pp = t["kernels"].get(n, {}).get("per_page", {}).get(w)
        if pp and "fast_string_no_rfo" in pp and pp["fast_string_no_rfo"][key] != pp[key]:
            return True
    return False


def ab_rows(t: dict, names: list[str]) -> list[list[str]]:
    """The per-page table: [step, figure, one cell a kernel, B - A (two
    kernels only)], a row a figure; a figure the no-RFO rule changes has a
    row under it too, and the LLC fills by cause where the boots named them."""
    names = list(dict.fromkeys(names))
    k = t["kernels"]
    rows = []
    for w in t["windows"]:
        step = STEP_LABELS[w].split(" (")[0]      # the figure names the page or run it is per
        figs = [("pages", PAGE_OF[w] + "s", lambda kn: kn["per_page"][w]["pages"])]
        for key, name in RULE_FIGURES:
            figs.append((key, name.format(page=PAGE_OF[w]), lambda kn, key=key: kn["per_page"][w][key]))
            if _differs(t, names, w, key):
                figs.append((key, name.format(page=PAGE_OF[w]) + ", fast-string no-RFO rule",
                             lambda kn, key=key: kn["per_page"][w].get("fast_string_no_rfo", {}).get(key)))
        if any("llc_fills_by_cause_per_page" in k.get(n, {}).get("per_page", {}).get(w, {}) for n in names):
            figs += [(f"{who} {target}", name.format(page=PAGE_OF[w]),
                      lambda kn, who=who, target=target:
                      kn["per_page"][w].get("llc_fills_by_cause_per_page", {}).get(who, {}).get(target))
                     for who, target, name in CAUSES]
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


FUNCTION_HEAD = ["kernel", "function", "called from", "class", "device read B/page", "device written B/page",
                 "device lines read", "device lines written", "LLC fills/page from the device", "from DRAM"]


def function_table(t: dict, names: list[str], w: str, who: str = "kernel") -> Table | None:
    """Who moved a step's lines: a row a function (and instruction class)
    of each kernel, its device bytes a page, its device lines, its LLC
    fills a page by target; the no-RFO rule's read and DRAM fills beside
    where any row counts otherwise. None when no boot named its functions."""
    rows = []
    per = [(n, r) for n in dict.fromkeys(names) for r in t["kernels"].get(n, {}).get("functions", {}).get(w, [])]
    if not per:
        return None
    both = any("fast_string_no_rfo" in r for _n, r in per)
    head = [who] + FUNCTION_HEAD[1:] + (["read B/page, no-RFO rule", "from DRAM, no-RFO rule"] if both else [])
    for n, r in per:
        lines_written = f"{r['device_lines_written']:,}" + (
            f" + {r['device_partial_bytes']:,} B" if r.get("device_partial_bytes") else "")
        row = [n, r["function"], r["caller"], r["class"], _num(r["device_read_per_page"]),
               _num(r["device_written_per_page"]),
               f"{r['device_lines_read']:,}", lines_written, _num(r["fills_device_per_page"]),
               _num(r["fills_dram_per_page"])]
        if both:
            alt = r.get("fast_string_no_rfo", r)
            row += [_num(alt["device_read_per_page"]), _num(alt["fills_dram_per_page"])]
        rows.append(row)
    return Table(head, rows, numeric_from=4,
                 caption=f"Who moved the lines: {STEP_LABELS[w]}, by kernel function, the function that called it "
                         "and instruction class.")


def _failures(t: dict) -> list[str]:
    return [f"the traffic boot of {n} failed: {why}" for n, why in failed(t).items()]


TITLE = "Modelled memory traffic (not time)"


def _not_measured(t: dict, title: str, key: str) -> Section | None:
    if "unavailable" in t:
        return Section(title, [Note(f"Not measured: {t['unavailable']}.")], key, t)
    if t["model"] is None:
        return Section(title, [Note("Not measured: " + "; ".join(_failures(t)) + ".")], key, t)
    return None


def ab_section(t: dict, names: list[str], title: str = TITLE) -> Section:
    """The A/B's section (lab.ab's, and lab.traffic.ab's whole report): the
    model, what it assumes, the spread, the per-page table with B - A, and
    who moved each step's lines; under "traffic" in the JSON."""
    missing = _not_measured(t, title, "traffic")
    if missing:
        return missing
    names = list(dict.fromkeys(names))
    head = ["step", "figure", *names] + (["B - A"] if len(names) == 2 else [])
    blocks = [Note(lead(t)), Note(ASSUMES), Note(t["spread"]), Table(head, ab_rows(t, names), numeric_from=2)]
    tables = [table for w in t["windows"] if (table := function_table(t, names, w))]
    blocks += tables
    if tables:
        blocks.append(Note(CAUSE_WORDS))
    blocks += [Note(f"{f[0].upper()}{f[1:]}.", warning=True) for f in _failures(t)]
    return Section(title, blocks, "traffic", t)


def steps_rows(t: dict, labels: list[str]) -> tuple[list[str], list[list[str]]]:
    """The step table's traffic: a row a step (base first), per window its
    device bytes read and written a page (read under the no-RFO rule too
    where a step counts otherwise), its LLC fills a page and its NT
    full-line writes a page; a step whose traffic boot failed says so."""
    head = ["step"]
    cols = []
    for w in t["windows"]:
        wc = [("device_read_per_page", "read B/page"), ("device_written_per_page", "written B/page"),
              ("llc_fills_per_page", "LLC fills/page"), ("nt_lines_per_page", "NT lines/page")]
        if _differs(t, labels, w, "device_read_per_page"):
            wc.insert(1, ("no_rfo device_read_per_page", "read B/page, no-RFO rule"))
        cols += [(w, key) for key, _n in wc]
        head += [f"{SHORT[w]} {name}" for _k, name in wc]
    rows = []
    for lab_ in labels:
        k = t["kernels"].get(lab_)
        if k is None:
            continue
        if "failed" in k:
            rows.append([lab_, f"the traffic boot failed: {k['failed']}"] + [""] * (len(head) - 2))
            continue
        row = [lab_]
        for w, key in cols:
            pp = k["per_page"].get(w)
            if pp and key.startswith("no_rfo "):
                pp = pp.get("fast_string_no_rfo", pp)
                key = key.split(" ", 1)[1]
            row.append(_cell(pp[key]) if pp else "-")
        rows.append(row)
    return head, rows


def steps_section(t: dict, labels: list[str]) -> Section:
    """lab.steps' section: the model, what it assumes, a row a step, and
    who moved each window's lines at each step; under "traffic" in the JSON."""
    title = "Modelled memory traffic per step (not time)"
    missing = _not_measured(t, title, "traffic")
    if missing:
        return missing
    head, rows = steps_rows(t, labels)
    blocks = [Note(lead(t)), Note(ASSUMES),
              Note("One traffic boot a step's kernel. The steps that add non-temporal stores, which the instruction "
                   "figures cannot attribute, show here in bytes; what each step leaves is named by function below."),
              Note(t["spread"]), Table(head, rows)]
    for w in t["windows"]:
        table = function_table(t, labels, w, who="step")
        if table:
            blocks.append(table)
    return Section(title, blocks, "traffic", t)


# -- the review ----------------------------------------------------------------------
# A row of a step's function table the review names: one that moved at least
# this share of the window's device lines read, or of its lines written; the
# others are summed in one line (an interrupt's share of a loop, a stray line).
REVIEW_SHARE = 0.005


def _named_rows(rows: list[dict]) -> tuple[list[dict], dict]:
    """The rows the review names, and the rest summed (lines read, written, rows)."""
    def moved(r):
        return r["device_lines_read"], r["device_lines_written"] + (1 if r["device_partial_bytes"] else 0)
    on = [r for r in rows if any(moved(r))]
    total = [sum(moved(r)[i] for r in on) for i in (0, 1)]
    named = [r for r in on if any(total[i] and moved(r)[i] >= REVIEW_SHARE * total[i] for i in (0, 1))]
    rest = [r for r in on if r not in named]
    return named, {"read": sum(r["device_lines_read"] for r in rest),
                   "written": sum(r["device_lines_written"] for r in rest), "rows": len(rest)}


def _row_words(r: dict, pages: int) -> str:
    by = f", called from {r['caller']}" if r["caller"] else ""
    parts = []
    if r["device_lines_read"]:
        parts.append(f"read {_num(r['device_read_per_page'])} B/page ({r['device_lines_read']:,} lines)")
        alt = r.get("fast_string_no_rfo")
        if alt and alt["device_lines_read"] != r["device_lines_read"]:
            parts[-1] += f", under the no-RFO rule {_num(alt['device_read_per_page'])} B/page " \
                         f"({alt['device_lines_read']:,} lines)"
    if r["device_lines_written"] or r["device_partial_bytes"]:
        partial = f" + {r['device_partial_bytes']:,} B in partial lines" if r["device_partial_bytes"] else ""
        parts.append(f"written {_num(r['device_written_per_page'])} B/page ({r['device_lines_written']:,} lines"
                     f"{partial})")
    return f"{r['function']} ({r['class']}{by}): " + ", ".join(parts)


def review(t: dict, names: list[str], width: int = 72) -> str:
    """The modelled traffic as plain text fit for a reply on a mailing list:
    what the model assumes, then per step and kernel the device bytes a
    page and who moves them, by function and caller (each that moved at
    least REVIEW_SHARE of the step's device lines read or written; the rest
    summed), each figure the fast-string rule changes under both rules, and
    the LLC fills a page by cause."""
    def para(text: str, indent: str = "") -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + ("  " if indent else ""),
                             break_on_hyphens=False) or [""]
    names = list(dict.fromkeys(names))
    if "unavailable" in t or t.get("model") is None:
        return "\n".join(para("Modelled memory traffic: not measured: "
                              + (t.get("unavailable") or "; ".join(_failures(t))) + ".")) + "\n"
    out = para(f"Modelled memory traffic, {' against '.join(names)}: the lab's QEMU TCG plugin (lab/traffic/), "
               f"{model_words(t['model'])}. It models {WHAT}.") + [""]
    out += para(ASSUMES) + [""]
    for w in t["windows"]:
        out.append(STEP_LABELS[w].replace(" (per ", ", per ").rstrip(")") + ":")
        for n in names:
            k = t["kernels"].get(n, {})
            if "failed" in k:
                out += para(f"{n}: the traffic boot failed: {k['failed']}", "  ")
                continue
            pp = k.get("per_page", {}).get(w)
            if not pp:
                continue
            alt = pp.get("fast_string_no_rfo")
            both = f" (under the no-RFO rule {alt['device_read_per_page']:g})" if alt and \
                alt["device_read_per_page"] != pp["device_read_per_page"] else ""
            out += para(f"{n}: {pp['pages']:,} pages; device read {pp['device_read_per_page']:g} B/page{both}, "
                        f"written {pp['device_written_per_page']:g} B/page; LLC fills {pp['llc_fills_per_page']:g}"
                        f"/page" + (_cause_words(pp["llc_fills_by_cause_per_page"])
                                    if "llc_fills_by_cause_per_page" in pp else "") + ".", "  ")
            rows = k.get("functions", {}).get(w)
            if rows is None:
                continue
            named, rest = _named_rows(rows)
            for r in named:
                out += para(_row_words(r, pp["pages"]), "    ")
            if rest["rows"]:
                out += para(f"and {rest['rows']} more (function, caller) rows: {rest['read']:,} lines read, "
                            f"{rest['written']:,} written", "    ")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _cause_words(c: dict) -> str:
    return (f" (the path's {c['path']['device'] + c['path']['dram']:g}: {c['path']['device']:g} from the device, "
            f"{c['path']['dram']:g} from DRAM; the rest's {c['rest']['dram']:g} from DRAM)")
