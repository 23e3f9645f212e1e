# SPDX-License-Identifier: Apache-2.0
"""The modelled traffic in lab.traffic.ab's, lab.ab's and lab.steps'
reports (lab/traffic/report.py, rendered by nttrace.ab.formats), without
QEMU: the recorded traffic boots of lab.traffic.ab (base against nt-v3 and
nt-v2, tests/fixtures/recorded/traffic/ab-base-*, the same files as
benchmarks/lab-traffic-ab-*) through the section's rendering, every cell
held to the recorded JSON, who moved the device's lines by function and
the review for the list; and lab.ab's four reports, as nttrace validate
writes them from the recorded A/B boots, with and without the section."""
import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))
from lab.traffic import header as theader  # noqa: E402
from lab.traffic import report  # noqa: E402
from lab.traffic import run as trun  # noqa: E402
from nttrace.ab import formats  # noqa: E402

RECORDED = REPO / "tests" / "fixtures" / "recorded" / "traffic"
PAIRS = {"nt-v3": RECORDED / "ab-base-nt-v3", "nt-v2": RECORDED / "ab-base-nt-v2"}
AB_SCENARIOS = ["memmap_fsdax", "memmap_devdax", "demotion"]


def summaries(kernel: str) -> dict[str, dict]:
    d = PAIRS[kernel]
    return {v: json.loads((d / f"{v}.json").read_text()) for v in ("base", kernel)}


def recorded_table(kernel: str) -> dict:
    """lab.traffic.ab's traffic-ab.json: the section's data under "traffic"."""
    return json.loads((PAIRS[kernel] / "traffic-ab.json").read_text())["traffic"]


def first_window(summary: dict, label: str) -> dict:
    return next(w for w in summary["windows"] if w["label"] == label and w.get("pages"))


def md_rows(md: str) -> list[list[str]]:
    """The cells of the first markdown table's body rows (the per-page table)."""
    rows, started = [], False
    for ln in md.splitlines():
        if ln.startswith("| "):
            started = True
            rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
        elif started and not ln.startswith("|"):
            break
    return rows[1:]


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


