# SPDX-License-Identifier: Apache-2.0
"""`ab start`'s options become validate's own flags; the plan records the
seed, the order, both kernels' identity and nttrace's, the reset path, the
kernels' preflight and the time the loop takes; the command line kexec
passes must name a root; a dry run exits as the real start would; without
--yes the start asks before its first reboot.

The kernels' preflight (nttrace.ab.preflight.check) is given here as the
answer its contract describes (found, refusals, config_diff, default_boot):
its own checks are tested on laid-out roots in test_ab_preflight.py. The
reset path reads a machine laid out under tmp_path (reset.ROOT)."""
import argparse
import io
import subprocess
from types import SimpleNamespace

import pytest

from ab_loop_machine import BUILDS, bzimage
from nttrace.ab import kernels, reset, schedule, start
from nttrace.ab import preflight as preflight_mod
from nttrace.ab.loop import Loop
from nttrace.errors import CapabilityError, UsageError
from nttrace.probes import PROBES

DEFAULT_BOOT = {"loader": "grub", "entry": "gnulinux-6.1.0-57-amd64-advanced-x", "release": "6.1.0-57-amd64",
                "how": "grub.cfg's default, saved_entry in /boot/grub/grubenv"}


def args(**kw):
    base = dict(name="mine", base="b", patched="p", series=None, boots=4, check=None, quick=False, rebind=None,
                runs=30, exercise="", demote=False, via="kexec", cmdline=None, seed=None, max_failures=3,
                wait_quiet=600.0, validate_timeout=7200.0, boot_deadline=None, until=None, stay=False, dry_run=True,
                yes=True, no_watchdog=True)
    base.update(kw)
    return argparse.Namespace(**base)


def preflight(found=("both kernels distinguishable",), refusals=(), config_diff=(), default_boot=None):
    return SimpleNamespace(found=list(found), refusals=list(refusals), config_diffs={"patched": list(config_diff)},
                           default_boot=dict(DEFAULT_BOOT if default_boot is None else default_boot))


@pytest.fixture(autouse=True)
def machine_root(tmp_path, monkeypatch):
    """A machine with no watchdog, this command line and these panic
    sysctls, and a preflight that passes."""
    root = tmp_path / "machine"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n")
    for k in ("panic", "panic_on_oops", "softlockup_panic", "hung_task_panic"):
        (root / "proc/sys/kernel" / k).write_text("0\n")
    monkeypatch.setattr(reset, "ROOT", root)
    monkeypatch.setattr(preflight_mod, "check", lambda ks, via: preflight())
    return root


def _images(tmp_path) -> dict:
    """{side: path} of two bzImages built for the test (ab_loop_machine.BUILDS)."""
    return {side: str(bzimage(tmp_path / side, BUILDS[side])) for side in schedule.SIDES}


def _kernels(tmp_path) -> dict:
    return {side: kernels.resolve(image) for side, image in _images(tmp_path).items()}


def test_the_loops_options_are_validates_own_flags():
    probes = ",".join(list(PROBES)[:2])          # any probes: their exercises are validate's
    assert start.validate_args(args()) == []
    assert start.validate_args(args(check=["kernel.memmap*", "env.*"], quick=True, rebind="namespace0.0", runs=10,
                                    exercise=probes)) == \
        ["--check", "kernel.memmap*", "--check", "env.*", "--quick", "--rebind", "namespace0.0", "--runs", "10",
         "--exercise", probes]


