# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab step`, the state machine each boot runs, driven boot by boot
on a simulated machine (tests/ab_loop_machine.py): the running kernel and
the boot action are plain functions, so every fault happens on demand."""
import json

from ab_loop_machine import (BUILDS, DEFAULT, SimMachine, begun, bzimage, drive, first_slot_measured, make_loop,
                             recorded_run)
from nttrace.ab import step
from nttrace.ab.loop import slot_state


def sides_asked(sim):
    return [next(s for s, b in BUILDS.items() if b == k["build"]) for k in sim.asked]


def test_a_loop_boots_the_schedule_in_order_keeps_a_run_a_boot_and_ends_on_the_default_kernel(tmp_path):
    loop = make_loop(tmp_path, rounds=3, seed=11)
    sim = SimMachine(loop)
    codes = drive(loop, sim)
    order = [s.side for s in loop.slots()]
    assert sides_asked(sim) == order                       # the schedule's order, one boot a slot
    assert [s for s, _ in sim.validated] == order          # each run on the kernel its slot expects
    st = loop.state()
    assert st["state"] == "complete" and st["why"] == "complete: 6 of 6 boots measured"
    runs = loop.runs()
    assert sorted(runs) == [1, 2, 3, 4, 5, 6]
    for n, r in runs.items():
        assert r["ab_run"]["side"] == order[n - 1] and r["ab_run"]["complete"] is True
        assert r["ab_run"]["kernel"]["build"] == BUILDS[order[n - 1]]
        assert r["ab_run"]["nttrace"]["version"] == "0.1.0"
    assert sim.finished == [True]                          # unit removed, rebooted into the default
    assert sim.reports == [loop]                           # the report written once, at the end
    assert set(codes) == {0}


def test_a_kernel_that_panics_once_is_a_failed_boot_retried_and_the_loop_goes_on(tmp_path):
    """The panic leaves no record (no pstore): a reset nobody is blamed for,
    retried without spending the slot's attempt (fails if an unexplained
    reset counts as one of the slot's two attempts)."""
    loop = make_loop(tmp_path, rounds=2, seed=3)
    sim = SimMachine(loop)
    first_patched = next(s.slot for s in loop.slots() if s.side == "patched")
    # the first boot of patched lands on the default kernel (a panic, the firmware's fallback)
    landed = []

    def lands(n):
        slot = loop.state()["booting"]["slot"]
        if slot == first_patched and not landed:
            landed.append(n)
            return DEFAULT
        return None
    drive(loop, sim, lands=lands)
    st = loop.state()
    assert st["state"] == "complete"
    ss = slot_state(st, first_patched)
    assert ss["attempts"] == 1 and ss["unexplained"] == 1 and ss["outcome"] == "run"
    assert len(ss["failures"]) == 1 and ss["failures"][0]["blamed"] == "unknown"
    f = ss["failures"][0]
    assert f["expected"]["build"] == BUILDS["patched"] and f["found"]["release"] == DEFAULT.split()[0]
    assert sorted(loop.runs()) == [1, 2, 3, 4]
    assert st["consecutive_failures"] == 0


def test_a_slot_that_fails_twice_is_given_up_and_the_next_slot_booted(tmp_path):
    """Each failure blamed on the kernel (its pstore record): two attempts,
    then the slot is given up."""
    loop = make_loop(tmp_path, rounds=2, seed=3, max_failures=5)
    sim = SimMachine(loop)
    target = loop.slots()[0].slot
    release = BUILDS[loop.slots()[0].side].split()[0]

    def lands(n):
        if loop.state()["booting"]["slot"] == target:
            sim.crash_record(release, name=f"dmesg-ramoops-{n}")
            return DEFAULT
        return None
    drive(loop, sim, lands=lands)
    st = loop.state()
    assert st["state"] == "complete" and st["why"] == "complete: 3 of 4 boots measured"
    ss = slot_state(st, target)
    assert ss["attempts"] == 2 and ss["outcome"] == "failed boot" and len(ss["failures"]) == 2
    assert [f["blamed"] for f in ss["failures"]] == ["kernel", "kernel"]
    assert target not in loop.runs() and len(loop.runs()) == 3


def test_resets_nobody_is_blamed_for_are_retried_twice_without_the_slots_attempts_then_counted(tmp_path):
    """A reset no record explains (a power cut looks the same) gives the
    slot's attempt back, twice at most: then the slot's own two attempts
    follow (fails if unexplained resets spend attempts: the slot would be
    given up after two; or if they are retried without bound)."""
    loop = make_loop(tmp_path, rounds=1, seed=3, max_failures=9)
    sim = SimMachine(loop)
    target = loop.slots()[0].slot

    def lands(n):
        return DEFAULT if loop.state()["booting"]["slot"] == target else None
    drive(loop, sim, lands=lands)
    ss = slot_state(loop.state(), target)
    assert ss["outcome"] == "failed boot" and ss["unexplained"] == 2 and ss["attempts"] == 2
    assert len(ss["failures"]) == 4 and {f["blamed"] for f in ss["failures"]} == {"unknown"}


