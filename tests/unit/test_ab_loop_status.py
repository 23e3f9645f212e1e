# SPDX-License-Identifier: Apache-2.0
"""`ab status` mid-loop (boot k of N, the kernel now, failures, time left
at the pace so far) and `ab stop` (state stopped, nothing pending, runs
kept, and the next boot's step does nothing but make sure of it)."""
import pytest

from ab_loop_machine import DEFAULT, first_slot_measured, make_loop
from nttrace.ab import status, step, stop, unit


def test_status_mid_loop(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=3, seed=9)
    sim.reboot(lands_on=DEFAULT)
    step.step(loop, m)                    # slot 2's first boot failed; retried
    s = status.status(loop, running=sim.now, this_boot=m.boot_id())
    assert (s["state"], s["done"], s["settled"], s["total"]) == ("running", 1, 1, 6)
    slots = loop.slots()
    assert s["next"] == {"slot": 2, "side": slots[1].side,
                         "release": loop.schedule()["kernels"][slots[1].side]["release"]}
    assert s["running_kernel"] == {"release": "6.1.0-57-amd64", "is": None}
    assert [f["slot"] for f in s["failures"]] == [2] and s["consecutive_failures"] == 1
    # pace: one slot settled at the clock's last stored time since the start (created 1000.0)
    stored = loop.state()["slots"]["1"]["stored_at"]
    assert s["eta_s"] == round((stored - 1000.0) * 5)
    status.print_status(s)


def test_stop_ends_the_loop_keeps_the_runs_and_leaves_nothing_pending(tmp_path, capsys):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=9)
    unit_dir = tmp_path / "units"            # make_loop wrote the loop's drop-ins there
    assert unit.installed("t", unit_dir)
    systemctl_calls = []

    class Booter:
        cleared = 0

        def clear(self):
            Booter.cleared += 1
            return ["kexec -u"]

    def remove(name):
        return unit.remove(name, unit_dir, systemctl=lambda a: systemctl_calls.append(a) or
                           __import__("subprocess").CompletedProcess(a, 0, "", ""))
    done = stop.stop(loop, booter=Booter(), remove_unit=remove)
    assert loop.state()["state"] == "stopped" and loop.state()["booting"] is None
    assert Booter.cleared == 1 and not unit.installed("t", unit_dir) and not list(unit_dir.iterdir())
    assert ["disable", "nttrace-ab@t.service", "nttrace-ab-deadline@t.timer", "nttrace-ab-deadline@t.service"] \
        in systemctl_calls
    assert done[-1] == "kexec -u" and len(loop.runs()) == 1
    sim.reboot()
    assert step.step(loop, m) == 0 and sim.finished == [False] and len(sim.validated) == 1


def test_the_unit_runs_the_schedules_own_command_and_nothing_else(tmp_path):
    """The instance's drop-in resets the template's commands and sets the
    schedule's own (fails if a drop-in appends to the template's
    ExecStart=, which would run /usr/bin/nttrace too)."""
    texts = unit.dropins("mine", "/opt/venv/bin/nttrace", tmp_path, 9000, 900, ["7.2.13-base", "7.2.13-nt"])
    text = texts["nttrace-ab@mine.service"]
    assert f"ConditionPathExists=\nConditionPathExists={tmp_path}/mine/schedule.json\n" in text
    assert [ln for ln in text.splitlines() if ln.startswith("Exec")] == [
        "ExecStart=", "ExecStart=/opt/venv/bin/nttrace ab step mine",
        "ExecStopPost=", "ExecStopPost=/opt/venv/bin/nttrace ab step mine --ended"]
    template = (unit.DATA / "nttrace-ab@.service").read_text()
    assert "\nType=oneshot\n" in template and "\nWantedBy=multi-user.target\n" in template
    deadline = texts["nttrace-ab-deadline@mine.service"]
    assert [ln for ln in deadline.splitlines() if ln.startswith(("Exec", "Condition"))] == [
        "ConditionKernelVersion=|7.2.13-base", "ConditionKernelVersion=|7.2.13-nt",
        "ExecStart=", "ExecStart=/opt/venv/bin/nttrace ab step mine --deadline"]
    assert "\nOnBootSec=\nOnBootSec=900\n" in texts["nttrace-ab-deadline@mine.timer"]


@pytest.mark.parametrize("result,why", [
    ("timeout", "systemd ended the step after the unit's TimeoutStartSec ("),
    ("signal", "the step ended without finishing its own work (systemd says: signal, killed, KILL)")])
