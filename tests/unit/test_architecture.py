# SPDX-License-Identifier: Apache-2.0
"""The import architecture (.importlinter at the top of the tree): the
installed package keeps its layers and the lab's traffic code its one
direction, and a wrong-way import planted in a copy of either breaks its
contract with the edge named."""
import shutil
import subprocess
import sys
from pathlib import Path

import nttrace
from conftest import REPO

LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    """lint-imports on the contracts; `lab` from the checkout (after
    `pythonpath`, which may hold a planted copy), nttrace as installed."""
    import os
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)}
    return subprocess.run([LINT, "--no-cache", str(REPO / ".importlinter")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_installed_package_keeps_its_layers(tmp_path):
    proc = lint(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


def test_a_wrong_way_import_breaks_the_contract_naming_the_edge(tmp_path):
    copy = tmp_path / "site" / "nttrace"
    shutil.copytree(Path(nttrace.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    btf = copy / "kernel" / "btf.py"
    btf.write_text(btf.read_text() + "\nfrom nttrace.daemon import service  # planted: kernel facts importing the daemon\n")
    proc = lint(tmp_path, str(tmp_path / "site"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BROKEN" in proc.stdout and "nttrace.kernel.btf -> nttrace.daemon.service" in proc.stdout, proc.stdout


def test_the_lab_traffic_report_importing_its_command_breaks_the_one_direction(tmp_path):
    """The circle the lab's traffic code had (lab.ab -> lab.traffic.report ->
    lab.traffic.ab -> lab.ab), planted again in a copy of lab: the contract
    names the edge."""
    copy = tmp_path / "site" / "lab"
    shutil.copytree(REPO / "lab", copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    report = copy / "traffic" / "report.py"
    report.write_text(report.read_text() + "\nfrom lab.traffic import ab  # planted: the report importing its command\n")
    proc = lint(tmp_path, str(tmp_path / "site"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "lab.traffic.report is not allowed to import lab.traffic.ab" in proc.stdout, proc.stdout


def test_each_subpackage_says_in_a_line_what_it_is():
    root = Path(nttrace.__file__).parent
    for init in sorted(root.glob("*/__init__.py")):
        if init.parent.name in ("data",):
            continue
        doc = (init.read_text().split('"""')[1] if '"""' in init.read_text() else "").strip()
        assert doc and len(doc.splitlines()[0]) > 20, f"{init.parent.name}/__init__.py says nothing about itself"
    # only the command line at the root
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py", "__main__.py", "cli.py", "errors.py",
                                                         "option_values.py", "trace_cmd.py"]


def test_every_test_that_runs_import_linter_is_left_out_of_the_packages_unit_room():
    """The Debian package's build runs the unit room (debian/tests/unit-room)
    without import-linter, which Debian does not package: each test here
    that runs lint-imports must be deselected there, or the package does
    not build (a new contract test, not deselected, failed dpkg-buildpackage
    with FileNotFoundError: that is the mutation this catches)."""
    import inspect
    room = (REPO / "debian" / "tests" / "unit-room").read_text()
    this = test_every_test_that_runs_import_linter_is_left_out_of_the_packages_unit_room.__name__
    uses = [name for name, fn in sorted(globals().items())
            if name.startswith("test_") and name != this and "lint(" in inspect.getsource(fn)]
    assert uses, "no test here runs lint-imports: this check would pass on nothing"
    for name in uses:
        assert f"--deselect tests/unit/test_architecture.py::{name}" in room, name