def test_k_consecutive_failed_boots_stop_the_loop_with_a_clear_status(tmp_path):
    loop = make_loop(tmp_path, rounds=3, seed=5, max_failures=3)
    sim = SimMachine(loop)
    sim.panics = {"7.2.13-nt"}                             # patched never comes up
    codes = drive(loop, sim)
    st = loop.state()
    assert st["state"] == "failed"
    assert st["why"].startswith("stopped after 3 consecutive failed boots (--max-failures 3)")
    assert "expected 7.2.13-nt, found 6.1.0-57-amd64" in st["why"]
    assert codes[-1] == 1
    assert sim.finished == [False]                         # nothing enabled; no reboot on a fault
    assert all(r["ab_run"]["side"] == "base" for r in loop.runs().values())   # the runs kept


def test_a_kernel_image_rebuilt_in_place_is_refused(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2)
    sim.reboot()
    assert step.step(loop, m) == 0
    # the same release rebuilt over the image between two boots
    bzimage(tmp_path / "patched.bzImage", BUILDS["patched"], body=b"rebuilt")
    sim.reboot()
    assert step.step(loop, m) == 1
    st = loop.state()
    assert st["state"] == "failed"
    assert st["why"].startswith("the patched kernel ") and "changed since the loop started" in st["why"] \
        and "no mixed builds" in st["why"]
    assert len(loop.runs()) == 1 and sim.finished == [True]


def test_a_run_cut_short_by_a_power_cut_is_redone_and_not_a_failed_boot(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2, seed=2)
    sim.reboot()

    def cut(argv, timeout):
        # the power goes while validate runs: the state says so, no run kept
        assert loop.state()["measuring"]["slot"] == 1
        (loop.runs_dir / "001-x.json.tmp").write_text('{"checks": [')    # a half-written file left behind
        raise KeyboardInterrupt
    m.validate = cut
    try:
        step.step(loop, m)
    except KeyboardInterrupt:
        pass
    assert loop.runs() == {}
    m.validate = sim.validate
    sim.reboot(lands_on=DEFAULT)          # back on the default kernel after the cut
    assert step.step(loop, m) == 0
    st = loop.state()
    assert [i["slot"] for i in st["interrupted"]] == [1]
    assert slot_state(st, 1)["failures"] == [] and st["consecutive_failures"] == 0
    assert not list(loop.runs_dir.glob("*.tmp"))          # the partial file removed
    assert sim.asked[-1]["build"] == BUILDS[loop.slots()[0].side]   # the slot booted again
    sim.reboot()
    step.step(loop, m)
    assert sorted(loop.runs()) == [1]


