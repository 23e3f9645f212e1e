# SPDX-License-Identifier: Apache-2.0
"""The privilege tests' staged command (tests/unprivileged.py) where the
clone is out of nobody's reach, as a clone in root's 0700 home is: the
installed nttrace copied under a 0700 directory, then run as nobody
directly (refused: the control) and through the stage (it runs, and
answers for its missing privilege)."""
import os
import subprocess
import sys

import pytest

from conftest import one_line_error
from unprivileged import DROP, copy_installed, staged_nttrace

pytestmark = pytest.mark.needs("root", "setpriv")


@pytest.fixture
def locked_site(tmp_path):
    """nttrace as installed, under a directory only root may enter."""
    import nttrace
    from pathlib import Path
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    site = home / "site-packages"
    copy_installed(Path(nttrace.__file__).resolve().parents[1], site)
    assert (site / "nttrace" / "cli.py").is_file()
    return site


def test_nobody_cannot_run_nttrace_from_a_0700_directory(locked_site):
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    proc = subprocess.run([*DROP, base, "-c", "import nttrace"], env={"PYTHONPATH": str(locked_site)}, cwd="/",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "No module named 'nttrace'" in proc.stderr, proc.stderr


def test_the_staged_command_runs_there_as_nobody_and_exits_3(locked_site):
    with staged_nttrace(locked_site) as staged:
        assert os.stat(staged.cwd).st_mode & 0o005 == 0o005     # nobody may enter it
        who = subprocess.run([*DROP, *staged.argv[:-1], "import nttrace, os; print(os.geteuid(), nttrace.__file__)"],
                             env=staged.env, cwd=staged.cwd, capture_output=True, text=True, timeout=60)
        proc = subprocess.run([*DROP, *staged.argv, "validate", "--quick"], env=staged.env, cwd=staged.cwd,
                              capture_output=True, text=True, timeout=60)
    uid, where = who.stdout.split()
    assert uid == "65534" and where.startswith(str(staged.cwd)), who
    assert proc.returncode == 3, proc.stderr
    assert "CAP_BPF" in proc.stderr and "Traceback" not in proc.stderr
    assert not staged.cwd.exists()      # the stage is removed on the way out


def test_unprivileged_validate_is_exit_3_and_names_the_capability():
    # Drop to nobody with an empty capability set, running nttrace from where nobody can reach it.
    with staged_nttrace() as staged:
        proc = subprocess.run([*DROP, *staged.argv, "validate", "--quick"], env=staged.env, cwd=staged.cwd,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    line = one_line_error(proc)
    assert "CAP_BPF" in line and "CAP_PERFMON" in line
