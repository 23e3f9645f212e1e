# SPDX-License-Identifier: Apache-2.0
"""The docs' probe tables are what tools/probe_docs.py writes from the
probes' declarations: docs/probes.md's modules and BPF C, docs/daemon.md's
metric families, docs/validate.md's probe.<name> checks. A probe added,
renamed or given another metric changes them only through the generator."""
import importlib.util
import shutil
import subprocess
import sys

from conftest import REPO
from nttrace.probes import PROBES


def probe_docs():
    spec = importlib.util.spec_from_file_location("probe_docs", REPO / "tools" / "probe_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_tables_are_the_declarations():
    assert probe_docs().stale(REPO) == [], "run: make docs (tools/probe_docs.py --write)"


def test_every_probe_and_each_of_its_families_is_in_the_tables():
    gen = probe_docs()
    tables = gen.tables()
    for name, cls in PROBES.items():
        assert f"| `{gen.module_path(cls)}` | the {name} probe: " in tables["probe-table"]
        assert (REPO / gen.module_path(cls)).is_file() and (REPO / "bpf" / cls.source).is_file()
        for metric in cls.metrics:
            assert f"`{gen.family(metric)}`" in tables["probe-metrics"], metric.name


def test_a_hand_edit_of_a_table_is_named_and_write_undoes_it(tmp_path):
    for page in ("docs/probes.md", "docs/daemon.md", "docs/validate.md"):
        (tmp_path / page).parent.mkdir(exist_ok=True)
        shutil.copy(REPO / page, tmp_path / page)
    daemon = tmp_path / "docs" / "daemon.md"
    daemon.write_text(daemon.read_text().replace("`nttrace_reclaim_unpaired_total`, ", ""))
    tool = [sys.executable, str(REPO / "tools" / "probe_docs.py")]
    check = subprocess.run(tool + ["--check", str(tmp_path)], capture_output=True, text=True)
    assert check.returncode == 1
    assert check.stderr == ("probe_docs: docs/daemon.md: its probe tables differ from the declarations "
                            "(tools/probe_docs.py --write)\n")
    write = subprocess.run(tool + ["--write", str(tmp_path)], capture_output=True, text=True)
    assert write.returncode == 0 and write.stdout == "probe_docs: wrote docs/daemon.md\n"
    assert daemon.read_text() == (REPO / "docs" / "daemon.md").read_text()


def test_a_page_without_its_block_is_one_line_not_a_traceback(tmp_path):
    for page in ("docs/probes.md", "docs/daemon.md", "docs/validate.md"):
        (tmp_path / page).parent.mkdir(exist_ok=True)
        shutil.copy(REPO / page, tmp_path / page)
    (tmp_path / "docs" / "validate.md").write_text("# validate\n")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "probe_docs.py"), "--check", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == ("probe_docs: docs/validate.md has no <!-- generated: probe-checks --> ... "
                           "<!-- end generated: probe-checks --> block\n")