def test_the_plan_records_seed_order_kernels_and_nttrace(tmp_path):
    ks = _kernels(tmp_path)
    plan = start.plan(args(seed=42, boots=5), Loop(tmp_path / "ab" / "mine"), ks, "root=/dev/sda1 ro", "/usr/bin/nttrace")
    assert plan["seed"] == 42 and plan["rounds"] == 5
    assert plan["slots"] == [s.as_json() for s in schedule.make(5, 42)]
    assert plan["kernels"]["patched"]["build"] == BUILDS["patched"] and len(plan["kernels"]["base"]["sha256"]) == 64
    assert plan["nttrace"]["exe"] == "/usr/bin/nttrace" and plan["nttrace"]["version"]
    assert plan["cmdline"] == "root=/dev/sda1 ro" and plan["max_failures"] == 3
    unseeded = start.plan(args(), Loop(tmp_path / "ab" / "mine"), ks, "root=x", "/usr/bin/nttrace")
    assert isinstance(unseeded["seed"], int)        # drawn, and recorded


def test_a_command_line_without_root_is_refused():
    assert start.command_line(args(cmdline="root=/dev/vda ro quiet")) == "root=/dev/vda ro quiet"
    with pytest.raises(UsageError, match="has no root="):
        start.command_line(args(cmdline="quiet"))
    assert start.command_line(args(via="reboot")) == ""


def test_fewer_boots_than_a_test_needs_are_said_in_the_plan(tmp_path, capsys):
    assert start.boots_to_test() == 4          # docs/ab.md, "The rules": 4 runs a side at alpha 0.05
    ks = _kernels(tmp_path)
    for boots, said in ((2, True), (4, False)):
        plan = start.plan(args(seed=1, boots=boots), Loop(tmp_path / "ab" / "mine"), ks, "root=x", "/usr/bin/nttrace")
        start.print_plan(plan, [])
        out = capsys.readouterr().out
        assert ("  note: 2 boot(s) a side cannot test a change: the exact test across boots needs 4 a side" in out) \
            == said


@pytest.mark.parametrize("fault", [__import__("subprocess").TimeoutExpired(["systemctl", "enable"], 120),
                                   KeyboardInterrupt()])
def test_a_start_cut_while_installing_the_unit_leaves_nothing(tmp_path, monkeypatch, fault):
    from nttrace.ab import unit
    from nttrace.errors import CapabilityError
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    monkeypatch.setattr(start.os, "geteuid", lambda: 0)
    monkeypatch.setattr(start, "check_machine", lambda *a, **k: ([], []))
    removed = []
    monkeypatch.setattr(unit, "remove", lambda name, *a, **k: removed.append(name) or [])

    def install(*a, **k):
        raise fault
    monkeypatch.setattr(unit, "install", install)
    images = _images(tmp_path)
    a = args(base=images["base"], patched=images["patched"], cmdline="root=/dev/vda", dry_run=False, boots=1)
    with pytest.raises(CapabilityError if isinstance(fault, Exception) else KeyboardInterrupt):
        start.main(a, machine=None)
    assert not (tmp_path / "ab" / "mine").exists() and removed == ["mine"]


def test_the_plan_warns_when_the_code_the_unit_runs_as_root_is_writable_by_others(tmp_path, capsys):
    import os
    ks = _kernels(tmp_path)
    exe = tmp_path / "nttrace"
    exe.write_text("#!/bin/sh\n")
    for mode in (0o755, 0o777):
        os.chmod(exe, mode)
        plan = start.plan(args(seed=1), Loop(tmp_path / "ab" / "mine"), ks, "root=x", str(exe))
        start.print_plan(plan, [])
        out = capsys.readouterr().out
        named = f"{exe} (uid {exe.stat().st_uid}, mode {mode:o})" in out
        assert named == (mode == 0o777 or exe.stat().st_uid != 0), out
        if mode == 0o777:
            assert "  warning: the unit runs as root, at every boot, code a user other than root can change: " in out