def test_a_step_systemd_ended_stops_the_loop_from_execstoppost(tmp_path, result, why):
    """The step hung past TimeoutStartSec (or was killed): it wrote nothing
    after "measuring". ExecStopPost's `step --ended` finds the loop still
    running and stops it as any fault does: failed with why, nothing left
    enabled, runs kept; a step that ended well (success), or a loop the step
    had stopped itself, is left as it is."""
    loop, sim, m = _at_slot_2(tmp_path, seed=3)
    sim.finished.clear()

    def hangs(argv, timeout):                        # systemd kills it mid-validate: nothing after
        st = loop.state()
        assert st["measuring"]
        raise KeyboardInterrupt
    m.validate = hangs
    with pytest.raises(KeyboardInterrupt):
        step.step(loop, m)
    assert loop.state()["state"] == "running" and loop.state()["measuring"]
    assert step.ended(loop, "success", m=m) == 0 and loop.state()["state"] == "running"   # not every stop
    sim.bid -= 1            # the boot before, whose step asked for this one: its shutdown killed it, as asked
    assert step.ended(loop, "signal", "killed", "TERM", m=m) == 0 and loop.state()["state"] == "running"
    sim.bid += 1
    rc = step.ended(loop, result, "killed", "KILL", m=m)
    st = loop.state()
    assert rc != 0 and st["state"] == "failed" and st["why"].startswith(why), st["why"]
    assert sim.finished == [True] and len(loop.runs()) == 1             # the default kernel next
    assert step.ended(loop, result, m=m) == 0 and sim.finished == [True]    # stopped already: left as it is


def test_the_unit_runs_on_a_settled_system_without_holding_up_the_boot_and_is_bounded(tmp_path):
    loop = make_loop(tmp_path, rounds=1)
    sched = loop.schedule()
    template = (unit.DATA / "nttrace-ab@.service").read_text().splitlines()
    assert "After=multi-user.target" in template and "WantedBy=multi-user.target" in template
    text = unit.dropins("t", "/usr/bin/nttrace", loop.dir.parent, unit.timeout_s(sched), 900, ["r"])[unit.unit_name("t")]
    lines = text.splitlines()
    bound = [ln.split("=", 1)[1] for ln in lines if ln.startswith("TimeoutStartSec=")]
    assert len(bound) == 1 and bound[0].isdigit()
    assert int(bound[0]) > sched["wait_quiet_s"] + sched["validate_timeout_s"]


def _at_slot_2(tmp_path, seed: int):
    """A 2-round loop whose slot 1 was measured and whose slot 2 has just
    booted: (loop, sim, machine)."""
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=seed)
    sim.reboot()
    return loop, sim, m


def test_status_while_validate_runs_says_this_boot_is_measured_and_which_comes_next(tmp_path, capsys):
    loop, sim, m = _at_slot_2(tmp_path, seed=9)
    seen = {}

    def validate(argv, timeout):
        seen["status"] = status.status(loop, running=sim.now, this_boot=m.boot_id())
        return sim.validate(argv, timeout)
    m.validate = validate
    step.step(loop, m)
    s = seen["status"]
    assert s["measuring"]["slot"] == 2 and s["next"]["slot"] == 3
    assert s["eta_s"] == round((loop.state()["slots"]["1"]["stored_at"] - 1000.0) * 3)
    status.print_status(s)
    out = capsys.readouterr().out
    assert "  boot 2 of 4 now: validate running since " in out and "  boot 3 of 4 next: " in out
    # the same record seen from a later boot is a run cut short: that slot is next again
    later = status.status(loop, running=sim.now, this_boot="another boot")
    assert later["measuring"] is None and later["next"]["slot"] == 3


def test_stop_of_a_loop_whose_schedule_is_damaged_still_removes_its_unit(tmp_path):
    import subprocess

    import pytest

    from nttrace.errors import UsageError
    loop = make_loop(tmp_path, rounds=1)
    loop.schedule_path.write_text('{"slots": [')              # cut mid-write by hand, or edited
    unit_dir = tmp_path / "units"                            # make_loop wrote the loop's drop-ins there

    def remove(name):
        return unit.remove(name, unit_dir, systemctl=lambda a: subprocess.CompletedProcess(a, 0, "", ""))
    with pytest.raises(UsageError, match="missing or damaged"):
        stop.stop(loop, remove_unit=remove)
    assert not unit.installed("t", unit_dir)


def test_a_path_systemd_would_expand_or_split_is_refused_not_written_into_the_unit(tmp_path):
    import pytest

    from nttrace.errors import UsageError
    for exe, root in (("/opt/v%i/bin/nttrace", tmp_path), ("/opt/$HOME/nttrace", tmp_path),
                      ("/usr/bin/nttrace", tmp_path / "50%"), ("/usr/bin/nttrace", tmp_path / "a\nExecStart=/bin/sh"),
                      ("/opt/my tools/nttrace", tmp_path)):
        with pytest.raises(UsageError, match="systemd"):
            unit.dropins("t", exe, root, 9000, 900, ["r"])