class Tables(HTMLParser):
    """The cells of every row of the first <table class='section'> (the per-page table)."""
    def __init__(self):
        super().__init__()
        self.rows, self.inside, self.cell = [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.inside = dict(attrs).get("class") == "section" and not self.rows
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def html_rows(page: str) -> list[list[str]]:
    p = Tables()
    p.feed(page)
    return p.rows[1:]


def check_ab_table(rows: list[list[str]], kernel: str) -> int:
    """Every figure of the per-page table against the recorded run: the
    per-page figures are traffic-ab.json's (lab.traffic.ab's own figures of
    the same boots), under the no-RFO rule where the row says so, the LLC
    fills by cause from the same, the per-run bytes the first window's in
    the boot's summary, B - A their difference. Returns the rows checked."""
    table, runs = recorded_table(kernel)["kernels"], summaries(kernel)
    steps = {report.STEP_LABELS[w].split(" (")[0]: w for w in report.STEP_LABELS}
    pages = set(report.PAGE_OF.values())
    per_page = {name.format(page=p): key for key, name in report.RULE_FIGURES for p in pages}
    no_rfo = {name.format(page=p) + ", fast-string no-RFO rule": key for key, name in report.RULE_FIGURES for p in pages}
    causes = {name.format(page=p): (who, target) for who, target, name in report.CAUSES for p in pages}
    per_run = {name.format(run=r): key for key, name in report.PER_RUN for r in set(report.RUN_OF.values())}
    checked = 0
    for step, fig, a, b, change in rows:
        w = steps[step]
        pp = [table[v]["per_page"][w] for v in ("base", kernel)]
        if fig.endswith(" pages"):
            assert [number(a), number(b)] == [p["pages"] for p in pp] and change == "", (step, fig)
            checked += 1
            continue
        if fig in per_page:
            want = [p[per_page[fig]] for p in pp]
        elif fig in no_rfo:
            want = [p["fast_string_no_rfo"][no_rfo[fig]] for p in pp]
        elif fig in causes:
            who, target = causes[fig]
            want = [p["llc_fills_by_cause_per_page"][who][target] for p in pp]
        else:
            key = per_run[fig]
            want = [first_window(runs[v], w)["pmem_device_bytes"][key] for v in ("base", kernel)]
        assert [number(a), number(b)] == want, (step, fig, a, b, want)
        assert number(change) == pytest.approx(want[1] - want[0], abs=0.005), (step, fig, change)
        checked += 1
    return checked


def ab_markdown(t: dict, names: list[str]) -> str:
    return formats.section_text("markdown", report.ab_section(t, names))


@pytest.mark.parametrize("kernel", list(PAIRS))
def test_the_ab_traffic_table_is_the_recorded_per_page_figures(kernel):
    """Each recorded base-against-NT run through the section: every figure
    of all three steps, per page and per run, under both fast-string rules
    where they differ, and the LLC fills by cause, as the boots counted them."""
    t = report.figures(summaries(kernel), report.windows_for(AB_SCENARIOS))
    assert t == recorded_table(kernel)
    md = ab_markdown(t, ["base", kernel])
    rows = md_rows(md)
    assert rows == report.ab_rows(t, ["base", kernel])
    assert check_ab_table(rows, kernel) == len(rows) >= 3 * (1 + len(report.RULE_FIGURES) + len(report.CAUSES)
                                                             + len(report.PER_RUN))
    # the NT demotion RFC's claim in the table: a page's worth read by base, none by the NT kernel;
    # base's copy is a fast string, so the no-RFO rule reads none either: its row is there
    read = next(r for r in rows if r[0] == "demotion by memory.reclaim" and r[1] == "device bytes read / demoted page")
    assert float(read[2]) > 4000 and float(read[3]) < 2
    no = next(r for r in rows if r[1] == "device bytes read / demoted page, fast-string no-RFO rule")
    assert float(no[2]) < 2 and float(no[3]) < 2


def test_the_llc_fills_by_cause_add_up_to_the_windows_fills():
    """The path's and the rest's fills a page, by target, are the window's
    own: the device's all the path's, the two DRAM shares the DRAM fills."""
    for kernel in PAIRS:
        for name, s in summaries(kernel).items():
            for label, pp in report.per_page(s).items():
                c, w = pp["llc_fills_by_cause_per_page"], first_window(s, label)
                dram = (w["counts"]["dram"]["fills_load"] + w["counts"]["dram"]["fills_store"]) / w["pages"]
                assert c["rest"]["device"] == 0 and c["path"]["device"] == pytest.approx(pp["pmem_fills_per_page"],
                                                                                          abs=0.006), (name, label)
                assert c["path"]["dram"] + c["rest"]["dram"] == pytest.approx(dram, abs=0.002), (name, label)


def test_the_section_says_what_the_model_assumes_and_names_its_geometry():
    """Every rendering says it models traffic, names the geometry, says what
    the model assumes (so the direction is the path's instructions, the
    residual the finding) and why no statistics are run; none says the
    seeds' claims hold."""
    runs = summaries("nt-v3")
    model = runs["base"]["model"]
    t = report.figures(runs, report.windows_for(AB_SCENARIOS))
    assert t["model"] == model == recorded_table("nt-v3")["model"]
    geometry = (f"LLC {model['llc_bytes'] >> 20} MiB, {model['ways']} ways, {model['line']}-byte lines "
                f"({model['sets']} sets), {model['wc_buffers']} write-combining buffers; {model['policy']}")
    texts = [formats.section_text(f, report.ab_section(t, ["base", "nt-v3"])) for f in ("text", "markdown", "html")]
    texts += [formats.section_text("markdown", report.steps_section(t, ["base", "nt-v3"])),
              report.review(t, ["base", "nt-v3"])]
    for text in texts:
        flat = " ".join(text.split())
        assert "memory traffic, not time" in flat and " ".join(geometry.split()) in flat
        assert "the direction shows that the path executes NT stores" in flat and "What the model finds" in flat
        assert "claims hold" not in flat
    for text in texts[:4]:
        assert "no statistics are run" in text and "icount" in text
    assert t["what"] == model["what"] == "memory traffic, not time"


def test_the_spread_in_words_is_each_boots_own_repeat_of_the_step():
    """The guest runs each step twice a boot: the memmap init's device
    bytes are the same in both runs of every recorded boot (spread zero),
    and demotion's per demoted page too, to 0.01 byte (each of nt-v3's two
    runs read the same 256 lines: the workload's own faults, attributed
    to __handle_mm_fault and do_wp_page, and user space)."""
    runs = summaries("nt-v3")
    t = report.figures(runs, report.windows_for(AB_SCENARIOS))
    for name, s in runs.items():
        for label in ("rebind_fsdax", "rebind_devdax", "demotion"):
            ws = [w for w in s["windows"] if w["label"] == label]
            assert len(ws) == 2
            per_page = [(w["pmem_device_bytes"]["read"] / w["pages"], w["pmem_device_bytes"]["written"] / w["pages"])
                        for w in ws]
            want = round(max(abs(per_page[0][i] - per_page[1][i]) for i in (0, 1)), 2)
            assert t["kernels"][name]["repeat_spread_bytes_per_page"][label] == want, (name, label)
            if label.startswith("rebind_"):
                assert want == 0
    nt_demotion = [w["pmem_device_bytes"]["read"] for w in runs["nt-v3"]["windows"] if w["label"] == "demotion"]
    assert nt_demotion == [256 * 64, 256 * 64]
    worst = max(k["repeat_spread_bytes_per_page"]["demotion"] for k in t["kernels"].values())
    assert worst == 0
    words = t["spread"]
    assert "fsdax: zero" in words and "devdax: zero" in words and "demotion: zero" in words
    # a spread the boots do have is said with its size
    wide = json.loads(json.dumps(t))
    wide["kernels"]["base"]["repeat_spread_bytes_per_page"]["demotion"] = 1.75
    assert "demotion: the boot's two runs of the step differ by up to 1.75 bytes a page" in report.spread_words(wide)


def test_the_recorded_spread_between_boots_is_what_the_words_say():
    """The two recorded boots of base (one in each run): the memmap init's
    device bytes identical, demotion's at most RECORDED_DEMOTION_SPREAD
    bytes a page apart, the figure the section states."""
    a, b = summaries("nt-v3")["base"], summaries("nt-v2")["base"]
    for label in ("rebind_fsdax", "rebind_devdax"):
        assert first_window(a, label)["pmem_device_bytes"] == first_window(b, label)["pmem_device_bytes"]
        assert first_window(a, label)["pages"] == first_window(b, label)["pages"]
    wa, wb = first_window(a, "demotion"), first_window(b, "demotion")
    apart = max(abs(wa["pmem_device_bytes"][k] / wa["pages"] - wb["pmem_device_bytes"][k] / wb["pages"])
                for k in ("read", "written"))
    assert round(apart, 2) == report.RECORDED_DEMOTION_SPREAD
    assert f"at most {report.RECORDED_DEMOTION_SPREAD:g} bytes apart" in report.spread_words(
        report.figures({"base": a}, ["demotion"]))


def test_an_a_a_has_one_column_and_no_change():
    runs = summaries("nt-v3")
    t = report.figures({"base": runs["base"]}, report.windows_for(AB_SCENARIOS))
    md = ab_markdown(t, ["base", "base"])
    assert "| step | figure | base |" in md and "B - A" not in md
    for step, fig, value in md_rows(md):
        assert value != "-", (step, fig)


def test_only_the_windows_of_the_scenarios_run_are_shown():
    assert report.windows_for(["memmap_devdax"]) == ["rebind_devdax"]
    assert report.steps_for(report.windows_for(["memmap_devdax"])) == ("memmap",)
    assert report.steps_for(report.windows_for(["demotion", "memmap_fsdax"])) == ("memmap", "demotion")
    t = report.figures(summaries("nt-v2"), report.windows_for(["demotion"]))
    rows = md_rows(ab_markdown(t, ["base", "nt-v2"]))
    assert {r[0] for r in rows} == {"demotion by memory.reclaim"}
    assert check_ab_table(rows, "nt-v2") == len(rows)


def test_scenarios_no_window_models_say_so_without_a_boot(tmp_path):
    t = report.collect({}, ["exercise_test_hmm"], tmp_path)
    assert t == {"what": "memory traffic, not time", "unavailable": t["unavailable"]}
    assert "no traffic window models the scenarios exercise_test_hmm" in t["unavailable"]
    assert list(tmp_path.iterdir()) == []


def test_a_plugin_that_cannot_be_built_is_one_line(monkeypatch):
    """QEMU's package missing (dpkg-query really asked about a name no
    package has): the reason in one line, no traceback."""
    monkeypatch.setattr(theader, "BINARY", "nttrace-no-such-qemu-package")
    why = report.unavailable()
    assert why.startswith("the traffic plugin cannot be built here: nttrace-no-such-qemu-package is not installed")
    assert "\n" not in why


@pytest.mark.skipif(not shutil.which("cc") or not shutil.which("dpkg-query"), reason="needs cc and dpkg-query")
def test_a_compile_failure_is_its_first_line(tmp_path, monkeypatch):
    """A cached header the plugin does not compile against (in a cache of
    the test's own): build.py's BuildError, its first line."""
    try:
        _pkg, version = theader.installed_source()
    except theader.HeaderError as exc:
        pytest.skip(str(exc))
    monkeypatch.setattr(theader, "CACHE", tmp_path)
    d = theader.version_dir(version)
    d.mkdir(parents=True)
    (d / "qemu-plugin.h").write_text("#define QEMU_PLUGIN_VERSION 1\n#error not the plugin API\n")
    (d / "source.json").write_text("{}\n")
    (d / "complete").write_text(version + "\n")
    why = report.unavailable()
    assert why == "the traffic plugin cannot be built here: building the traffic plugin failed:"
    assert not list(tmp_path.glob("build-*/build.json"))


def test_a_failed_traffic_boot_is_said_in_its_row():
    runs = summaries("nt-v3")
    t = report.figures({"base": runs["base"], "nt-v3": "the traffic guest failed (exit 1)"},
                       report.windows_for(AB_SCENARIOS))
    assert report.failed(t) == {"nt-v3": "the traffic guest failed (exit 1)"}
    md = ab_markdown(t, ["base", "nt-v3"])
    assert "\nThe traffic boot of nt-v3 failed: the traffic guest failed (exit 1).\n" in md
    assert "<p class='warning'>The traffic boot of nt-v3 failed: the traffic guest failed (exit 1).</p>" in \
        formats.section_text("html", report.ab_section(t, ["base", "nt-v3"]))
    rows = md_rows(md)
    assert rows and all(b == "-" and change == "" and a != "-" for _step, _fig, a, b, change in rows)
    head, rows = report.steps_rows(t, ["base", "nt-v3"])
    assert rows[1][:2] == ["nt-v3", "the traffic boot failed: the traffic guest failed (exit 1)"]
    assert all(c == "" for c in rows[1][2:]) and len(rows[1]) == len(head)
    every = report.figures({"base": "x"}, ["demotion"])
    assert "Not measured: the traffic boot of base failed: x." in ab_markdown(every, ["base", "base"])
    assert " ".join(report.review(every, ["base"]).split()) == \
        "Modelled memory traffic: not measured: the traffic boot of base failed: x."


def test_the_step_tables_traffic_is_a_row_a_step():
    """lab.steps' section: a row a kernel, in the table's order, each cell
    the recorded per-page figure (here the recorded kernels stand in the
    place of two steps: the rendering does not know the difference), then
    who moved the lines at each step."""
    runs = summaries("nt-v3")
    t = report.figures(runs, report.windows_for(["memmap_fsdax", "memmap_devdax"]))
    md = formats.section_text("markdown", report.steps_section(t, ["base", "nt-v3"]))
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = md_rows(md)
    assert [r[0] for r in rows] == ["base", "nt-v3"]
    table = recorded_table("nt-v3")["kernels"]
    keys = {"read B/page": "device_read_per_page", "written B/page": "device_written_per_page",
            "LLC fills/page": "llc_fills_per_page", "NT lines/page": "nt_lines_per_page"}
    checked = 0
    for row in rows:
        for col, cell in zip(head[1:], row[1:]):
            subj, fig = col.split(" ", 1)
            w = {"fsdax": "rebind_fsdax", "devdax": "rebind_devdax"}[subj]
            assert float(cell) == table[row[0]]["per_page"][w][keys[fig]], (row[0], col)
            checked += 1
    assert checked == 2 * 2 * len(keys)
    assert "| base | 65.1 | 65.1 |" in md
    assert "Who moved the lines: memmap init, fsdax -M dev" in md and "| step | function | called from |" in md


# -- who moved the lines, and the review ---------------------------------------------------
def test_who_moved_the_lines_is_each_functions_counts_per_page():
    """The function table of each step is the boot's function rows per page:
    every function that moved a device line, with its lines read and
    written, the LLC fills a page by target; the no-RFO rule's figures where
    it counts otherwise; the rest folded into one row."""
    for kernel in PAIRS:
        t = recorded_table(kernel)
        for name, s in summaries(kernel).items():
            for label, rows in t["kernels"][name]["functions"].items():
                w = first_window(s, label)
                device = [r for r in w["functions"] if trun.device_lines(r)]
                assert [(r["function"], r["caller"], r["class"]) for r in rows[:len(device)]] == [
                    (r["function"], r["caller"], r["class"]) for r in device], (name, label)
                for got, r in zip(rows, device):
                    pm = r["counts"]["pmem"]
                    assert got["device_lines_read"] == pm.get("fills_load", 0) + pm.get("fills_store", 0)
                    assert got["device_lines_written"] == pm.get("writebacks", 0) + pm.get("nt_line_writes", 0)
                    assert got["device_read_per_page"] == round(64 * got["device_lines_read"] / w["pages"], 3)
                    assert ("fast_string_no_rfo" in got) == ("counts_fast_string_no_rfo" in r)
                assert rows[-1]["function"].endswith("more functions, no device line)")


def test_the_fsdax_residual_is_named_in_every_format_and_in_the_review():
    """What nt-v3 leaves on the device at fsdax, by function, in the
    section's table (text, markdown, HTML), its JSON and the plain-text
    review: __init_single_page called from memmap_init_range, the altmap's
    own pfns, as many lines as base reads there."""
    t = recorded_table("nt-v3")
    rows = {(r["function"], r["caller"]): r for r in t["kernels"]["nt-v3"]["functions"]["rebind_fsdax"]}
    left = rows[("__init_single_page", "memmap_init_range")]
    base = {(r["function"], r["caller"]): r for r in t["kernels"]["base"]["functions"]["rebind_fsdax"]}
    assert left["device_lines_read"] == base[("__init_single_page", "memmap_init_range")]["device_lines_read"]
    assert 8000 < left["device_lines_read"] < 9000
    section = report.ab_section(t, ["base", "nt-v3"])
    cells = ["nt-v3", "__init_single_page", "memmap_init_range", "ordinary", report._num(left["device_read_per_page"])]
    assert " | ".join(cells) in formats.section_text("markdown", section)
    assert "".join(f"<td class='{'num' if i == 4 else 'text'}'>{c}</td>" for i, c in enumerate(cells)) in \
        formats.section_text("html", section)
    assert all(c in formats.section_text("text", section) for c in cells)
    review = report.review(t, ["base", "nt-v3"])
    assert (f"__init_single_page (ordinary, called from memmap_init_range): read "
            f"{report._num(left['device_read_per_page'])} B/page ({left['device_lines_read']:,} lines)") in \
        " ".join(review.split())
    assert max(len(ln) for ln in review.splitlines()) <= 72


def test_the_review_is_what_lab_traffic_ab_wrote():
    """The recorded run's review.txt is report.review() of its figures."""
    for kernel in PAIRS:
        assert report.review(recorded_table(kernel), ["base", kernel]) == (PAIRS[kernel] / "review.txt").read_text()


# -- lab.ab's reports, as nttrace validate writes them, with and without the section --
AB_RECORDED = REPO / "tests" / "fixtures" / "recorded" / "ab" / "ab-base-nt-v3"


def write_ab(tmp_path: Path, sections=None) -> dict[str, Path]:
    from lab import ab as lab_ab
    tmp_path.mkdir(exist_ok=True)
    return lab_ab.write_ab(sorted(AB_RECORDED.glob("A/boot-*/*.report.json")),
                           sorted(AB_RECORDED.glob("B/boot-*/*.report.json")), tmp_path, 10.0, sections)


@pytest.fixture(scope="module")
def validate_reports(tmp_path_factory) -> Path:
    """lab.ab's write_ab of the recorded A/B boots (base against nt-v3): its
    four reports without a section, once for the module."""
    out = tmp_path_factory.mktemp("ab")
    write_ab(out)
    return out


def test_lab_abs_reports_with_traffic_carry_the_recorded_figures(validate_reports, tmp_path):
    """The A/B of the instruction figures stays as validate wrote it; the
    traffic section follows it in the markdown and the text, sits after the
    figures and before the plots in the HTML, and is "traffic" in the JSON;
    each table's every cell is the recorded run's."""
    t = report.figures(summaries("nt-v3"), report.windows_for(AB_SCENARIOS))
    written = write_ab(tmp_path / "traffic", [report.ab_section(t, ["base", "nt-v3"])])
    n = len(report.ab_rows(t, ["base", "nt-v3"]))
    for fmt in ("markdown", "text"):
        before = (validate_reports / written[fmt].name).read_text()
        after = written[fmt].read_text()
        title = "## Modelled memory traffic (not time)" if fmt == "markdown" else "Modelled memory traffic (not time)"
        assert after.startswith(before.rstrip("\n") + f"\n\n{title}\n"), fmt
    assert check_ab_table(md_rows(written["markdown"].read_text().split("## Modelled memory traffic")[1]), "nt-v3") == n
    doc = json.loads(written["json"].read_text())
    plain = json.loads((validate_reports / "ab.json").read_text())
    assert {k: v for k, v in doc.items() if k != "traffic"} == plain
    assert doc["traffic"] == json.loads(json.dumps(t)) == recorded_table("nt-v3")
    page = written["html"].read_text()
    old = (validate_reports / "ab.html").read_text()
    figures_at, traffic_at, plots_at = (page.find(m) for m in ("<h2>Figures</h2>", "<h2>Modelled memory traffic",
                                                               "<h2>Plots</h2>"))
    assert 0 < figures_at < traffic_at < plots_at
    assert page.replace(formats.section_text("html", report.ab_section(t, ["base", "nt-v3"])), "", 1) == old
    rows = html_rows(page)
    assert check_ab_table(rows, "nt-v3") == len(rows) == n
    assert re.search(r"data-plots='(\d+)'", page)[1] == re.search(r"data-plots='(\d+)'", old)[1]


def test_lab_abs_reports_say_in_one_line_why_there_is_no_traffic(tmp_path):
    why = "the traffic plugin cannot be built here: nttrace-no-such-qemu-package is not installed (dpkg-query: x)"
    written = write_ab(tmp_path / "unavailable", [report.ab_section(report.unavailable_record(why), ["base", "nt-v3"])])
    md = written["markdown"].read_text()
    assert md.endswith(f"\n## Modelled memory traffic (not time)\n\nNot measured: {why}.\n")
    assert f"<p class='note'>Not measured: {why}.</p>" in written["html"].read_text()
    assert json.loads(written["json"].read_text())["traffic"] == {"what": "memory traffic, not time",
                                                                  "unavailable": why}


def test_lab_traffic_ab_writes_its_report_in_every_format(tmp_path):
    """lab.traffic.ab's own report: the section alone, a document in each
    A/B format (traffic-ab.txt, .md, .json, .html), its JSON the figures."""
    from lab.traffic import ab as tab
    t = recorded_table("nt-v3")
    written = tab.write_report(tmp_path, "base", "nt-v3", t)
    assert sorted(p.name for p in written.values()) == ["traffic-ab.html", "traffic-ab.json", "traffic-ab.md",
                                                         "traffic-ab.txt"]
    assert json.loads(written["json"].read_text())["traffic"] == t
    assert written["markdown"].read_text().startswith("# Modelled memory traffic: base against nt-v3\n")
    assert check_ab_table(md_rows(written["markdown"].read_text()), "nt-v3") == len(report.ab_rows(t, ["base", "nt-v3"]))
    assert "<h1>Modelled memory traffic: base against nt-v3</h1>" in written["html"].read_text()


def test_lab_ab_and_lab_steps_take_no_traffic(tmp_path, capsys):
    """--no-traffic parses in both (each stops at its next argument check,
    before any build or boot), and a misspelling is argparse's usage error."""
    from lab import ab as lab_ab
    from lab import steps as lab_steps
    assert lab_ab.main(["base", "nt-v3", "--out", str(tmp_path), "--no-traffic", "--boots", "0"]) == 2
    assert capsys.readouterr().err.strip() == "lab.ab: --boots must be at least 1"
    assert lab_steps.main(["x.txt:v8", "--steps", "1", "--out", str(tmp_path), "--no-traffic", "--boots", "1"]) == 2
    assert capsys.readouterr().err.strip() == "lab.steps: --boots must be at least 2 (one boot a step cannot be tested)"
    for mod in (lab_ab, lab_steps):
        with pytest.raises(SystemExit) as e:
            mod.main(["--no-trafic"])
        assert e.value.code == 2
    assert list(tmp_path.iterdir()) == []