@pytest.mark.parametrize("field", ["wait_quiet", "validate_timeout"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_bound_that_is_not_a_finite_number_is_bad_input(tmp_path, monkeypatch, field, value):
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    images = _images(tmp_path)
    with pytest.raises(UsageError, match="finite"):
        start.check_input(args(base=images["base"], patched=images["patched"], **{field: value}))


def test_a_start_cut_while_its_first_boot_is_asked_for_leaves_nothing(tmp_path, monkeypatch):
    from ab_loop_machine import SimMachine
    from nttrace.ab import unit
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    monkeypatch.setattr(start.os, "geteuid", lambda: 0)
    monkeypatch.setattr(start, "check_machine", lambda *a, **k: ([], []))
    monkeypatch.setattr(unit, "install", lambda *a, **k: [])
    images = _images(tmp_path)
    a = args(base=images["base"], patched=images["patched"], cmdline="root=/dev/vda", dry_run=False, boots=1)

    class Cut(SimMachine):
        def boot(self, kernel, cmdline, entry):
            raise KeyboardInterrupt                # Ctrl-C while kexec -l runs
    m_holder = {}

    def machine():
        loop = Loop(tmp_path / "ab" / "mine")
        m_holder["sim"] = Cut(loop)
        return m_holder["sim"].machine()
    monkeypatch.setattr(start, "real_machine", lambda loop, sched: machine())
    with pytest.raises(KeyboardInterrupt):
        start.main(a)
    assert m_holder["sim"].finished == [False]                 # unit removed, nothing left loaded
    assert not (tmp_path / "ab" / "mine").exists()


def _plan(tmp_path, name="mine"):
    return start.plan(args(seed=1, name=name), Loop.named(name), _kernels(tmp_path), "root=x", "/usr/bin/nttrace")


def test_two_starts_of_one_name_at_once_one_wins_and_the_other_leaves_it_alone(tmp_path, monkeypatch):
    """Both pass check_input; the claim is taken under the state root's
    lock by mkdir: one start makes the loop, the other exits 2 naming it,
    and the winner's schedule and state are whole."""
    import threading
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    sched = _plan(tmp_path)
    gate, outcomes = threading.Barrier(2), []

    def one():
        gate.wait()
        try:
            start.claim(Loop.named("mine"), sched)
            outcomes.append("claimed")
        except UsageError as exc:
            outcomes.append(str(exc))
    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert outcomes.count("claimed") == 1 and len(outcomes) == 2, outcomes
    assert "a loop named mine exists" in next(o for o in outcomes if o != "claimed"), outcomes
    loop = Loop.named("mine")
    assert loop.schedule() == sched and loop.state()["state"] == "running"
    assert oct(loop.dir.stat().st_mode & 0o777) == "0o700"


def test_a_second_loop_is_refused_while_one_runs_and_allowed_once_it_has_ended(tmp_path, monkeypatch):
    from nttrace.ab import unit
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    (tmp_path / "units" / f"{unit.unit_name('first')}.d").mkdir(parents=True)      # its units installed
    start.claim(Loop.named("first"), _plan(tmp_path, "first"))
    with pytest.raises(UsageError, match=r"loop first is running \(one loop at a time\): `nttrace ab stop first`"):
        start.claim(Loop.named("second"), _plan(tmp_path, "second"))
    assert not Loop.named("second").dir.exists()
    first = Loop.named("first")
    st = first.state()
    st["state"] = "stopped"
    first.save_state(st)
    start.claim(Loop.named("second"), _plan(tmp_path, "second"))
    (tmp_path / "units" / f"{unit.unit_name('second')}.d").mkdir(parents=True)
    assert start.running_loops() == ["second"]


def test_a_loop_that_ended_without_saving_its_state_blocks_no_start_and_says_so(tmp_path, monkeypatch, capsys):
    """A fault on a full disk: the step removed the units but could not
    write the state, which still says running. Neither `start` (another
    loop) nor `status` takes that for a loop that runs (fails if a state
    that says running is believed without its units: the next start refused
    for good, status saying running)."""
    from nttrace.ab import status, unit
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    start.claim(Loop.named("full"), _plan(tmp_path, "full"))        # running, no units: they went with the fault
    assert start.running_loops() == []
    start.claim(Loop.named("next"), _plan(tmp_path, "next"))
    s = status.status(Loop.named("full"), running=kernels.Running("6.1.0-57-amd64", "Linux version 6.1.0-57-amd64 "
                                                                  "(x@y) (gcc) #1 SMP Debian"), this_boot="b")
    assert s["state"] == "ended" and s["why"].startswith("its units are gone but its state says running: it ended "
                                                         "without saving its state") and s["next"] is None
    status.print_status(s)
    assert "nttrace ab full: ended (its units are gone" in capsys.readouterr().out


def test_a_start_cut_before_its_schedule_blocks_no_other_loop(tmp_path, monkeypatch):
    """kill -9 between mkdir and the schedule leaves a directory without
    one: its name stays taken (the user is told where it is), but it is not a
    running loop."""
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    (tmp_path / "ab" / "cut").mkdir(parents=True)
    assert start.running_loops() == []
    start.claim(Loop.named("other"), _plan(tmp_path, "other"))
    with pytest.raises(UsageError, match="a loop named cut exists"):
        start.claim(Loop.named("cut"), _plan(tmp_path, "cut"))


class Terminal(io.StringIO):
    """A terminal's stdin: the user's answer, typed."""

    def isatty(self):
        return True


def _main(tmp_path, monkeypatch, capsys, missing=(), stdin=None, **kw):
    """start.main on two test kernels with the machine's checks answered
    (`missing`: what check_machine found missing); (exit, stdout)."""
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    monkeypatch.setattr(start.os, "geteuid", lambda: 0)
    monkeypatch.setattr(start, "check_machine", lambda *a, **k: (["systemd is init (/run/systemd/system)"],
                                                                 list(missing)))
    images = _images(tmp_path)
    a = args(base=images["base"], patched=images["patched"], cmdline="root=/dev/vda", boots=2, seed=3, **kw)
    rc = start.main(a, stdin=stdin or io.StringIO(""))
    return rc, capsys.readouterr().out


def test_a_dry_run_prints_every_refusal_and_exits_with_the_first_ones_code(tmp_path, monkeypatch, capsys):
    same = UsageError("ab start: base and patched are one kernel (release 7.2.13, same build string and sha256)")
    monkeypatch.setattr(preflight_mod, "check", lambda ks, via: preflight(refusals=[same]))
    no_systemd = CapabilityError("ab start: systemd is not this machine's init")
    rc, out = _main(tmp_path, monkeypatch, capsys, missing=[no_systemd], no_watchdog=False)
    lines = out.splitlines()
    assert rc == 3                   # the machine's refusal first, then the kernels', then the reset's
    assert [ln for ln in lines if ln.startswith("  would refuse: ")] == [
        f"  would refuse: {no_systemd}", f"  would refuse: {same}",
        f"  would refuse: {reset.check(reset.plan_reset(args(no_watchdog=False), {}, 'kexec'), {})[1][0]}"]
    assert lines[0].startswith("nttrace ab mine: 2 boots of each kernel") and lines[-1] == \
        "dry run: nothing written, installed, loaded or booted"
    assert not (tmp_path / "ab" / "mine").exists()
    rc, out = _main(tmp_path, monkeypatch, capsys)           # the kernels' refusal alone: exit 2
    assert rc == 2 and f"  would refuse: {same}" in out
    monkeypatch.setattr(preflight_mod, "check", lambda ks, via: preflight())
    rc, out = _main(tmp_path, monkeypatch, capsys, no_watchdog=False)        # no watchdog, not acknowledged: exit 3
    assert rc == 3 and "  would refuse: ab start: this machine has no hardware watchdog" in out
    rc, out = _main(tmp_path, monkeypatch, capsys)
    assert rc == 0 and "would refuse" not in out


def test_a_real_start_raises_the_first_refusal_before_printing_or_writing_anything(tmp_path, monkeypatch, capsys):
    same = UsageError("ab start: base and patched are one kernel")
    monkeypatch.setattr(preflight_mod, "check", lambda ks, via: preflight(refusals=[same]))
    with pytest.raises(UsageError) as e:
        _main(tmp_path, monkeypatch, capsys, dry_run=False)
    assert e.value is same and capsys.readouterr().out == ""
    assert not (tmp_path / "ab" / "mine").exists()


def _start_for_real(tmp_path, monkeypatch, capsys, stdin, **kw):
    from ab_loop_machine import SimMachine
    from nttrace.ab import unit
    installed = []
    monkeypatch.setattr(unit, "install", lambda name, texts, *a, **k: installed.append(name) or [])
    sims = []

    def machine(loop, sched):
        sims.append(SimMachine(loop))
        return sims[-1].machine()
    monkeypatch.setattr(start, "real_machine", machine)
    rc, out = _main(tmp_path, monkeypatch, capsys, stdin=stdin, dry_run=False, **kw)
    return rc, out, installed, sims


def test_without_yes_and_without_a_terminal_the_start_is_refused_exit_2(tmp_path, monkeypatch, capsys):
    with pytest.raises(UsageError, match=r"no terminal to ask on before the first reboot: pass --yes"):
        _start_for_real(tmp_path, monkeypatch, capsys, io.StringIO("y\n"), yes=False)
    assert not (tmp_path / "ab" / "mine").exists()


def test_without_yes_the_start_asks_and_no_leaves_nothing(tmp_path, monkeypatch, capsys):
    for answer in ("n\n", "\n", ""):
        rc, out, installed, sims = _start_for_real(tmp_path, monkeypatch, capsys, Terminal(answer), yes=False)
        assert rc == 0 and installed == [] and sims == []
        assert "now? [y/N] not started: nothing written, installed, loaded or booted" in out
        assert not (tmp_path / "ab" / "mine").exists()
    rc, out, installed, sims = _start_for_real(tmp_path, monkeypatch, capsys, Terminal("y\n"), yes=False)
    first = schedule.make(2, 3)[0]
    assert f"start loop mine and kexec into the {first.side} kernel {BUILDS[first.side].split()[0]} now? [y/N] " in out
    assert rc == 0 and installed == ["mine"] and len(sims[0].asked) == 1
    assert Loop.named("mine").schedule()["reset"]["acknowledged_no_watchdog"] is True


def test_with_yes_the_start_arms_the_reset_path_and_boots_without_asking(tmp_path, monkeypatch, capsys,
                                                                         machine_root):
    rc, out, installed, sims = _start_for_real(tmp_path, monkeypatch, capsys, io.StringIO(""), yes=True)
    assert rc == 0 and "[y/N]" not in out and installed == ["mine"]
    drop = machine_root / "etc/sysctl.d/90-nttrace-ab-mine.conf"
    assert "kernel.panic = 10" in drop.read_text().splitlines()
    assert (machine_root / "proc/sys/kernel/panic").read_text() == "10\n"
    sched = Loop.named("mine").schedule()
    assert sched["cmdline"] == ("root=/dev/vda panic=10 oops=panic softlockup_panic=1 hung_task_panic=1 "
                                "nmi_watchdog=panic sysctl.kernel.panic_on_rcu_stall=1")
    assert sims[0].asked and sched["default_kernel"] == "6.1.0-57-amd64"


def test_a_start_whose_reset_path_cannot_be_armed_leaves_nothing(tmp_path, monkeypatch, capsys, machine_root):
    def arm(name, plan, *a, **k):
        (machine_root / "etc/sysctl.d").mkdir(parents=True)
        (machine_root / "etc/sysctl.d/90-nttrace-ab-mine.conf").write_text(
            "# nttrace-ab before kernel.panic=0\nkernel.panic = 10\n")
        raise RuntimeError("systemctl daemon-reload after writing ...: Failed")
    monkeypatch.setattr(reset, "arm", arm)
    with pytest.raises(CapabilityError, match="cannot install the loop: systemctl daemon-reload"):
        _start_for_real(tmp_path, monkeypatch, capsys, io.StringIO(""), yes=True)
    assert not (machine_root / "etc/sysctl.d/90-nttrace-ab-mine.conf").exists()       # disarmed with the unit
    assert not (tmp_path / "ab" / "mine").exists()


def test_the_plan_says_the_reset_the_default_kernel_the_configs_the_time_and_what_changes(tmp_path, capsys):
    ks = _kernels(tmp_path)
    r = reset.plan_reset(args(cmdline="root=/dev/vda panic=-1"), ks, "kexec")
    pre = preflight(config_diff=[f"CONFIG_X{i}: base=y patched=m" for i in range(14)])
    e = start.estimate(args(boots=4), {"boot_s": 31.4, "how": "measured: this boot's kernel + userspace"})
    sched = start.plan(args(seed=1, boots=4), Loop(tmp_path / "ab" / "mine"), ks, "root=/dev/vda panic=-1",
                       "/usr/bin/nttrace", r, pre, e)
    assert sched["cmdline"] == ("root=/dev/vda panic=-1 oops=panic softlockup_panic=1 hung_task_panic=1 "
                                "nmi_watchdog=panic sysctl.kernel.panic_on_rcu_stall=1")
    assert sched["preflight"] == {"config_diffs": pre.config_diffs, "default_boot": DEFAULT_BOOT}
    assert sched["reset"] == r and sched["default_kernel"] == "6.1.0-57-amd64"
    start.print_plan(sched, ["room for 8 runs (96 MiB)"])
    lines = capsys.readouterr().out.splitlines()
    assert ("    added by nttrace: oops=panic softlockup_panic=1 hung_task_panic=1 nmi_watchdog=panic "
            "sysctl.kernel.panic_on_rcu_stall=1") in lines
    assert "    kept, the command line's own: panic=-1 (the user's value wins)" in lines
    assert "  reset: a panic reboots at once (panic=-1, the command line's); NO WATCHDOG: a hang needs a hand on " \
           "the power button (--no-watchdog)" in lines
    assert "  default kernel: 6.1.0-57-amd64 (grub.cfg's default, saved_entry in /boot/grub/grubenv): every reset " \
           "and the loop's end boot it" in lines
    assert "  the configs of base and patched differ in 14 line(s):" in lines and \
        "    CONFIG_X11: base=y patched=m" in lines
    assert "    CONFIG_X12: base=y patched=m" not in lines and \
        "    ... and 2 more (schedule.json, \"preflight\")" in lines
    per = 31.4 + 600 + 7200
    assert f"  time per boot: 31 s to boot (measured: this boot's kernel + userspace) + up to 10 min waiting for a " \
           f"quiet host (--wait-quiet) + up to 2 h of validate (--validate-timeout): at most {start.duration(per)}; " \
           "the wait and validate are bounds, their real time is known after the first run (`nttrace ab status`)" \
           in lines
    assert f"  time in all: 8 boots, at most {start.duration(8 * per)}, of which the boots themselves about 4 min" \
        in lines
    changes = [ln for ln in lines if ln.startswith("  will change: ")]
    from nttrace.ab import unit
    assert changes[0].startswith("  will change: nttrace-ab@mine.service and nttrace-ab-deadline@mine.timer: enabled, "
                                 f"with their drop-ins under {unit.UNIT_DIR}")
    assert any(ln.startswith("  will change: ") and "90-nttrace-ab-mine.conf: kernel.panic_on_oops=1" in ln
               for ln in changes)
    assert ("  will change: the loop kernels' command line gains oops=panic softlockup_panic=1 hung_task_panic=1 "
            "nmi_watchdog=panic sysctl.kernel.panic_on_rcu_stall=1") in changes
    assert changes[-1] == "  will change: all of it undone when the loop ends (complete, `nttrace ab stop`, a fault)"


def test_a_default_the_bootloader_does_not_say_is_the_running_kernel_with_a_note(tmp_path, capsys):
    import os
    pre = preflight(default_boot={"loader": "unknown", "entry": None, "release": None, "how": "no grub.cfg, no BLS"})
    sched = start.plan(args(seed=1), Loop(tmp_path / "ab" / "mine"), _kernels(tmp_path), "root=x", "/usr/bin/nttrace",
                       None, pre)
    assert sched["default_kernel"] == os.uname().release
    assert sched["default_kernel_note"] == ("the bootloader's default entry could not be read (no grub.cfg, no BLS); "
                                            f"taken to be the running kernel {os.uname().release}")
    start.print_plan(sched, [])
    assert f"    note: {sched['default_kernel_note']}" in capsys.readouterr().out


def test_the_boot_time_is_this_boots_own_firmware_left_out_for_kexec(tmp_path):
    text = ("Startup finished in 12.5s (firmware) + 3.1s (loader) + 1.522s (kernel) + 2.135s (initrd) "
            "+ 1min 6.470s (userspace) = 1min 25.727s\ngraphical.target reached after 1min 6.4s in userspace\n")
    assert start.parse_analyze_time(text) == {"firmware": 12.5, "loader": 3.1, "kernel": 1.522, "initrd": 2.135,
                                              "userspace": 66.47}
    assert start.parse_timespan("712ms") == 0.712 and start.parse_timespan("soon") is None

    def run(cmd):
        return subprocess.CompletedProcess(cmd, 0, text, "")
    assert start.measured_boot("kexec", run) == \
        {"boot_s": 70.1, "how": "measured: this boot's kernel + initrd + userspace (systemd-analyze time)"}
    assert start.measured_boot("reboot", run)["boot_s"] == 85.7

    def no_systemd(cmd):
        return subprocess.CompletedProcess(cmd, 1, "", "System has not been booted with systemd as init system")
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    import os
    ticks = os.sysconf("SC_CLK_TCK")
    (proc / "1/stat").write_text("1 (init (x)) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 "
                                 f"{int(4.5 * ticks)} 1000 10\n")
    assert start.measured_boot("kexec", no_systemd, proc) == \
        {"boot_s": 4.5, "how": "measured: this boot's kernel until init started (/proc/1/stat); userspace not measured"}
    assert start.measured_boot("kexec", no_systemd, tmp_path / "none")["boot_s"] is None


def test_via_reboot_takes_the_one_shot_entries_the_preflight_found(tmp_path, monkeypatch):
    """The bootloader's one-shot entries (grub, BLS, systemd-boot) are the
    preflight's: the machine check does not look for a grub.cfg of its own."""
    monkeypatch.setattr(start.os, "geteuid", lambda: 0)
    monkeypatch.setattr(start.unit, "systemd_running", lambda: True)
    entries = {"base": "fedora-6.12.0-base.conf", "patched": "fedora-6.12.0-nt.conf"}
    pre = preflight()
    pre.entries = entries
    ks = _kernels(tmp_path)
    found, missing = start.check_machine(args(via="reboot"), ks, "")
    assert not any("grub" in str(e) for e in missing), missing
    sched = start.plan(args(via="reboot", seed=1), Loop(tmp_path / "ab" / "mine"), ks, "", "/usr/bin/nttrace",
                       None, pre)
    assert sched["grub_entries"] == entries


def test_the_start_help_names_the_watchdog_and_the_prompts_flags():
    from conftest import run_nttrace
    h = run_nttrace("ab", "start", "--help")
    text = " ".join(h.stdout.split())
    assert h.returncode == 0
    assert "--no-watchdog run without a hardware watchdog (required where the machine has none)" in text
    assert "--yes, -y start without asking before the first reboot (required without a terminal)" in text
    assert "(exit code as the real start's)" in text
