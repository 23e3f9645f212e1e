# SPDX-License-Identifier: Apache-2.0
"""docs/probes.md stays true: its examples are excerpts of the golden outputs
recorded on a real kernel, and its map of the probe layer names every module
of tracer/probes/, tracer/probe_framework/ and tracer/tracing/ and every
file of bpf/, and nothing that does not exist."""
import re

from conftest import FIXTURES, REPO

DOC = REPO / "docs" / "probes.md"


def block_after(marker: str) -> str:
    """The fenced block that follows `<!-- marker -->`."""
    text = DOC.read_text()
    m = re.search(rf"<!-- {marker} -->\n```\n(.*?)```\n", text, re.S)
    assert m, f"docs/probes.md has no block after <!-- {marker} -->"
    return m.group(1)


def mapped_paths() -> list[str]:
    section = DOC.read_text().split("## Where things are", 1)[1]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


def test_the_trace_example_is_in_the_recorded_golden_table():
    assert block_after("trace-example") in (FIXTURES / "golden" / "trace-host-6.18.txt").read_text()


def test_the_metric_example_lines_are_in_the_recorded_golden_metrics():
    golden = (FIXTURES / "golden" / "probes-host-6.18.prom").read_text().splitlines()
    lines = block_after("metric-example").splitlines()
    assert lines and all(line in golden for line in lines), [x for x in lines if x not in golden]


def test_every_path_the_map_names_exists():
    paths = mapped_paths()
    assert len(paths) > 10
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"docs/probes.md names paths that do not exist: {missing}"


def test_the_map_names_every_probe_module_and_bpf_file():
    files = sorted(p.relative_to(REPO).as_posix() for room in ("probes", "probe_framework", "tracing")
                   for p in (REPO / "tracer" / room).glob("*.py") if p.name != "__init__.py" or room == "probes")
    files += sorted(p.relative_to(REPO).as_posix() for p in (REPO / "bpf").iterdir()
                    if p.suffix in (".c", ".h", ".py"))
    unnamed = sorted(set(files) - set(mapped_paths()))
    assert not unnamed, f"docs/probes.md's map lacks {unnamed}"