def test_disk_full_stops_the_loop_and_keeps_the_runs(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    sim.free = 10 << 20
    sim.reboot()
    assert step.step(loop, m) == 1
    st = loop.state()
    assert st["state"] == "failed" and st["why"].startswith("disk full: 10 MiB free")
    assert sorted(loop.runs()) == [1] and sim.finished == [True]


def test_a_write_that_fails_for_lack_of_room_stops_the_loop(tmp_path, monkeypatch):
    import errno
    import os
    loop, sim, m = begun(tmp_path, rounds=1)
    sim.reboot()
    real_write = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("-base.json.tmp") or \
                os.readlink(f"/proc/self/fd/{fd}").endswith("-patched.json.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)
    monkeypatch.setattr(os, "write", full)
    assert step.step(loop, m) == 1
    monkeypatch.undo()
    st = loop.state()
    assert st["state"] == "failed" and st["why"].startswith("disk full at slot 1")
    assert loop.runs() == {} and not list(loop.runs_dir.glob("*.tmp"))


def test_a_missing_namespace_stops_the_loop(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2, rebind="namespace0.0")
    sim.namespace = False
    sim.reboot()
    assert step.step(loop, m) == 1
    assert loop.state()["why"].startswith("namespace namespace0.0 is missing at slot 1")
    assert sim.validated == []


def test_a_validate_that_cannot_run_stops_the_loop_with_its_reason(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2)
    sim.reboot()
    sim.validate_result = (3, "", "nttrace: nttrace validate: needs CAP_BPF\n")
    assert step.step(loop, m) == 1
    assert loop.state()["why"] == "validate failed at slot 1 (" + loop.slots()[0].side + \
        "): exit 3: nttrace: nttrace validate: needs CAP_BPF"
    assert loop.runs() == {}


def test_a_check_that_fails_is_a_result_and_its_run_is_kept(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=1)
    sim.reboot()
    run = recorded_run(loop.slots()[0].side, 1)
    for c in run["checks"]:
        c["status"] = "fail"
    sim.validate_result = (1, json.dumps(run), "")
    assert step.step(loop, m) == 0
    assert loop.runs()[1]["ab_run"]["validate_exit"] == 1


def test_the_unit_running_twice_in_one_boot_does_nothing_the_second_time(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    asked = len(sim.asked)
    assert step.step(loop, m) == 0
    assert len(sim.asked) == asked and len(sim.validated) == 1


def test_a_stopped_loop_only_makes_sure_nothing_is_left_enabled(tmp_path):
    loop = make_loop(tmp_path, rounds=2)
    sim = SimMachine(loop)
    st = loop.state()
    st["state"] = "stopped"
    loop.save_state(st)
    assert step.step(loop, sim.machine()) == 0
    assert sim.finished == [False] and sim.asked == [] and sim.validated == []


def test_a_state_directory_others_can_write_is_refused(tmp_path):
    import os
    loop, sim, m = begun(tmp_path, rounds=1)
    os.chmod(loop.dir, 0o777)
    sim.reboot()
    assert step.step(loop, m) == 1
    assert "not root-only" in loop.state()["why"] and sim.validated == []


def test_a_boot_that_cannot_be_issued_stops_the_loop(tmp_path):
    loop = make_loop(tmp_path, rounds=1)
    sim = SimMachine(loop)
    m = sim.machine()

    def broken(kernel, cmdline, entry):
        raise RuntimeError("kexec -l failed: Cannot load /boot/x")
    m.boot = broken
    assert step.begin(loop, m) == 1
    st = loop.state()
    assert st["state"] == "failed" and "kexec -l failed" in st["why"] and sim.finished == [False]


def test_a_state_that_cannot_be_written_stops_the_loop_without_a_traceback(tmp_path, monkeypatch):
    import errno
    from nttrace.ab import loop as loop_module
    loop, sim, m = begun(tmp_path, rounds=2)
    sim.reboot()
    real_save = loop_module.Loop.save_state
    calls = {"n": 0}

    def full_once(self, state):
        calls["n"] += 1
        if calls["n"] == 1:          # the save before validate runs: the disk filled up
            raise OSError(errno.ENOSPC, "No space left on device", str(self.state_path))
        return real_save(self, state)
    monkeypatch.setattr(loop_module.Loop, "save_state", full_once)
    assert step.step(loop, m) == 1
    st = loop.state()
    assert st["state"] == "failed" and st["why"].startswith("cannot write the loop's files (disk full: ")
    assert sim.finished == [True]


def test_a_cut_after_the_run_was_stored_keeps_that_run_and_goes_on(tmp_path, monkeypatch):
    from nttrace.ab import loop as loop_module
    loop, sim, m = begun(tmp_path, rounds=2, seed=2)
    sim.reboot()
    real_save = loop_module.Loop.save_state

    def cut_after_the_run(self, state):
        if state["slots"].get("1", {}).get("outcome") == "run":
            raise KeyboardInterrupt            # the power goes before the state records the stored run
        return real_save(self, state)
    monkeypatch.setattr(loop_module.Loop, "save_state", cut_after_the_run)
    try:
        step.step(loop, m)
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    stored = loop.run_path(loop.slots()[0]).read_bytes()
    sim.reboot(lands_on=DEFAULT)
    assert step.step(loop, m) == 0
    st = loop.state()
    assert slot_state(st, 1)["outcome"] == "run" and st["interrupted"] == []
    assert loop.run_path(loop.slots()[0]).read_bytes() == stored          # kept, not redone
    assert len(sim.validated) == 1
    assert sim.asked[-1]["build"] == BUILDS[loop.slots()[1].side]         # on to slot 2


def test_ab_stop_while_validate_runs_stands_and_nothing_is_booted_after_it(tmp_path):
    from nttrace.ab import stop

    class Booter:
        def clear(self):
            return []
    loop, sim, m = begun(tmp_path, rounds=2)
    sim.reboot()
    asked = len(sim.asked)

    def validate_while_stopped(argv, timeout):
        # `nttrace ab stop` from a shell while this boot's validate runs
        stop.stop(loop, booter=Booter(), remove_unit=lambda name: [])
        return sim.validate(argv, timeout)
    m.validate = validate_while_stopped
    assert step.step(loop, m) == 0
    st = loop.state()
    assert st["state"] == "stopped" and st["why"] == "stopped by `nttrace ab stop`"
    assert len(sim.asked) == asked                       # no boot asked after the stop
    assert sorted(loop.runs()) == [1]                    # the run that finished is kept



def test_a_slot_whose_run_is_cut_again_and_again_is_given_up_not_booted_forever(tmp_path):
    # the patched kernel boots but crashes under the checks: every run of it is
    # cut short and the firmware brings up the default kernel
    loop = make_loop(tmp_path, rounds=1, seed=1, max_failures=3)
    sim = SimMachine(loop)
    m = sim.machine()
    patched = next(s.slot for s in loop.slots() if s.side == "patched")
    sim.cut_every_patched_run(m)
    st = loop.state()
    # the schedule ended with no patched run: never "complete"
    assert st["state"] == "failed", st["why"]
    assert st["why"].startswith("incomplete: no patched run (last: its run was cut short 2 times")
    assert sim.finished == [True] and sim.reports == [loop]      # the report written, the default kernel next
    ss = slot_state(st, patched)
    assert ss["outcome"] == "failed boot" and ss["attempts"] == 2      # redone once, then given up
    assert [i["slot"] for i in st["interrupted"]] == [patched, patched]
    assert "cut short" in ss["failures"][-1]["why"]
    assert sorted(loop.runs()) == [s.slot for s in loop.slots() if s.side == "base"]


def test_an_image_rebuilt_while_validate_runs_is_never_booted(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=1, seed=1)
    sim.reboot()
    nxt = loop.slots()[1].side

    def validate_while_rebuilt(argv, timeout):
        bzimage(tmp_path / f"{nxt}.bzImage", BUILDS[nxt], body=b"rebuilt")    # `make install` over it meanwhile
        return sim.validate(argv, timeout)
    m.validate = validate_while_rebuilt
    asked = len(sim.asked)
    assert step.step(loop, m) == 1
    st = loop.state()
    assert st["state"] == "failed" and st["why"].startswith(f"the {nxt} kernel ") and "no mixed builds" in st["why"]
    assert len(sim.asked) == asked and sim.finished == [True]   # not booted: the default kernel is
    assert sorted(loop.runs()) == [1]


def test_an_error_nobody_foresaw_stops_the_loop_and_leaves_nothing_enabled(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2)
    sim.reboot()

    def broken(limit):
        raise RuntimeError("no /proc/stat")
    m.wait_quiet = broken
    assert step.step(loop, m) == 1
    st = loop.state()
    assert st["state"] == "failed" and st["why"] == "internal error in the step (RuntimeError: no /proc/stat)"
    assert sim.finished == [True] and len(sim.asked) == 1


def test_a_first_boot_whose_state_cannot_be_written_is_a_failed_start_not_a_traceback(tmp_path, monkeypatch):
    import errno
    from nttrace.ab import loop as loop_module
    loop = make_loop(tmp_path, rounds=1)
    sim = SimMachine(loop)
    real_save = loop_module.Loop.save_state

    def full(self, state):
        if state["state"] == "running":
            raise OSError(errno.ENOSPC, "No space left on device", str(self.state_path))
        return real_save(self, state)
    monkeypatch.setattr(loop_module.Loop, "save_state", full)
    assert step.begin(loop, sim.machine()) == 1          # `ab start` then removes the loop and exits 3
    assert sim.finished == [False] and sim.asked == []


def test_the_last_step_asks_for_the_reboot_before_it_removes_its_unit(tmp_path, monkeypatch):
    """Removing the unit reloads systemd, which then holds the running step
    to its default start timeout and may kill it: the reboot is asked for
    first. On a fault (no reboot) the unit goes first, then what is pending."""
    from nttrace.ab import boot as boot_mod, step as step_mod, unit as unit_mod
    order = []
    monkeypatch.setattr(unit_mod, "remove", lambda name: order.append("unit removed") or ["disabled and removed"])
    monkeypatch.setattr(boot_mod.Booter, "clear", lambda self: order.append("cleared") or ["kexec -u"])
    monkeypatch.setattr(boot_mod.Booter, "_must", lambda self, cmd: order.append(" ".join(cmd)))
    from nttrace.ab.loop import Loop
    m = step_mod.real_machine(Loop(tmp_path / "lab"), {"via": "kexec"})
    assert m.finish(True) == ["kexec -u", "systemctl reboot (the default kernel)", "disabled and removed"]
    assert order == ["cleared", "systemctl --no-block reboot", "unit removed"]
    order.clear()
    assert m.finish(False) == ["disabled and removed", "kexec -u"]
    assert order == ["unit removed", "cleared"]
