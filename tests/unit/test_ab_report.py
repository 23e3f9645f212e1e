# SPDX-License-Identifier: Apache-2.0
"""The A/B report: bad inputs refused before anything is written, the HTML
page opened by a real headless browser (its DOM and a screenshot), and the
statistics on boots recorded in the lab: tests/fixtures/recorded/ab/ holds
an A/B (five boots of base and five of nt-v3, interleaved) and an A/A (five
and five of base), each made by lab/ab.py."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, one_line_error, run_nttrace

RECORDED = FIXTURES / "recorded"
AB = RECORDED / "ab"


def boots(side: str, names=("memmap_fsdax", "memmap_devdax")) -> list[str]:
    """The recorded boots' reports of one side (a directory per boot):
    ab-base-nt-v3/A, ab-base-nt-v3/B, aa-base/A, aa-base/B."""
    return [str(p) for d in sorted((AB / side).glob("boot-*")) for n in names for p in [d / f"{n}.report.json"]
            if p.exists()]


def ab(base: list[str], cur: list[str], *extra) -> subprocess.CompletedProcess:
    return run_nttrace("validate", "--baseline", *base, "--current", *cur, *extra, timeout=300)


def rows_of(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return {(r["check"], r["subject"], r["metric"]): r for r in json.loads(proc.stdout)["baseline_comparison"]}


# -- bad inputs ---------------------------------------------------------------------
def _edited(tmp_path: Path, src: str, name: str, edit) -> str:
    data = json.loads(Path(src).read_text())
    edit(data)
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


BASE_FSDAX = str(RECORDED / "base-7.2" / "memmap_fsdax.report.json")
BASE_DEMOTION = str(RECORDED / "base-7.2" / "demotion.report.json")
NT_FSDAX = str(RECORDED / "nt-v3-7.2" / "memmap_fsdax.report.json")


@pytest.mark.parametrize("what,make,message", [
    ("another kernel release on one side",
     lambda t: ([BASE_FSDAX, _edited(t, BASE_FSDAX, "b2.json", lambda d: d.update(kernel_release="7.2.14"))], [NT_FSDAX]),
     "kernel release '7.2.14'"),
    ("another NT revision on one side",
     lambda t: ([BASE_FSDAX], [NT_FSDAX, _edited(t, NT_FSDAX, "n2.json", lambda d: d["kernel"].update(nt_revision="v2"))]),
     "NT revision 'v2'"),
    ("a TCG run and a bare-metal run on one side",
     lambda t: ([BASE_FSDAX, _edited(t, BASE_FSDAX, "b3.json", lambda d: d.update(machine={"kind": "bare-metal"}))],
                [NT_FSDAX]),
     "machine kind 'bare-metal'"),
    ("a side without the figure", lambda t: ([BASE_DEMOTION], [NT_FSDAX]), "has no run of"),
    ("two lab kernel builds on one side (steps of a series mixed)",
     lambda t: ([_edited(t, BASE_FSDAX, "s1.json", lambda d: d.update(lab_kernel={"variant": "v8-to-3", "key": "a"})),
                 _edited(t, BASE_FSDAX, "s2.json", lambda d: d.update(lab_kernel={"variant": "v8-to-4", "key": "b"}))],
                [NT_FSDAX]),
     "kernel build 'v8-to-4 (b)'"),
])
def test_bad_sides_are_one_line_exit_2_and_write_nothing(tmp_path, what, make, message):
    base, cur = make(tmp_path)
    for fmt in ("text", "html"):
        proc = ab(base, cur, "--format", fmt)
        assert proc.returncode == 2, (what, proc.stdout, proc.stderr)
        assert message in one_line_error(proc), what
        assert proc.stdout == "", f"{what}: something was written before the error"


@pytest.mark.parametrize("content", ["", '{"version": "0.1.0", "checks": [{"id": "kernel.memmap', "{}"])
def test_an_empty_or_truncated_report_is_one_line_exit_2(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = ab([BASE_FSDAX, str(bad)], [NT_FSDAX], "--format", "html")
    assert proc.returncode == 2 and proc.stdout == ""
    assert str(bad) in one_line_error(proc)


@pytest.mark.parametrize("value,spelled", [(float("inf"), "Infinity"), (float("-inf"), "-Infinity"),
                                            (float("nan"), "NaN")])
@pytest.mark.parametrize("side", ["--baseline", "--current"])
def test_a_run_value_that_is_not_finite_is_one_line_exit_2(tmp_path, value, spelled, side):
    """Python's JSON reader takes Infinity and NaN: a run holding one is
    refused in one line naming the file and the figure, not tested into an
    internal error."""
    def every_rebind(d):
        for call in d["checks"][0]["evidence"]["calls"]:
            call["latency_ns"] = value
    base, cur = boots("ab-base-nt-v3/A", ("memmap_fsdax",))[:3], boots("ab-base-nt-v3/B", ("memmap_fsdax",))[:3]
    sides = {"--baseline": base, "--current": cur}
    bad = _edited(tmp_path, sides[side][1], "bad.json", every_rebind)
    assert spelled in Path(bad).read_text()
    sides[side][1] = bad
    for fmt in ("text", "html"):
        proc = ab(base, cur, "--format", fmt)
        assert proc.returncode == 2 and proc.stdout == "", (side, spelled, fmt, proc.stderr)
        assert one_line_error(proc) == (f"nttrace: {side} {bad}: kernel.memmap_latency [fsdax] first bind, ms is "
                                        f"{spelled}: a run's figures must be finite numbers")


def test_infinity_on_both_sides_is_refused_where_it_ended_in_an_internal_error(tmp_path):
    """Three base runs and one patched run of Infinity: the statistics'
    own check of the interval against the test failed on them (exit 4)."""
    def every_rebind(d):
        for call in d["checks"][0]["evidence"]["calls"]:
            call["latency_ns"] = float("inf")
    base, cur = boots("ab-base-nt-v3/A", ("memmap_fsdax",)), boots("ab-base-nt-v3/B", ("memmap_fsdax",))
    base[1:4] = [_edited(tmp_path, p, f"a{k}.json", every_rebind) for k, p in enumerate(base[1:4])]
    cur[1] = _edited(tmp_path, cur[1], "b.json", every_rebind)
    proc = ab(base, cur)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert one_line_error(proc).startswith(f"nttrace: --baseline {base[1]}: kernel.memmap_latency [fsdax] ")


# -- the HTML page in a real browser --------------------------------------------------------
def browser() -> str:
    return shutil.which("chromium-headless-shell") or shutil.which("chromium")


def open_in_browser(page: Path, tmp_path: Path) -> tuple[str, str, Path]:
    """The page's DOM after its scripts ran, the browser's console log, and
    a screenshot."""
    flags = [browser(), "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri()],
                   capture_output=True, text=True, timeout=120)
    return dom.stdout, dom.stderr, shot


def page_problems(dom: str, console: str, shot: Path) -> list[str]:
    """What a reader would find wrong: a script error, a plot that did not
    render, an empty table, a blank screenshot."""
    problems = [line for line in console.splitlines() if ":CONSOLE" in line and "Uncaught" in line]
    body = re.search(r"<body([^>]*)>", dom)
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1))) if body else {}
    if attrs.get("data-ready") != "yes":
        problems.append(f"page not ready: {attrs}")
    if int(attrs.get("data-plots", "0")) < 1:
        problems.append("no plot")
    if dom.count("<svg") != int(attrs.get("data-plots", "-1")):
        problems.append(f"{dom.count('<svg')} svg elements for {attrs.get('data-plots')} plots")
    if "<table class=\"figures\">" not in dom or dom.count("<tr") < 3:
        problems.append("no figures table")
    import matplotlib.image
    if not shot.exists():
        problems.append("no screenshot")
    else:
        img = matplotlib.image.imread(str(shot))
        if img.shape[0] < 1000 or float(img.std()) < 0.02:
            problems.append(f"blank screenshot (std {img.std():.4f})")
    return problems


@pytest.fixture
def recorded_page(tmp_path) -> Path:
    proc = ab(boots("ab-base-nt-v3/A"), boots("ab-base-nt-v3/B"), "--format", "html")
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "ab.html"
    page.write_text(proc.stdout)
    return page


@pytest.mark.needs("browser")
def test_the_html_report_renders_in_a_real_browser_with_every_plot(recorded_page, tmp_path):
    html = recorded_page.read_text()
    # opens offline: nothing to fetch (the SVGs' xmlns URIs are names, not requests)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", html) and "<link" not in html \
        and "@import" not in html and not re.search(r"url\((?!#)", html)      # url(#clip): a fragment of the page
    dom, console, shot = open_in_browser(recorded_page, tmp_path)
    assert page_problems(dom, console, shot) == []
    # the environment at the top, a per-boot plot for each rebind figure, each boot's column visible
    assert dom.index("Where it was measured") < dom.index("<svg")
    assert "QEMU TCG" in dom and "7.2.13" in dom
    for mode in ("fsdax", "devdax"):
        assert f"kernel.memmap_latency [{mode}]: rebinds (n=30), median ms, each boot" in dom


@pytest.mark.needs("browser")
@pytest.mark.parametrize("damage,expected", [
    (lambda h: re.sub(r"<svg.*?</svg>", "", h, count=1, flags=re.S), "plots"),
    (lambda h: h.replace("<script>", "<script>throw new Error('planted');</script><script>", 1), "Uncaught"),
])
def test_the_browser_check_fails_on_a_missing_plot_or_a_script_error(recorded_page, tmp_path, damage, expected):
    recorded_page.write_text(damage(recorded_page.read_text()))
    problems = page_problems(*open_in_browser(recorded_page, tmp_path))
    assert any(expected in p for p in problems), problems


# -- the statistics on recorded boots ------------------------------------------------------
TESTED = [(m, s) for m in ("fsdax", "devdax") for s in ("rebind_ms.min", "rebind_ms.median", "rebind_avg_ms",
                                                         "first_bind_ms")]


def test_a_a_on_recorded_boots_finds_no_significant_latency_change():
    rows = rows_of(ab(boots("aa-base/A"), boots("aa-base/B"), "--json"))
    for mode, metric in TESTED:
        st = rows[("kernel.memmap_latency", mode, metric)]["stats"]
        assert st["base"]["n"] == st["current"]["n"] == 5
        assert st["role"] in ("primary", "secondary") and st["p"] is not None
        assert not st["significant"], (mode, metric, st["p"], st["change_ci"])
        lo, hi = st["change_ci"]
        assert lo < 0 < hi, (mode, metric, st["change_ci"])


def test_a_b_on_recorded_boots_finds_the_primary_change_significant():
    rows = rows_of(ab(boots("ab-base-nt-v3/A"), boots("ab-base-nt-v3/B"), "--json"))
    secondary = [r for r in rows.values() if r.get("role") == "secondary"]
    for mode in ("fsdax", "devdax"):
        st = rows[("kernel.memmap_latency", mode, "rebind_ms.min")]["stats"]
        assert st["role"] == "primary" and st["alpha"] == 0.05
        assert st["base"]["n"] == st["current"]["n"] == 5
        assert st["significant"] and st["p"] <= 0.05 and st["test"].startswith("exact Mann-Whitney U across runs")
        assert st["change_ci"][1] < 0, st["change_ci"]         # the whole interval is a reduction
        assert st["detectable_pct"] is not None and 0 < st["detectable_pct"] < abs(st["change_pct"]) * 2
        # the other latency figures pay for their number
        med = rows[("kernel.memmap_latency", mode, "rebind_ms.median")]["stats"]
        assert med["role"] == "secondary" and med["alpha"] == pytest.approx(0.05 / len(secondary))
        assert med["multiplicity"] == {"method": "Bonferroni", "m": len(secondary)}


def test_eight_boots_a_side_under_icount_a_a_marks_nothing_and_states_its_conditions():
    """The icount guest's A/A (eight boots of base a side, beside kernel
    builds): no latency figure is marked, every interval holds no change,
    the figure it could detect is a fraction of a percent, and each side's
    host conditions are in the report, not warned of (icount's guest clock
    does not see the host's load)."""
    proc = ab(boots("aa-base-icount/A"), boots("aa-base-icount/B"), "--json")
    rows = rows_of(proc)
    for mode, metric in TESTED:
        st = rows[("kernel.memmap_latency", mode, metric)]["stats"]
        assert st["base"]["n"] == st["current"]["n"] == 8
        assert not st["significant"] and st["change_ci"][0] <= 0 <= st["change_ci"][1], (mode, metric, st)
        if st["role"] == "primary":
            assert 0 < st["detectable_pct"] < 0.5, st["detectable_pct"]
    conds = json.loads(proc.stdout)["baseline_conditions"]
    assert all(c and c["windows"] == 8 for c in conds.values()), conds


def test_eight_boots_a_side_under_icount_a_b_marks_each_scenarios_primary():
    """The icount guest's A/B of base and nt-v3 (eight boots a side, every
    scenario of the lab's A/B): each scenario's primary is marked, its
    interval wholly a reduction, and the change far beyond what the boots
    could detect; memremap_pages() of test_hmm's chunks is as much shorter
    as the series says of it (seeds: -53.2%), here in instructions."""
    names = ("memmap_fsdax", "memmap_devdax", "demotion", "exercise_memremap")
    proc = ab(boots("ab-base-nt-v3-icount/A", names), boots("ab-base-nt-v3-icount/B", names), "--json")
    rows = rows_of(proc)
    primaries = [r for r in rows.values() if r.get("stats") and r["stats"]["role"] == "primary"]
    assert {r["check"] for r in primaries} == {"kernel.memmap_latency", "kernel.demotion_nt", "probe.memremap"}
    for r in primaries:
        st = r["stats"]
        assert st["base"]["n"] == st["current"]["n"] == 8
        assert st["significant"] and st["change_ci"][1] < 0, (r["check"], r["subject"], st)
        assert st["detectable_pct"] < abs(st["change_pct"]) / 10, st
    memremap = next(r["stats"] for r in primaries if r["check"] == "probe.memremap")
    assert -60 < memremap["change_pct"] < -40, memremap["change_pct"]


def test_three_boots_a_side_are_too_few_in_words():
    proc = ab(boots("ab-base-nt-v3/A")[:6], boots("ab-base-nt-v3/B")[:6])      # 3 boots x (fsdax, devdax)
    assert proc.returncode == 0, proc.stderr
    assert "not testable at 3/3 runs" in proc.stdout
    assert not MARKS.search(table_of(proc.stdout)), proc.stdout   # nothing marked either way


@pytest.mark.parametrize("side,a,b,primary_marked", [("ab-base-nt-v3", 5, 3, True),
                                                      ("ab-base-nt-v3-icount", 2, 8, True),
                                                      ("ab-base-nt-v3-icount", 2, 7, False)])
def test_a_mark_and_not_testable_follow_one_rule_by_both_sides_sizes(side, a, b, primary_marked):
    """5 against 3 and 2 against 8 can be tested at 0.05 (smallest p 0.036
    and 0.044), 2 against 7 cannot: a row is marked only where
    statistics.testable holds, says "not testable" exactly where it does
    not, and the note under the table gives that rule at the row's alpha."""
    from nttrace.ab import statistics
    from nttrace.ab import text as ab_text
    proc = ab(boots(f"{side}/A")[:2 * a], boots(f"{side}/B")[:2 * b], "--json")
    body = json.loads(proc.stdout)
    stats = [r["stats"] for r in rows_of(proc).values() if r.get("stats") and r["stats"]["role"] != "descriptive"]
    notes = "\n".join(body["baseline_legend"])
    assert "needs 4 a side" not in notes
    for st in stats:
        assert (st["base"]["n"], st["current"]["n"]) == (a, b)
        can = statistics.testable(a, b, st["alpha"])
        assert st["verdict"].startswith("cannot be significant") == (not can), st["verdict"]
        if st["role"] == "primary":
            assert st["significant"] == primary_marked
        if not can:
            assert (f"not testable at {a}/{b} runs: the exact test's smallest p at {a} against {b} is "
                    f"2/C({a + b}, {min(a, b)}) = {statistics.smallest_p(a, b):.2g}, above the row's alpha "
                    f"{st['alpha']:.2g}; a test at alpha {st['alpha']:.2g} needs "
                    f"{ab_text.testable_sizes(st['alpha'])}") in notes
    text = ab(boots(f"{side}/A")[:2 * a], boots(f"{side}/B")[:2 * b]).stdout
    assert (f"not testable at {a}/{b} runs" in table_of(text)) == any(
        not statistics.testable(a, b, st["alpha"]) for st in stats)


def table_of(out: str) -> str:
    """The figures table of a text, markdown or HTML A/B (the legend, which
    explains the marks, left out)."""
    if "<table class='figures'>" in out:
        start = out.index("<table class='figures'>")
        return out[start:out.index("</table>", start)]
    return "\n".join(ln for ln in out.splitlines() if ln.startswith(("kernel.", "| kernel.")))


MARKS = re.compile(r"(^|[\s|>])[*~](?=[\s|<])")


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_one_boot_a_side_is_never_marked_in_any_format(fmt):
    """One boot a side cannot see boot-to-boot variation: the change is
    printed, "not tested", no mark and no p, whatever the format."""
    proc = ab(boots("ab-base-nt-v3/A")[:2], boots("ab-base-nt-v3/B")[:2], "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    if fmt == "json":
        rows = rows_of(proc)
        for key in (("kernel.memmap_latency", m, "rebind_ms.min") for m in ("fsdax", "devdax")):
            st = rows[key]["stats"]
            assert st["verdict"] == "boot-to-boot variation unknown: not tested"
            assert not st["significant"] and st["p"] is None and st["change_ci"] is None
            assert st["change_pct"] < -5          # the change itself is there
        return
    out = proc.stdout
    assert "not tested: 1 run a side" in out and "boot-to-boot variation unknown" in out
    table = table_of(out)
    assert "rebinds (n=30), min ms" in table
    assert not MARKS.search(table), MARKS.search(table)


def test_the_mark_finder_sees_a_planted_mark():
    assert MARKS.search("| -13.4% | * | 0.008 |") and MARKS.search("<td class='text verdict'>~</td>")
    assert not MARKS.search("| -13.4% [-19.3, -10.8] | not tested: 1 run a side |")


def test_a_mode_that_differs_between_runs_of_one_side_is_shown(tmp_path):
    d = RECORDED / "nt-v3-7.2" / "demotion.report.json"
    other = _edited(tmp_path, str(d), "d2.json", lambda r: [row.update(mode="MIGRATE_ASYNC", nt=False)
                                                             for row in r["checks"][0]["evidence"]["rows"]])
    rows = rows_of(ab([BASE_DEMOTION, BASE_DEMOTION], [str(d), other], "--json"))
    cur = rows[("kernel.demotion_nt", "", "mode")]["current"]
    assert "MIGRATE_ASYNC_NONTEMPORAL (1 of 2 runs)" in cur and "MIGRATE_ASYNC (1 of 2 runs)" in cur


def test_the_html_environment_names_each_sides_cpu_mitigations(tmp_path):
    """Reports made since the machine record holds the kernel's mitigations:
    the page names those that are not "Not affected", per side."""
    def with_mitigations(src, name, spectre_v2):
        return _edited(tmp_path, src, name, lambda d: d["machine"].update(
            mitigations={"meltdown": "Not affected", "spectre_v2": spectre_v2}))
    proc = ab([with_mitigations(BASE_FSDAX, "b.json", "Mitigation: Retpolines")],
              [with_mitigations(NT_FSDAX, "n.json", "Vulnerable")], "--format", "html")
    assert proc.returncode == 0, proc.stderr
    page = proc.stdout
    assert "base's CPU mitigations: spectre_v2: Mitigation: Retpolines</p>" in page
    assert "patched's CPU mitigations: spectre_v2: Vulnerable</p>" in page
    assert "meltdown" not in page
