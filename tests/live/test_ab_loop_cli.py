# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab` on this host, through the installed command: the dry run of
a start with a kernel image (conftest's kernel_image: a bzImage's setup
header, made by the suite, so no test waits for one), and every refusal a start makes before
anything is written (its help and its unit: tests/unit/test_ab_loop_command.py). Never a real start on a host that could
boot from it: a start that passes the checks reboots the machine, so the
start that is run for real here runs only where systemd is not init (the
refusal is then the point), and the dry run installs and loads nothing.
A host where systemd is not init (this sandbox: PID 1 is not systemd) cannot
run the loop's unit; the lab guest (tests/lab) runs the loop end to end."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import one_line_error, run_nttrace
from nttrace.ab import schedule, unit
from unprivileged import DROP, staged_nttrace

UNIT_GLOB = "nttrace-ab-*.service"
NTTRACE = Path(sys.executable).with_name("nttrace")      # what run_nttrace runs


@pytest.fixture
def ab_env(tmp_path):
    """A state directory of the test's own, and nothing of nttrace ab left after it."""
    before = sorted(unit.UNIT_DIR.glob(UNIT_GLOB))
    env = dict(os.environ, NTTRACE_AB_DIR=str(tmp_path / "ab"))
    yield env, tmp_path / "ab"
    assert sorted(unit.UNIT_DIR.glob(UNIT_GLOB)) == before, "a unit was left installed"
    kexec_loaded = Path("/sys/kernel/kexec_loaded")
    assert not kexec_loaded.exists() or kexec_loaded.read_text().strip() == "0", "a kexec kernel was left loaded"


def start(env, *args, timeout=120):
    return run_nttrace("ab", "start", *args, env=env, timeout=timeout)


@pytest.mark.needs("root")
def test_a_dry_run_reads_the_kernels_prints_the_plan_and_writes_nothing(ab_env, kernel_image):
    env, state = ab_env
    image = str(kernel_image)
    p = start(env, "dry", "--base", image, "--patched", image, "--boots", "3", "--seed", "7",
              "--cmdline", "root=/dev/vda ro", "--check", "probe.migrate", "--dry-run")
    out = p.stdout
    # the kernel's identity as its image holds it, read independently by file(1) where it is installed
    release = next(ln for ln in out.splitlines() if ln.startswith("  base ")).split()[1]
    if shutil.which("file"):
        assert f"version {release} " in subprocess.run(["file", "-b", image], capture_output=True, text=True).stdout
    assert f"  seed 7; order (B base, P patched): {schedule.order_text(schedule.make(3, 7))}" in out
    assert "  command line: root=/dev/vda ro" in out
    assert "  at each boot: nttrace validate --json --check probe.migrate" in out
    # a check that measures (one the A/B tests): a selection of none is refused before any plan is printed
    assert "  a boot is a run only where each of these gives its primary figure: probe.migrate " in out
    assert f"  units: nttrace-ab@dry.service -> {NTTRACE.resolve()} ab step dry; " \
           "nttrace-ab-deadline@dry.timer (the deadline)" in out     # an absolute path
    assert out.rstrip().endswith("dry run: nothing written, installed, loaded or booted")
    assert any(ln.startswith("  reset: a panic reboots after 10 s (panic=10); ") for ln in out.splitlines())
    assert any(ln.startswith("  time per boot: ") for ln in out.splitlines())
    assert any(ln.startswith("  default kernel: ") for ln in out.splitlines())
    # the machine's own facts decide the exit, as the real start's: its refusals come first (exit 3), then the
    # kernels' (the same image twice cannot be told apart: exit 2), then the reset path's
    refusals = [ln for ln in out.splitlines() if ln.startswith("  would refuse: ")]
    systemd = Path("/run/systemd/system").is_dir()
    kexec = Path("/sys/kernel/kexec_loaded").exists()
    watchdog = any(Path("/sys/class/watchdog").glob("watchdog*"))
    assert any("systemd is not this machine's init" in r for r in refusals) == (not systemd)
    assert any("this kernel cannot kexec" in r for r in refusals) == (not kexec)
    assert any("this machine has no hardware watchdog" in r for r in refusals) == (not watchdog)
    assert refusals, out
    assert p.returncode == (3 if not (systemd and kexec) else 2), (p.returncode, refusals)
    assert not state.exists()


