# SPDX-License-Identifier: Apache-2.0
"""BENCHMARKS.md against its raw data: every generated table is what
benchmarks/render.py makes of its raw files now, no table is written by
hand, and every raw file the document names exists."""
import json
import re
import shutil
import subprocess
import sys

from conftest import REPO


def _render(tree, *args):
    return subprocess.run([sys.executable, str(tree / "benchmarks" / "render.py"), *args], capture_output=True,
                          text=True, timeout=120)


def _copy_of_the_tree(tmp_path):
    """What render.py reads: benchmarks/, the document, and the lab package
    (the step table's formatting is lab.steps' own)."""
    copy = tmp_path / "tree"
    shutil.copytree(REPO / "benchmarks", copy / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "BENCHMARKS.md", copy / "BENCHMARKS.md")
    shutil.copytree(REPO / "lab", copy / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_generated_tables_match_their_raw_files():
    proc = _render(REPO, "--check")
    assert proc.returncode == 0, proc.stderr


def test_the_document_has_generated_blocks_and_every_named_raw_file_exists():
    text = (REPO / "BENCHMARKS.md").read_text()
    assert len(re.findall(r"<!-- generated: [\w-]+ -->", text)) >= 4
    named = set(re.findall(r"`benchmarks/([\w./-]+\.(?:json|log))`", text))
    assert named
    missing = sorted(n for n in named if not (REPO / "benchmarks" / n).exists())
    assert not missing, missing


def test_the_document_names_no_scratch_path():
    """Where a run kept its files is not how to repeat it: no /tmp or /var/tmp."""
    text = (REPO / "BENCHMARKS.md").read_text()
    assert not [line for line in text.splitlines() if "/tmp/" in line]


def tables_by_hand(text: str) -> list[str]:
    """Table rows outside the generated blocks: figures no raw file backs."""
    outside = re.sub(r"<!-- generated: ([\w-]+) -->.*?<!-- end generated: \1 -->", "", text, flags=re.S)
    return [line for line in outside.splitlines() if line.startswith("|")]


def test_every_table_comes_from_a_raw_file():
    assert not tables_by_hand((REPO / "BENCHMARKS.md").read_text())
    assert tables_by_hand("<!-- generated: a -->\n| x |\n<!-- end generated: a -->\n| by hand |\n") == ["| by hand |"]


def test_a_changed_raw_figure_breaks_the_check(tmp_path):
    """The check can fail: a copy of the tree whose raw file says otherwise."""
    copy = _copy_of_the_tree(tmp_path)
    raw = copy / "benchmarks" / "daemon-loader-ab-epyc-vm-2026-11-30.json"
    data = json.loads(raw.read_text())
    data["after_loader_handover"][0]["ready_s"] += 10
    raw.write_text(json.dumps(data))
    proc = _render(copy, "--check")
    assert proc.returncode == 1 and "differs from its raw data" in proc.stderr


def test_a_block_without_a_renderer_breaks_the_check(tmp_path):
    """A generated block no section renders (or a renderer whose block is
    gone) is said, not skipped."""
    copy = _copy_of_the_tree(tmp_path)
    doc = (REPO / "BENCHMARKS.md").read_text()
    (copy / "BENCHMARKS.md").write_text(doc.replace("<!-- generated: ci-runs -->", "<!-- generated: ci-rnus -->")
                                        .replace("<!-- end generated: ci-runs -->", "<!-- end generated: ci-rnus -->"))
    proc = _render(copy, "--check")
    assert proc.returncode == 1 and "['ci-rnus']" in proc.stderr and "['ci-runs']" in proc.stderr, proc.stderr


# a cold CI run's raw file, whichever is recorded
ANY_CI_RUN = sorted((REPO / "benchmarks").glob("ci-cold-*.json"))[-1]


def test_a_new_ci_raw_file_is_a_new_row_with_no_code(tmp_path):
    """The CI table takes every benchmarks/ci-*.json: a new run is its raw file."""
    copy = _copy_of_the_tree(tmp_path)
    run = json.loads(ANY_CI_RUN.read_text())
    run.update(commit="f" * 40, started="2026-12-07 01:02:03", wall_s=3 * 3600 + 4 * 60 + 5)
    (copy / "benchmarks" / "ci-cold-xeon-vm-2026-12-07-fffffff.json").write_text(json.dumps(run))
    assert _render(copy, "--check").returncode == 1
    proc = _render(copy)
    assert proc.returncode == 0, proc.stderr
    text = (copy / "BENCHMARKS.md").read_text()
    assert "| 2026-12-07 01:02 | Intel Xeon 2-core VM | fffffff | emptied first | **184 m 05 s** |" in text
    assert "`benchmarks/ci-cold-xeon-vm-2026-12-07-fffffff.json`" in text
    assert _render(copy, "--check").returncode == 0


def test_a_block_two_sections_define_is_refused(tmp_path):
    """One renderer a block: a section that defines another's block again is an error, not an override."""
    copy = _copy_of_the_tree(tmp_path)
    (copy / "benchmarks" / "sections" / "zz_again.py").write_text(
        f'BLOCKS = {{"ci-runs": (lambda raw: "", ["{ANY_CI_RUN.name}"])}}\n')
    proc = _render(copy, "--check")
    assert proc.returncode == 1 and "['ci-runs']" in proc.stderr and "defined twice" in proc.stderr, proc.stderr


def _traffic_runs() -> dict[str, str]:
    """The lab.traffic.ab runs the modelled-traffic block renders (its section's PAIRS)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from sections import traffic
    return traffic.PAIRS


def test_the_traffic_table_is_its_raw_files_and_a_changed_count_breaks_the_check(tmp_path):
    """The modelled-traffic block is made from the two boots' summaries by
    lab.traffic.ab's own figures (lab/traffic/report.py), each row naming
    who moves the device's lines: a device line charged to another caller
    in a boot's summary makes the figures differ from the run's
    traffic-ab.json, and the check fails."""
    run = _traffic_runs()["nt-v3"]
    text = (REPO / "BENCHMARKS.md").read_text()
    table = json.loads((REPO / "benchmarks" / run / "traffic-ab.json").read_text())["traffic"]
    base = table["kernels"]["base"]["per_page"]["demotion"]
    read = f"**{base['device_read_per_page']:g} ({base['fast_string_no_rfo']['device_read_per_page']:g})**"
    row = next(ln for ln in text.splitlines() if ln.startswith("| demotion (memory.reclaim), per demoted page | base |"))
    assert read in row and "`copy_mc_enhanced_fast_string` <- folio_mc_copy (fast-string)" in row, row
    assert any(ln.startswith("|  | nt-v3 |") and "`__init_single_page` <- memmap_init_range (ordinary) 8,702 / 8,702"
               in ln for ln in text.splitlines())
    copy = _copy_of_the_tree(tmp_path)
    summary = copy / "benchmarks" / run / "nt-v3.json"
    data = json.loads(summary.read_text())
    fsdax = next(w for w in data["windows"] if w["label"] == "rebind_fsdax")
    moved = next(r for r in fsdax["functions"] if r["caller"] == "memmap_init_range")
    moved["caller"] = "memmap_init_zone_device"
    summary.write_text(json.dumps(data))
    proc = _render(copy, "--check")
    assert proc.returncode == 1 and "nt-v3's traffic-ab.json is not what lab.traffic.ab makes" in proc.stderr, \
        proc.stderr


def test_the_traffic_raw_files_are_the_recorded_runs_the_unit_tests_hold():
    """benchmarks/ holds the same boots as tests/fixtures/recorded/traffic/ab-base-nt-v3 and -nt-v2
    (whose figures tests/unit/test_traffic_report.py checks against lab.traffic.ab)."""
    for kernel, run in _traffic_runs().items():
        for name in ("base.json", f"{kernel}.json", "traffic-ab.json"):
            assert (REPO / "benchmarks" / run / name).read_bytes() == (
                REPO / "tests" / "fixtures" / "recorded" / "traffic" / f"ab-base-{kernel}" / name).read_bytes(), name
