# SPDX-License-Identifier: Apache-2.0
"""docs/ab.md held to what nttrace prints and computes: its example is the
recorded lab A/B redone by today's nttrace, line for line; the sizes at
which a test is possible and the icount lab's spread are quoted as the code
computes them; the page links the A/B loop's page at its top."""
import re
from pathlib import Path

from conftest import FIXTURES, REPO, run_nttrace
from nttrace.ab import statistics
from nttrace.ab import text as ab_text
from nttrace.validate import evidence

DOC = REPO / "docs" / "ab.md"
ICOUNT_AB = FIXTURES / "recorded" / "ab" / "ab-base-nt-v3-icount"


def doc() -> str:
    return DOC.read_text()


def test_the_example_is_the_recorded_lab_ab_as_nttrace_prints_it_today():
    def side(name):
        return [str(p.relative_to(ICOUNT_AB)) for p in sorted(ICOUNT_AB.glob(f"{name}/boot-*/*.report.json"))]
    proc = run_nttrace("validate", "--baseline", *side("A"), "--current", *side("B"), "--format", "markdown",
                       cwd=ICOUNT_AB, timeout=300)
    assert proc.returncode == 0, proc.stderr
    printed = [ln.rstrip() for ln in proc.stdout.splitlines()]
    example = doc().split("<!-- example -->\n", 1)[1].split("<!-- /example -->", 1)[0]
    lines = [ln.rstrip() for ln in example.splitlines() if ln.strip()]
    assert len(lines) >= 10
    missing = [ln for ln in lines if ln not in printed]
    assert not missing, missing
    rows = [ln for ln in printed if ln.startswith("| ") and not ln.startswith("| check ")]
    assert f"the report has {len(rows)} rows" in doc()


def test_the_page_says_when_a_test_is_possible_as_the_code_decides_it():
    text = " ".join(doc().split())
    for alpha in (0.05, 0.05 / 7):
        assert ab_text.testable_sizes(alpha) in text, alpha
    assert f"2 against 8 reaches p = {statistics.smallest_p(2, 8):.2g}" in text
    assert f"3 against 5 p = {statistics.smallest_p(3, 5):.2g}" in text
    assert f"3 a side cannot go below {statistics.smallest_p(3, 3):.2g}" in text
    assert "4 a side at 0.05)" not in text and "below 4 runs a side" not in text


def test_the_page_quotes_the_primary_figures_spread_as_the_report_does():
    """The CoVs of the note every memmap A/B prints (derived from the raw
    files by test_ab_statistics.py), each with its lab setup."""
    text = " ".join(doc().split())
    reason = evidence.primary_reason("kernel.memmap_latency")
    icount_min, icount_median = re.search(r"CoV: ([\d.]+-[\d.]+%) in the lab's icount A/A.*?median's ([\d.]+-[\d.]+%)",
                                          reason).groups()
    host_min, host_median = re.search(r"; ([\d.]+-[\d.]+%) on the host clock.*?median's ([\d.]+-[\d.]+%)",
                                      reason).groups()
    assert f"the fastest rebind's CoV is {icount_min}, the median's {icount_median}" in text
    assert f"host-clock boots of 2026-12-01 as the steadiest (boot-to-boot CoV {host_min}, against {host_median}" \
        in text


def test_the_page_starts_with_the_ab_loops_link_and_an_example():
    lines = doc().splitlines()
    assert lines[0] == "# How a change is tested: the A/B"
    assert "[ab-loop.md](ab-loop.md)" in lines[2] and "nttrace ab" in lines[2]
    assert doc().index("## An example") < doc().index("## The rules")


def test_the_page_names_every_module_of_the_ab_package_and_every_path_it_names_exists():
    """"How a change is tested": the package's modules are each in its
    table (the comparison's by name, the loop's in one row), and every file
    or directory it names is there."""
    section = doc().split("## How a change is tested, and where the code is\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`nttrace\.ab\.(\w+)`", section))
    loop_row = next(ln for ln in section.splitlines() if ln.startswith("| the rest of `nttrace.ab` |"))
    named |= set(re.findall(r"(\w+)(?:,| \|)", loop_row.split("):", 1)[1]))
    modules = {p.stem for p in (REPO / "tracer" / "ab").glob("*.py") if p.stem != "__init__"}
    assert named == modules, (sorted(modules - named), sorted(named - modules))
    for path in re.findall(r"`((?:tracer|lab|tests|benchmarks)/[^`*]+)`", section):
        assert (REPO / path).exists(), path
    for pattern in re.findall(r"`((?:tests|benchmarks)/[^`]*\*[^`]*)`", section):
        assert list(REPO.glob(pattern)), pattern
