"""BENCHMARKS.md against its raw data: every generated table is what
benchmarks/render.py makes of its raw files now, and every raw file the
document names exists."""
import re
import subprocess
import sys

from conftest import REPO

# The document's bound: the product's figures, with room for the sections
# that get appended; a study that outgrows it belongs in its own tree.
MAX_LINES = 700


def test_generated_tables_match_their_raw_files():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "render.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_document_stays_within_its_bound():
    lines = (REPO / "BENCHMARKS.md").read_text().count("\n")
    assert lines <= MAX_LINES, f"BENCHMARKS.md has {lines} lines, over {MAX_LINES}"


def test_the_document_has_generated_blocks_and_every_named_raw_file_exists():
    text = (REPO / "BENCHMARKS.md").read_text()
    assert len(re.findall(r"<!-- generated: [\w-]+ -->", text)) >= 4
    named = set(re.findall(r"`benchmarks/([\w./-]+\.(?:json|log))`", text))
    assert named
    missing = sorted(n for n in named if not (REPO / "benchmarks" / n).exists())
    assert not missing, missing


def tables_by_hand(text: str) -> list[str]:
    """Table rows outside the generated blocks: figures no raw file backs."""
    outside = re.sub(r"<!-- generated: ([\w-]+) -->.*?<!-- end generated: \1 -->", "", text, flags=re.S)
    return [line for line in outside.splitlines() if line.startswith("|")]


def test_every_table_comes_from_a_raw_file():
    assert not tables_by_hand((REPO / "BENCHMARKS.md").read_text())
    assert tables_by_hand("<!-- generated: a -->\n| x |\n<!-- end generated: a -->\n| by hand |\n") == ["| by hand |"]


def test_a_changed_raw_figure_breaks_the_check(tmp_path):
    """The check can fail: a copy of the tree whose raw file says otherwise."""
    import shutil
    copy = tmp_path / "tree"
    (copy / "benchmarks").mkdir(parents=True)
    for f in (REPO / "benchmarks").iterdir():
        if f.is_file():
            shutil.copy2(f, copy / "benchmarks" / f.name)
        else:
            shutil.copytree(f, copy / "benchmarks" / f.name)
    shutil.copy2(REPO / "BENCHMARKS.md", copy / "BENCHMARKS.md")
    shutil.copytree(REPO / "lab", copy / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "tests" / "fixtures" / "golden", copy / "tests" / "fixtures" / "golden")
    raw = copy / "benchmarks" / "perf-binding-epyc-vm-2026-12-01.json"
    raw.write_text(raw.read_text().replace('"pages": 20000', '"pages": 20001', 1))
    proc = subprocess.run([sys.executable, str(copy / "benchmarks" / "render.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "differs from its raw data" in proc.stderr


def test_a_block_without_a_renderer_breaks_the_check(tmp_path):
    """A generated block the renderer does not know (or a renderer whose
    block is gone) is said, not skipped."""
    import shutil
    copy = tmp_path / "tree"
    shutil.copytree(REPO / "benchmarks", copy / "benchmarks")
    doc = (REPO / "BENCHMARKS.md").read_text()
    (copy / "BENCHMARKS.md").write_text(doc.replace("<!-- generated: btf-read -->", "<!-- generated: btf-reed -->")
                                        .replace("<!-- end generated: btf-read -->", "<!-- end generated: btf-reed -->"))
    proc = subprocess.run([sys.executable, str(copy / "benchmarks" / "render.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "['btf-reed']" in proc.stderr and "['btf-read']" in proc.stderr, proc.stderr