@pytest.mark.needs("root")
def test_a_dry_run_without_kexec_tools_says_so(ab_env, tmp_path, kernel_image):
    env, _state = ab_env
    image = str(kernel_image)
    bare = tmp_path / "bin"
    bare.mkdir()
    env = dict(env, PATH=str(bare))
    p = start(env, "dry", "--base", image, "--patched", image, "--boots", "1", "--cmdline", "root=/dev/vda",
              "--dry-run")
    assert p.returncode == 3
    refusals = [ln for ln in p.stdout.splitlines() if ln.startswith("  would refuse: ")]
    if Path("/sys/kernel/kexec_loaded").exists():
        assert "  would refuse: ab start --via kexec: no kexec on PATH (install kexec-tools), or use --via reboot" \
            in refusals
    else:       # this kernel cannot kexec at all: that is said first
        assert any("built without CONFIG_KEXEC" in r for r in refusals)


@pytest.mark.needs("root")
def test_bad_input_is_one_line_exit_2_and_nothing_written(ab_env, kernel_image):
    env, state = ab_env
    image = str(kernel_image)
    cases = [
        (["x", "--base", "no-such-release-0", "--patched", image, "--boots", "2"], "unknown kernel 'no-such-release-0'"),
        (["x", "--base", image, "--patched", "/nonexistent/bzImage", "--boots", "2"], "no file /nonexistent/bzImage"),
        (["x", "--base", image, "--patched", image, "--boots", "0"], "argument --boots: 0 is not a positive integer"),
        (["x", "--base", image, "--patched", image, "--boots", "2", "--max-failures", "0"], "--max-failures"),
        (["../x", "--base", image, "--patched", image, "--boots", "2"], "argument NAME: '../x'"),
        (["x", "--base", image, "--patched", image, "--boots", "2", "--via", "reboot"], "give installed releases"),
        (["x", "--base", image, "--patched", image, "--boots", "2", "--rebind", "namespace97.0"],
         "--rebind namespace97.0: no such namespace"),
        (["x", "--base", image, "--patched", image, "--boots", "2", "--exercise", "nosuchprobe"], "nosuchprobe"),
        (["x", "--base", image, "--patched", image, "--boots", "2", "--check", "no.such.check"], "matches no check"),
        (["x", "--base", image, "--patched", image, "--boots", "2", "--cmdline", "quiet"], "has no root="),
        (["x", "--base", image, "--boots", "2"], "--patched"),
    ]
    for args, says in cases:
        for dry in ([], ["--dry-run"]):
            p = start(env, *args, *dry)
            assert p.returncode == 2, (args, p.stderr)
            assert says in one_line_error(p), (args, p.stderr)
    assert not state.exists()


@pytest.mark.needs("root")
def test_a_name_that_exists_is_refused_and_left_as_it_was(ab_env, kernel_image):
    env, state = ab_env
    (state / "mine").mkdir(parents=True)
    (state / "mine" / "schedule.json").write_text("{}")
    image = str(kernel_image)
    p = start(env, "mine", "--base", image, "--patched", image, "--boots", "2", "--cmdline", "root=/dev/vda")
    assert p.returncode == 2 and "a loop named mine exists" in one_line_error(p)
    assert (state / "mine" / "schedule.json").read_text() == "{}"


@pytest.mark.needs("root", "no-systemd-init")
def test_a_start_where_systemd_is_not_init_is_exit_3_and_installs_nothing(ab_env, kernel_image):
    env, state = ab_env
    image = str(kernel_image)
    p = start(env, "real", "--base", image, "--patched", image, "--boots", "2", "--cmdline", "root=/dev/vda")
    assert p.returncode == 3
    assert one_line_error(p) == ("nttrace: ab start: systemd is not this machine's init (no /run/systemd/system); "
                                 "the loop runs from a systemd unit at each boot")
    assert not state.exists() and p.stdout == ""


@pytest.mark.needs("root", "setpriv")
def test_not_root_is_exit_3_in_one_line():
    with staged_nttrace() as staged:
        p = subprocess.run([*DROP, *staged.argv, "ab", "start", "x", "--base", "a", "--patched", "b", "--boots", "2"],
                           env=staged.env, cwd=staged.cwd, capture_output=True, text=True, timeout=60)
        s = subprocess.run([*DROP, *staged.argv, "ab", "stop", "x"], env=staged.env, cwd=staged.cwd,
                           capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and one_line_error(p) == \
        "nttrace: ab start: needs root (it installs a systemd unit and boots kernels)"
    assert s.returncode == 3 and one_line_error(s) == "nttrace: ab stop: needs root"


@pytest.mark.needs("root")
def test_status_stop_report_of_a_loop_that_does_not_exist_are_exit_2(ab_env):
    env, _state = ab_env
    for args in (["status", "nope"], ["report", "nope"], ["stop", "nope"], ["step", "nope"]):
        p = run_nttrace("ab", *args, env=env)
        assert p.returncode == 2 and "no loop named nope" in one_line_error(p), (args, p.stderr)
