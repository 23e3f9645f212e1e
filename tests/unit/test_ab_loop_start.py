"""`ab start`'s options become validate's own flags; the plan records the
seed, the order, both kernels' identity and nttrace's; the command line
kexec passes must name a root."""
import argparse

import pytest

from ab_loop_machine import BUILDS, bzimage
from nttrace.ab import kernels, schedule, start
from nttrace.ab.loop import Loop
from nttrace.errors import UsageError
from nttrace.probes import PROBES


def args(**kw):
    base = dict(name="mine", base="b", patched="p", boots=4, check=None, quick=False, rebind=None, runs=30,
                exercise="", via="kexec", cmdline=None, seed=None, max_failures=3, wait_quiet=600.0,
                validate_timeout=7200.0, dry_run=True)
    base.update(kw)
    return argparse.Namespace(**base)


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
    assert start.boots_to_test() == 4          # README, "Reading an A/B": 4 runs a side at alpha 0.05
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
    monkeypatch.setattr(unit, "install", lambda *a, **k: None)
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
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    start.claim(Loop.named("first"), _plan(tmp_path, "first"))
    with pytest.raises(UsageError, match=r"loop first is running \(one loop at a time\): `nttrace ab stop first`"):
        start.claim(Loop.named("second"), _plan(tmp_path, "second"))
    assert not Loop.named("second").dir.exists()
    first = Loop.named("first")
    st = first.state()
    st["state"] = "stopped"
    first.save_state(st)
    start.claim(Loop.named("second"), _plan(tmp_path, "second"))
    assert start.running_loops() == ["second"]


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
