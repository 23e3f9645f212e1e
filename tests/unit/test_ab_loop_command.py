# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab` without the host: its help and its one-shot unit under
systemd-analyze verify (the command on this host: tests/live/test_ab_loop_cli.py)."""
import os
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
def test_the_units_pass_systemd_analyze_verify(tmp_path):
    """The three templates with a loop's drop-ins, as systemd reads them from
    one unit directory (fails on a directive systemd 252 does not know, a
    drop-in that does not reset what it replaces, a timer with no trigger)."""
    exe = str(NTTRACE)
    d = tmp_path / "unit-path"
    d.mkdir()
    for t in unit.TEMPLATES:
        (d / t).write_text((unit.DATA / t).read_text().replace("/usr/bin/nttrace", exe))
    for u, text in unit.dropins("mine", exe, Path("/var/lib/nttrace/ab"), 9000, 900, ["7.2.13-base"]).items():
        (d / f"{u}.d").mkdir()
        (d / f"{u}.d" / "loop.conf").write_text(text)
    env = dict(os.environ, SYSTEMD_UNIT_PATH=f"{d}:")
    for u in (unit.unit_name("mine"), unit.timer_name("mine"), unit.deadline_name("mine")):
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no", u], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, u + ": " + proc.stdout + proc.stderr


def test_every_directory_the_loop_writes_is_writable_in_its_units_sandbox():
    """The step's template keeps the file system read-only (ProtectSystem=full)
    but for what it lists: each directory the loop writes its files or
    drop-ins in, or removes them from at its end, must be listed (fails
    if the loop gains a drop-in somewhere its unit cannot write: the end of
    the loop then fails with EROFS and leaves its units behind)."""
    import re as _re
    from pathlib import Path as _P

    from nttrace.ab import reset
    text = (unit.DATA / "nttrace-ab@.service").read_text()
    assert "ProtectSystem=full" in text.splitlines()
    writable = [_P(w.lstrip("-")) for line in text.splitlines() if line.startswith("ReadWritePaths=")
                for w in line.split("=", 1)[1].split()]
    wants = [reset.system_conf("x").parent, reset.sysctl_conf("x").parent, reset.grub_conf("x").parent,
             unit.UNIT_DIR, _P("/var/lib/nttrace/ab"), _P("/boot/grub"), _P("/boot/grub2"), _P("/boot/efi/EFI")]
    for d in wants:
        assert any(d == w or w in d.parents for w in writable), (d, writable)
    # ProtectSystem='s own paths listed themselves stay read-only (systemd keeps
    # the more restrictive entry of one path): only what lies below them can
    # be made writable. The mutation it catches: ReadWritePaths=/boot, under
    # which grub-reboot in the lab's series loop wrote nothing, silently.
    protected = {_P("/usr"), _P("/boot"), _P("/efi"), _P("/etc")}
    assert not protected & set(writable), writable
    # /etc and /usr are read-only there: the full protection stays on
    assert not any(_re.fullmatch(r"/(etc|usr)?/?", str(w)) for w in writable), writable
