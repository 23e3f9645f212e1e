# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab` without the host: its help and its one-shot unit under
systemd-analyze verify (the command on this host: tests/live/test_ab_loop_cli.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_nttrace
from nttrace.ab import unit

NTTRACE = Path(sys.executable).with_name("nttrace")      # what run_nttrace runs


def test_help_shows_start_status_stop_report_with_examples():
    h = run_nttrace("ab", "--help")
    assert h.returncode == 0
    for what in ("start", "status", "stop", "report"):
        assert f"\n    {what} " in h.stdout
        assert f"nttrace ab {what} mine" in h.stdout
    assert "examples:" in h.stdout and "exit codes:" in h.stdout and "docs/ab-loop.md" in h.stdout
    s = run_nttrace("ab", "start", "--help")
    assert s.returncode == 0 and "--via {kexec,reboot}" in s.stdout and "--dry-run" in s.stdout


@pytest.mark.needs("systemd-analyze")
def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    exe = str(NTTRACE)
    path = tmp_path / unit.unit_name("mine")
    path.write_text(unit.text("mine", exe, Path("/var/lib/nttrace/ab"), 9000))
    proc = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
