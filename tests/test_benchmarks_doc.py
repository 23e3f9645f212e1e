"""BENCHMARKS.md against its raw data: every generated table is what
benchmarks/render.py makes of its raw files now, and every raw file the
document names exists."""
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _render():
    """benchmarks/render.py as a module (it is a script, not in the package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("render", REPO / "benchmarks" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    return render


def test_generated_tables_match_their_raw_files():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "render.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_document_has_generated_blocks_and_every_named_raw_file_exists():
    text = (REPO / "BENCHMARKS.md").read_text()
    assert len(re.findall(r"<!-- generated: [\w-]+ -->", text)) >= 4
    named = set(re.findall(r"`benchmarks/([\w./-]+\.(?:json|log))`", text))
    assert named
    missing = sorted(n for n in named if not (REPO / "benchmarks" / n).exists())
    assert not missing, missing


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


def test_the_btf_note_compares_configs_only_where_one_configs_builds_agree():
    """A BTF hash that differs between two builds of one config says nothing
    about the configs; where each config's builds agree, the note says
    whether the configs' BTF is the same."""
    render = _render()
    _btf_notes = render._btf_notes

    def builds(*pairs):
        return [{"config": c, "btf_types_sha256": h} for c, h in pairs]

    assert "cannot compare" in _btf_notes(builds(("lab", "x"), ("other", "x"), ("lab", "y")))[0]
    assert "the same types" in _btf_notes(builds(("lab", "x"), ("other", "x"), ("lab", "x")))[0]
    assert "differs between configs: lab, other" in _btf_notes(builds(("lab", "x"), ("other", "y")))[0]
    assert _btf_notes([{"config": "lab"}, {"config": "other"}]) == []


def test_turn_ratios_only_for_a_run_that_built_the_two_configs_in_turn():
    """Each turn's lab build over its own defconfig-based build, only where
    the run alternated them; two of one config in a row are not turns."""
    render = _render()

    def run(*names):
        return [{"config": n, "build_s": float(i)} for i, n in enumerate(names, 1)]

    turns = render._turns(run("defconfig-based", "lab", "lab-x", "defconfig-based", "lab"))
    assert [(d["build_s"], lab["build_s"]) for d, lab in turns] == [(1.0, 2.0), (4.0, 5.0)]
    assert render._turns(run("defconfig-based", "defconfig-based", "lab", "lab")) == []
    assert render._turns(run("lab", "defconfig-based", "lab", "defconfig-based")) == []
    assert render._turns(run("defconfig-based", "lab", "defconfig-based")) == []
