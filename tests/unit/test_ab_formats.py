# SPDX-License-Identifier: Apache-2.0
"""The A/B's output is computed in one place (nttrace.ab.formats): what
`ab report` and the lab's A/B (lab.ab) write of a set of runs is, byte for
byte, what `nttrace validate --baseline ... --current ... --format F` prints
for the same run files, in every format; and `ab report` computes it in its
own process, starting no `nttrace validate`."""
import json
import subprocess
import sys

import pytest

from conftest import FIXTURES
from nttrace.ab import formats, report, schedule
from nttrace.errors import UsageError
from test_ab_loop_report import loop_with

RECORDED_AB = FIXTURES / "recorded" / "ab"


def cli(base: list[str], cur: list[str], fmt: str, *extra: str) -> str:
    """The command line's own output, the reference."""
    proc = subprocess.run([sys.executable, "-m", "nttrace", "validate", "--baseline", *base, "--current", *cur,
                           "--format", fmt, *extra], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout and not proc.stderr, proc.stderr
    return proc.stdout


def boots(ab_dir: str, side: str, n: int) -> list[str]:
    """Every scenario's report of the first n recorded lab boots of a side."""
    d = RECORDED_AB / ab_dir / side
    return [str(p) for k in range(1, n + 1) for p in sorted((d / f"boot-{k}").glob("*.report.json"))]


LAYOUTS = {"icount-6-a-side": (boots("ab-base-nt-v3-icount", "A", 6), boots("ab-base-nt-v3-icount", "B", 6)),
           "5-against-3": (boots("ab-base-nt-v3", "A", 5), boots("ab-base-nt-v3", "B", 3)),
           "one-a-side": (boots("ab-base-nt-v3", "A", 1), boots("ab-base-nt-v3", "B", 1))}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_the_package_gives_exactly_what_validate_prints(fmt, layout):
    base, cur = LAYOUTS[layout]
    assert base and cur
    out = formats.of_files(fmt, base, cur)
    assert out == cli(base, cur, fmt)
    if fmt == "json":          # the rows are there: the equality is not of two empty reports
        assert json.loads(out)["baseline_comparison"]


def test_lab_ab_writes_each_format_as_validate_prints_it(tmp_path):
    from lab import ab as lab_ab
    base, cur = LAYOUTS["5-against-3"]
    written = lab_ab.write_ab(base, cur, tmp_path, detect_pct=10.0)
    assert sorted(written) == sorted(formats.FORMATS)
    for fmt, path in written.items():
        assert path.read_text() == cli(base, cur, fmt, "--detect", "10"), fmt
    assert "boots_needed" in written["json"].read_text()      # --detect reached the rows
    assert not list(tmp_path.glob("*.tmp"))


def kept_runs(loop) -> tuple[list[str], list[str]]:
    runs = loop.runs()
    slots = schedule.from_json(loop.schedule()["slots"])
    return tuple([str(loop.run_path(s)) for s in slots if s.side == side and s.slot in runs]
                 for side in schedule.SIDES)


@pytest.fixture
def loop4(tmp_path):
    """A loop run to its end through the simulated machine: 4 runs a side."""
    loop = loop_with(tmp_path, rounds=4, seed=7)
    assert loop.state()["state"] == "complete"
    return loop


def test_ab_report_computes_validates_ab_in_process_byte_for_byte(loop4, monkeypatch):
    base, cur = kept_runs(loop4)
    assert len(base) == 4 and len(cur) == 4
    want = {fmt: cli(base, cur, fmt) for fmt in formats.FORMATS}

    def no_process(*a, **kw):
        raise AssertionError(f"ab report started a process: {a[0] if a else kw.get('args')}")
    monkeypatch.setattr(subprocess, "Popen", no_process)       # subprocess.run and friends go through it
    got = {fmt: report.render(loop4, fmt) for fmt in formats.FORMATS}
    assert got["text"].endswith("\n\n" + want["text"]) and got["text"].startswith("nttrace ab t: complete")
    assert got["markdown"].endswith("```\n\n" + want["markdown"])
    assert json.loads(got["json"])["ab"] == json.loads(want["json"])
    page = want["html"]
    at = page.index("</h1>") + len("</h1>")
    assert got["html"].startswith(page[:at] + "\n<section id='ab-loop'>") and got["html"].endswith(page[at:])


def test_ab_report_refuses_kept_runs_validate_refuses_in_one_line(loop4):
    """A kept patched run of another NT revision: the side is not one kernel;
    the report says so, naming the file, as validate does."""
    _base, cur = kept_runs(loop4)
    with open(cur[-1]) as f:
        run = json.load(f)
    run["kernel"]["nt_revision"] = "v9"
    with open(cur[-1], "w") as f:
        json.dump(run, f)
    with pytest.raises(UsageError) as exc:
        report.render(loop4, "text")
    msg = str(exc.value)
    assert msg.startswith("ab report: validate's A/B of the kept runs: --current: ") and cur[-1] in msg, msg
    assert "\n" not in msg


SECTION = formats.Section("Modelled memory traffic (not time)", [
    formats.Note("What the model assumes."),
    formats.Table(["step", "figure", "base | A", "nt-v3"], [["memmap", "device bytes read / page", "65.1", "1.1"]],
                  numeric_from=2),
    formats.Note("The traffic boot of nt-v2 failed: exit 1.", warning=True)], "traffic", {"kernels": {"base": 1}})


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_a_section_is_where_each_format_has_it_and_the_rest_is_validates_own(fmt):
    """A report's section (the lab's modelled traffic): after the table in
    text and markdown, between the figures and the plots in HTML, under its
    key in JSON; every other byte is what validate prints."""
    base, cur = LAYOUTS["one-a-side"]
    plain = cli(base, cur, fmt)
    out = formats.render(fmt, *formats.compare_files(base, cur), sections=[SECTION])
    if fmt == "json":
        doc = json.loads(out)
        assert doc.pop("traffic") == {"kernels": {"base": 1}} and doc == json.loads(plain)
        return
    added = formats.section_text(fmt, SECTION)
    if fmt == "html":
        assert out.replace(added, "", 1) == plain
        assert out.index("<h2>Figures</h2>") < out.index(added) < out.index("<h2>Plots</h2>")
        assert "<td class='num'>65.1</td>" in added and "<td class='text'>device bytes read / page</td>" in added
        assert "<p class='warning'>The traffic boot of nt-v2 failed: exit 1.</p>" in added
        return
    assert out == plain.rstrip("\n") + "\n" + added
    if fmt == "markdown":
        assert "\n## Modelled memory traffic (not time)\n" in added
        assert "| step | figure | base \\| A | nt-v3 |\n|---|---|--:|--:|\n| memmap | device bytes read / page | 65.1 | 1.1 |" \
            in added
    else:
        assert "step    figure                    base | A  nt-v3\nmemmap  device bytes read / page      65.1    1.1" \
            in added


def test_sections_as_a_report_of_their_own():
    """document(): the title and the sections in each format; JSON holds
    each section's data under its key; an unknown format is refused."""
    assert formats.document("markdown", "T", [SECTION]).startswith("# T\n\n## Modelled memory traffic (not time)\n")
    assert formats.document("text", "T", [SECTION]).startswith("T\n\nModelled memory traffic (not time)\n")
    page = formats.document("html", "T", [SECTION])
    assert page.startswith("<!DOCTYPE html>") and "<h1>T</h1>" in page and formats.section_text("html", SECTION) in page
    assert json.loads(formats.document("json", "T", [SECTION])) == {"title": "T", "traffic": {"kernels": {"base": 1}}}
    with pytest.raises(ValueError, match="no A/B format 'pdf'"):
        formats.document("pdf", "T", [SECTION])
