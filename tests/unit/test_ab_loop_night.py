# SPDX-License-Identifier: Apache-2.0
"""What a loop left a night on a server reached only through its BMC must
never do: wait forever on a boot that never reaches the step (emergency
mode, a hang with PID 1 alive), run a loop kernel without the watchdog it
armed, stay on the suspect kernel after stopping, boot a patched kernel
because the default entry moved under it, or keep runs that cannot say
which build took them. The state machine is the real one (nttrace.ab.step)
on the simulated machine (tests/ab_loop_machine.py)."""
import json

from ab_loop_machine import BUILDS, DEFAULT, SimMachine, begun, drive, first_slot_measured, make_loop
from nttrace.ab import report, step
from nttrace.ab.loop import slot_state

ESB = {"device": "/dev/watchdog0", "identity": "i6300ESB timer", "driver": "i6300ESB", "module": "i6300esb",
       "nowayout": False, "runtime_s": 60, "reboot_s": 600, "kexec_s": 300}
RESET = {"cmdline_added": [], "sysctl": {}, "watchdog": ESB, "text": "a hang is reset by i6300ESB timer"}


# -- the boot deadline ---------------------------------------------------------------------
def test_each_step_stops_its_boots_deadline_first(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    assert sim.deadlines_stopped == ["boot-1"]
    sim.reboot()
    step.step(loop, m)
    assert sim.deadlines_stopped == ["boot-1", "boot-2"]


def test_a_boot_held_in_emergency_mode_is_reset_by_the_deadline_and_is_a_failed_boot(tmp_path):
    """The patched kernel cannot bring up a device fstab mounts: the boot
    drops to emergency.target, where PID 1 keeps feeding the watchdog and
    the step never starts. The deadline records the boot and resets; the
    default kernel's step then fails the slot, blamed on the kernel with the
    deadline's record, and boots it again (fails if nothing bounds a boot
    that never reaches the step: the machine waits in emergency mode)."""
    loop, sim, m = begun(tmp_path, rounds=1, seed=4)
    slot = loop.slots()[0]
    sim.reboot()                             # the slot's kernel starts...
    sim.held = ["emergency.target", "failed: mnt-pmem.mount"]
    assert step.deadline(loop, m) == 0       # ...and never reaches multi-user.target: the deadline fires
    assert sim.resets == ["boot-1"] and sim.validated == []
    passed = loop.state()["deadline_passed"]
    assert passed["release"] == BUILDS[slot.side].split()[0] and passed["targets"] == sim.held
    sim.held = []
    sim.reboot(lands_on=DEFAULT)             # the reset: the firmware brings up the default kernel
    assert step.step(loop, m) == 0
    ss = slot_state(loop.state(), slot.slot)
    [f] = ss["failures"]
    assert f["blamed"] == "kernel" and ss["attempts"] == 2      # explained: it spends the slot's attempt
    assert ("did not reach the loop's step within the boot deadline of 900 s (emergency.target, failed: "
            "mnt-pmem.mount): the deadline reset the machine") in f["why"]
    assert len(sim.asked) == 2               # the slot's kernel booted again


def test_the_deadline_resets_nothing_where_the_step_ran_or_runs(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    assert step.deadline(loop, m) == 0 and sim.resets == []           # this boot was handled
    sim.reboot()
    with loop.lock():                                                 # a step holds the lock
        assert step.deadline(loop, m) == 0 and sim.resets == []
    st = loop.state()
    st["state"] = "stopped"
    loop.save_state(st)
    assert step.deadline(loop, m) == 0 and sim.resets == []           # a loop that ended


def test_the_deadline_still_resets_where_its_record_cannot_be_written(tmp_path, monkeypatch):
    import errno

    from nttrace.ab import loop as loop_module
    loop, sim, m = begun(tmp_path, rounds=1)
    sim.reboot()

    def read_only(self, state):
        raise OSError(errno.EROFS, "Read-only file system", str(self.state_path))
    monkeypatch.setattr(loop_module.Loop, "save_state", read_only)
    assert step.deadline(loop, m) == 0 and sim.resets == ["boot-1"]
    assert any("could not be saved" in line for line in sim.logs)


# -- the watchdog, observed at every loop boot ----------------------------------------------
def test_a_loop_kernel_booted_without_its_watchdog_stops_the_loop_and_boots_the_default(tmp_path):
    """Its driver did not bind at this boot: /dev/watchdog0 is not there and
    nothing would reset a hang. The loop stops, and (a stopped loop) reboots
    into the default kernel (fails if the watchdog is assumed rather than
    observed, or if a stopped loop leaves the machine on the suspect kernel)."""
    loop, sim, m = begun(tmp_path, rounds=2, reset=RESET)
    sim.watchdog_seen = dict(sim.watchdog_seen, present=False, held_by_pid1=False, state=None)
    sim.reboot()
    assert step.step(loop, m) == 1
    st = loop.state()
    side = loop.slots()[0].side
    assert st["state"] == "failed" and st["why"] == (
        f"the watchdog is not armed at this boot of {BUILDS[side].split()[0]} (slot 1, {side}): /dev/watchdog0 "
        "does not exist at this boot: its driver (i6300esb) did not load or bind, so nothing resets a hang")
    assert sim.validated == [] and sim.finished == [True]
    assert any("LOOP STOPPED" in line and "rebooting into the default kernel" in line for line in sim.logs)


def test_a_stopped_loop_says_why_before_it_asks_for_the_reboot(tmp_path):
    """Once the reboot is asked for, systemd stops the step's unit and may
    kill the step before its next line: the journal must already hold why
    the loop stopped (seen in the lab: the step's line after the request
    was lost under load). Fails if the LOOP STOPPED line comes after finish."""
    loop, sim, m = begun(tmp_path, rounds=2, reset=RESET)
    sim.watchdog_seen = dict(sim.watchdog_seen, present=False, held_by_pid1=False, state=None)
    sim.reboot()
    said_before = []
    finish = m.finish
    m.finish = lambda reboot: said_before.append(list(sim.logs)) or finish(reboot)
    assert step.step(loop, m) == 1
    why = loop.state()["why"]
    assert len(said_before) == 1 and any(f"LOOP STOPPED: {why}; runs kept in " in line
                                         and line.endswith("; rebooting into the default kernel")
                                         for line in said_before[0]), said_before


def test_a_watchdog_systemd_did_not_arm_with_the_planned_timeout_stops_the_loop(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2, reset=RESET)
    sim.watchdog_seen = dict(sim.watchdog_seen, systemd_runtime_s=0.0)
    sim.reboot()
    assert step.step(loop, m) == 1
    assert "systemd's RuntimeWatchdogSec is 0 s at this boot, not the loop's 60 s" in loop.state()["why"]


# -- where a stopped loop leaves the machine ------------------------------------------------
def test_stay_keeps_a_stopped_loop_on_the_kernel_it_stopped_at(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2, reset=RESET, stay=True)
    sim.watchdog_seen = dict(sim.watchdog_seen, present=False)
    sim.reboot()
    assert step.step(loop, m) == 1 and sim.finished == [False]
    assert any("the machine stays where it is (--stay)" in line for line in sim.logs)


def test_a_fault_found_on_the_default_kernel_does_not_reboot_it_again(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    image = loop.schedule()["kernels"]["patched"]["image"]
    with open(image, "ab") as f:
        f.write(b"rebuilt")                  # the patched image rebuilt meanwhile
    sim.reboot(lands_on=DEFAULT)             # and the machine came back on its default kernel
    assert step.step(loop, m) == 1 and "changed since the loop started" in loop.state()["why"]
    assert sim.finished == [False]           # already on the default kernel: no reboot into it


# -- the default entry, read at every boot ---------------------------------------------------
def test_a_default_entry_moved_to_the_patched_kernel_mid_loop_stops_it_without_a_reboot(tmp_path):
    """GRUB_DEFAULT by index, and an update-grub mid-loop (a kernel package
    installed) moves it onto the patched kernel: every reset would now boot
    that kernel. The step reads the default at each boot, stops the loop and
    does not reboot (a reboot would boot it) (fails if the default is read
    only at start)."""
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    patched = BUILDS["patched"].split()[0]
    sim.default_entry = {"loader": "grub", "entry": "1>2", "release": patched,
                         "how": "/boot/grub/grub.cfg: set default=\"1>2\""}
    sim.reboot()
    assert step.step(loop, m) == 1
    st = loop.state()
    assert st["why"].startswith(f"the bootloader's default entry boots the patched kernel {patched} now")
    assert sim.finished == [False] and len(sim.validated) == 1


def test_a_default_entry_changed_to_another_working_kernel_is_recorded_as_the_default(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2)
    sim.default_entry = dict(sim.default_entry, release="6.1.0-58-amd64")
    sim.reboot()
    step.step(loop, m)
    st = loop.state()
    assert st["default_kernel"] == "6.1.0-58-amd64" and st["state"] == "running"
    assert any(e["what"] == "default entry changed" and e["now"] == "6.1.0-58-amd64" for e in st["events"])


# -- what a run says of its build ------------------------------------------------------------
def test_each_run_carries_its_kernels_build_id_and_config_and_headers_hashes(tmp_path):
    loop = make_loop(tmp_path, rounds=1)
    sim = SimMachine(loop)
    drive(loop, sim)
    for n, r in loop.runs().items():
        ident = r["ab_run"]["kernel_identity"]
        side = r["ab_run"]["side"]
        assert ident["build_id"] == f"buildid-{BUILDS[side].split()[0]}"
        assert set(ident) == {"build_id", "config_sha256", "headers_sha256"}
    assert "BUILD-IDS DIFFER" not in report.render(loop, "text")


def test_runs_of_one_kernel_taken_on_different_builds_are_named_in_the_report(tmp_path):
    loop = make_loop(tmp_path, rounds=2, seed=1)
    drive(loop, SimMachine(loop))
    path = next(p for p in sorted(loop.runs_dir.glob("*-base.json")))
    data = json.loads(path.read_text())
    data["ab_run"]["kernel_identity"]["build_id"] = "0123456789abcdef0123"
    path.write_text(json.dumps(data))
    text = report.render(loop, "text")
    assert f"  BUILD-IDS DIFFER between the base runs: 0123456789abcdef, buildid-{BUILDS['base'].split()[0]}" in text
