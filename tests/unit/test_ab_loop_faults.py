# SPDX-License-Identifier: Apache-2.0
"""Faults a loop left alone overnight meets, told apart: an orderly reboot
under validate (a cut run, redone), a reset while a kernel boots (not blamed
on the kernel without evidence: pstore, the watchdog's bootstatus, the
journal's boots), and a power cut that leaves the state file unreadable
(recovered from its previous copy, or rebuilt from the schedule, the events
and the runs, never a fresh loop). The state machine is the real one
(nttrace.ab.step); the machine is tests/ab_loop_machine.py's, its /proc and
/sys a directory laid out like them."""
import json
import os

import pytest

from ab_loop_machine import BUILDS, DEFAULT, SimMachine, begun, first_slot_measured, make_loop
from nttrace.ab import report, status, step, store
from nttrace.ab.loop import slot_state
from nttrace.kernel import last_reset


def _at_slot_2(tmp_path, rounds=2, seed=3, **kw):
    """A loop whose slot 1 was measured and whose slot 2 has just booted."""
    loop, sim, m = first_slot_measured(tmp_path, rounds=rounds, seed=seed, **kw)
    sim.reboot()
    return loop, sim, m


def _finish(loop, sim, m, limit=20):
    while loop.state()["state"] == "running" and limit:
        limit -= 1
        sim.reboot()
        step.step(loop, m)


# -- an orderly reboot during validate ----------------------------------------------------------
def test_an_orderly_reboot_during_validate_is_a_cut_run_redone_not_a_loop_failure(tmp_path, capsys):
    """An admin's reboot (or unattended-upgrades) while slot 2's validate runs:
    systemd stops the step with SIGTERM and ExecStopPost runs `step --ended`
    with SERVICE_RESULT=signal while the system is stopping. The loop stays
    running, the slot is redone at the next boot, no failed boot."""
    loop, sim, m = _at_slot_2(tmp_path)
    slot2 = loop.slots()[1]

    def killed_by_the_shutdown(argv, timeout):
        sim.shutdown = "reboot.target queued"
        raise KeyboardInterrupt                         # SIGTERM: the step dies where it stands
    m.validate = killed_by_the_shutdown
    with pytest.raises(KeyboardInterrupt):
        step.step(loop, m)
    assert step.ended(loop, "signal", "killed", "TERM", m=m) == 0
    st = loop.state()
    assert st["state"] == "running"
    assert st["measuring"] == {"slot": 2, "boot_id": "boot-2", "at": st["measuring"]["at"],
                               "cut_by": "reboot.target queued"}
    assert sim.logs[-1] == ("slot 2: the step was ended by an orderly shutdown (reboot.target queued) before its "
                            "run was stored: a run cut short, redone at the next boot")
    assert sim.finished == []                           # nothing removed: the loop goes on
    # the reboot lands on the firmware's default kernel (--via kexec): the slot is booted again
    m.validate = sim.validate
    sim.reboot(lands_on=DEFAULT)
    s = status.status(loop, running=sim.now, this_boot=m.boot_id())
    assert s["cut_pending"] == {"slot": 2, "by": "reboot.target queued"}
    assert step.step(loop, m) == 0
    st = loop.state()
    assert slot_state(st, 2)["failures"] == [] and st["consecutive_failures"] == 0
    assert st["interrupted"][-1]["by"] == "shutdown" and st["interrupted"][-1]["how"] == "reboot.target queued"
    assert sim.asked[-1]["build"] == BUILDS[slot2.side]
    _finish(loop, sim, m)
    assert loop.state()["state"] == "complete" and sorted(loop.runs()) == [1, 2, 3, 4]
    text = report.render(loop, "text")
    assert "run cut short and redone: slot 2 (at " in text and "): an orderly shutdown (reboot.target queued)" in text
    status.print_status(status.status(loop, running=sim.now, this_boot=m.boot_id()))
    assert "runs cut short and redone: 1 (1 by an orderly shutdown)" in capsys.readouterr().out


def test_a_validate_the_shutdown_killed_before_the_step_is_a_cut_run_too(tmp_path):
    """systemd's SIGTERM reaches validate first: it exits -15 with no report;
    the step sees the system stopping and leaves a cut, not a failed loop."""
    loop, sim, m = _at_slot_2(tmp_path)

    def terminated(argv, timeout):
        sim.shutdown = "systemctl is-system-running: stopping"
        return -15, "", ""
    m.validate = terminated
    assert step.step(loop, m) == 0
    st = loop.state()
    assert st["state"] == "running" and st["measuring"]["cut_by"] == "systemctl is-system-running: stopping"
    assert step.ended(loop, "success", m=m) == 0 and loop.state()["state"] == "running"


def test_a_validate_killed_with_no_shutdown_still_stops_the_loop(tmp_path):
    loop, sim, m = _at_slot_2(tmp_path)
    m.validate = lambda argv, timeout: (-9, "", "")
    assert step.step(loop, m) == 1
    assert loop.state()["why"].startswith("validate failed at slot 2")


def test_orderly_shutdowns_under_one_slot_are_redone_a_bounded_number_of_times(tmp_path):
    loop, sim, m = _at_slot_2(tmp_path, max_failures=9)
    for n in range(step.ORDERLY_CUTS):
        sim.shutdown = "reboot.target queued"
        step.ended(loop, "signal", m=m)                 # killed before validate stored anything
        sim.reboot(lands_on=DEFAULT)
        step.step(loop, m)
        if n < step.ORDERLY_CUTS - 1:
            assert slot_state(loop.state(), 2)["failures"] == []
            sim.reboot()                                # the slot's kernel again
    st = loop.state()
    f = slot_state(st, 2)["failures"]
    assert [x["kind"] for x in f] == ["cut"]
    assert f[0]["why"] == f"its run was cut by an orderly shutdown {step.ORDERLY_CUTS} times"
    # the slot had its attempts (each redo is one): given up, the next slot booted; the loop goes on
    assert slot_state(st, 2)["outcome"] == "failed boot" and st["state"] == "running"
    assert sim.asked[-1]["build"] == BUILDS[loop.slots()[2].side]


@pytest.mark.parametrize("is_running,jobs,why", [
    ("stopping\n", "", "systemctl is-system-running: stopping"),
    ("running\n", "1021 reboot.target start waiting\n1022 systemd-reboot.service start waiting\n",
     "reboot.target queued"),
    ("degraded\n", "77 kexec.target start waiting\n", "kexec.target queued"),
    ("running\n", "80 apt-daily.service start running\n", None),
    ("running\n", "81 reboot.target stop waiting\n", None)])
def test_a_shutdown_is_read_from_systemds_state_and_job_queue(is_running, jobs, why):
    assert step.shutting_down_from(is_running, jobs) == why


# -- a reset while a kernel boots ---------------------------------------------------------------
def test_a_power_cut_during_the_kexec_is_not_blamed_on_the_kernel(tmp_path):
    """The issue's case: a 2+2 loop, the power goes right after slot 1's run
    was stored, while the kexec into slot 2's kernel runs. The machine comes
    back on the default kernel by firmware; nothing recorded a crash and the
    journal holds no boot of slot 2's kernel: a failed boot, blamed on no one."""
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=3)
    slot2 = loop.slots()[1]
    expected = loop.schedule()["kernels"][slot2.side]["release"]
    sim.reboot(lands_on=DEFAULT)
    assert step.step(loop, m) == 0
    [f] = slot_state(loop.state(), 2)["failures"]
    assert f["kind"] == "boot" and f["blamed"] == "unknown"
    assert f["known"] == "the machine came back on 6.1.0-57-amd64 (the default kernel) by firmware"
    assert f["cause"] == (f"the journal holds no boot of {expected}: it did not start, or died before its journal "
                          "reached the disk; no crash record (pstore) and no watchdog reset recorded")
    assert f["reached"] == {"how": "firmware", "from_boot": None}
    assert f["records"]["journal"] == {"readable": True, "asking_found": True, "between": []}
    text = report.render(loop, "text")
    assert "slot 2 (" + slot2.side + ") at " in text and "failed boot [blamed: unknown]:\n      expected " in text
    [b] = json.loads(report.render(loop, "json"))["loop"]["failed_boots"]
    assert (b["blamed"], b["known"], b["cause"]) == ("unknown", f["known"], f["cause"])
    assert b["records"]["pstore"] == [] and b["reached"]["how"] == "firmware"
    s = status.status(loop, running=sim.now, this_boot=m.boot_id())
    assert s["failures"][0]["blamed"] == "unknown"
    assert sim.asked[-1]["build"] == BUILDS[slot2.side]         # retried: it still counts for the bounds


def test_a_panic_pstore_recorded_is_blamed_on_the_kernel_with_its_panic_line(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=1, seed=1)
    first = loop.slots()[0]
    expected = loop.schedule()["kernels"][first.side]["release"]
    old = sim.crash_record("6.1.0-57-amd64", "Kernel panic - not syncing: an old crash", name="dmesg-ramoops-1")
    os.utime(old, (500.0, 500.0))                              # before the loop asked this boot: not evidence
    sim.crash_record(expected, "Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b")
    sim.reboot(lands_on=DEFAULT, started=True)
    step.step(loop, m)
    [f] = slot_state(loop.state(), 1)["failures"]
    assert f["blamed"] == "kernel"
    assert f["cause"] == (f"{expected} crashed: Kernel panic - not syncing: Attempted to kill init! "
                          "exitcode=0x0000000b (pstore sys/fs/pstore/dmesg-ramoops-0)")
    assert [r["file"] for r in f["records"]["pstore"]] == ["sys/fs/pstore/dmesg-ramoops-0"]
    assert "[blamed: kernel]" in report.render(loop, "text")


def test_a_hang_the_watchdog_reset_after_the_kernel_started_is_blamed_on_it(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=1, seed=1)
    expected = loop.schedule()["kernels"][loop.slots()[0].side]["release"]
    (sim.root / "sys/class/watchdog/watchdog0/bootstatus").write_text("32\n")     # WDIOF_CARDRESET
    sim.reboot(lands_on=DEFAULT, started=True)
    step.step(loop, m)
    [f] = slot_state(loop.state(), 1)["failures"]
    assert f["blamed"] == "kernel"
    assert f["cause"] == (f"{expected} started (journal boot boot1started) and hung: the watchdog (watchdog0 "
                          "iTCO_wdt) reset the machine")


def test_a_watchdog_reset_before_the_kernel_recorded_its_start_is_not_blamed(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=1, seed=1)
    expected = loop.schedule()["kernels"][loop.slots()[0].side]["release"]
    (sim.root / "sys/class/watchdog/watchdog0/bootstatus").write_text("0x20\n")
    sim.reboot(lands_on=DEFAULT)
    step.step(loop, m)
    [f] = slot_state(loop.state(), 1)["failures"]
    assert f["blamed"] == "unknown"
    assert f["cause"].startswith(f"the watchdog (watchdog0 iTCO_wdt) reset the machine (a hang during the boot, "
                                 f"before {expected} recorded that it started)")


def test_a_kernel_that_started_then_vanished_without_a_record_is_not_blamed(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=1, seed=1)
    sim.reboot(lands_on=DEFAULT, started=True)
    step.step(loop, m)
    [f] = slot_state(loop.state(), 1)["failures"]
    assert f["blamed"] == "unknown" and "then the machine reset with no record of why" in f["cause"]


def test_resets_blamed_on_no_one_still_stop_the_loop_after_k_in_a_row(tmp_path):
    loop = make_loop(tmp_path, rounds=3, seed=5, max_failures=3)
    sim = SimMachine(loop)
    m = sim.machine()
    sim.panics = {"7.2.13-nt"}
    step.begin(loop, m)
    for _ in range(10):
        if loop.state()["state"] != "running":
            break
        sim.reboot()
        step.step(loop, m)
    st = loop.state()
    assert st["state"] == "failed" and st["why"].startswith("stopped after 3 consecutive failed boots")
    assert {f["blamed"] for s in st["slots"].values() for f in s["failures"]} == {"unknown"}


def test_the_journals_boot_list_is_read_in_order_and_between_the_asking_boot_and_this_one():
    text = (" IDX BOOT ID                          FIRST ENTRY                 LAST ENTRY\n"
            "  -2 0f6ad1d4c5f54f0b9f1a9a0a4cf1e6a1 Sun 2026-12-06 10:00:01 UTC Sun 2026-12-06 10:05:00 UTC\n"
            "  -1 3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4 Sun 2026-12-06 10:05:20 UTC Sun 2026-12-06 10:05:31 UTC\n"
            "   0 9a8b7c6d5e4f40312a1b2c3d4e5f6a7b Sun 2026-12-06 10:07:02 UTC Sun 2026-12-06 10:09:00 UTC\n")
    ids = last_reset.parse_list_boots(text)
    assert ids == ["0f6ad1d4c5f54f0b9f1a9a0a4cf1e6a1", "3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4",
                   "9a8b7c6d5e4f40312a1b2c3d4e5f6a7b"]
    # /proc/sys/kernel/random/boot_id has dashes; the journal's ids do not
    j = last_reset.between(ids, "0f6ad1d4-c5f5-4f0b-9f1a-9a0a4cf1e6a1", "9a8b7c6d-5e4f-4031-2a1b-2c3d4e5f6a7b",
                           {"3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4": "7.2.13-nt"}.get)
    assert j == {"readable": True, "asking_found": True,
                 "between": [{"boot_id": "3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4", "release": "7.2.13-nt"}]}
    assert last_reset.between([], "a", "b", lambda b: None)["readable"] is False


# -- a power cut that leaves the state unreadable ------------------------------------------------
def test_an_unreadable_state_is_recovered_from_its_previous_copy_and_the_step_says_so(tmp_path, capsys):
    """The issue's second case: a reset 15 s into slot 1's boot on a root
    whose rename was lost: state.json is half a file. The loop is not reset
    to a fresh one: the previous copy and the events beyond it say slot 1 was
    being measured, so the run is redone (a cut), not a failed boot."""
    loop, sim, m = begun(tmp_path, rounds=2, seed=3)
    sim.reboot()

    def power_cut(argv, timeout):
        raise KeyboardInterrupt
    m.validate = power_cut
    with pytest.raises(KeyboardInterrupt):
        step.step(loop, m)
    loop.state_path.write_text(loop.state_path.read_text()[:40])      # the write the cut lost
    st = loop.state()
    assert st["state"] == "running" and st["recovered_now"]["from"] == "state.json.prev"
    assert st["measuring"]["slot"] == 1                                # from events.jsonl, beyond the copy
    m.validate = sim.validate
    sim.reboot(lands_on=DEFAULT)
    assert step.step(loop, m) == 0
    st = loop.state()
    assert st["recoveries"][0]["text"] == ("state.json does not read whole: recovered from state.json.prev, "
                                           "1 event record of events.jsonl")
    assert any(line.startswith("t: STATE RECOVERED: state.json does not read whole") for line in sim.logs)
    assert [c["slot"] for c in st["interrupted"]] == [1] and slot_state(st, 1)["failures"] == []
    _finish(loop, sim, m)
    assert loop.state()["state"] == "complete" and sorted(loop.runs()) == [1, 2, 3, 4]
    assert "  STATE RECOVERED: state.json does not read whole: recovered from state.json.prev" in \
        report.render(loop, "text")
    status.print_status(status.status(loop, running=sim.now, this_boot=m.boot_id()))
    assert "STATE RECOVERED: state.json does not read whole" in capsys.readouterr().out


def test_a_state_neither_copy_holds_is_rebuilt_from_the_schedule_the_events_and_the_runs(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=3, max_failures=5)
    sim.reboot(lands_on=DEFAULT)
    step.step(loop, m)                          # slot 2: a failed boot, asked again
    sim.reboot()
    step.step(loop, m)                          # slot 2 measured, slot 3 asked
    before = loop.state()
    loop.state_path.write_bytes(b"\0" * 512)
    store.previous(loop.state_path).unlink()
    st = loop.state()
    assert st["recovered_now"]["from"] == "the schedule"
    for key in ("booting", "consecutive_failures", "handled_boot_id"):
        assert st[key] == before[key], key
    for n in ("1", "2", "3"):
        assert {k: st["slots"][n][k] for k in ("attempts", "outcome", "failures")} == \
            {k: before["slots"][n][k] for k in ("attempts", "outcome", "failures")}
    sim.reboot()
    assert step.step(loop, m) == 0
    _finish(loop, sim, m)
    st = loop.state()
    assert st["state"] == "complete" and sorted(loop.runs()) == [1, 2, 3, 4]
    assert st["recoveries"][0]["text"].startswith("state.json does not read whole: rebuilt from the schedule, ")
    assert len(slot_state(st, 2)["failures"]) == 1


def test_a_state_rebuilt_without_events_counts_the_kept_runs_and_boots_the_next_slot(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=3)
    for p in (loop.state_path, store.previous(loop.state_path), loop.events_path):
        p.unlink()
    st = loop.state()
    assert st["state"] == "running" and slot_state(st, 1)["outcome"] == "run"
    assert st["recovered_now"]["text"] == ("state.json is missing: rebuilt from the schedule, 0 event records of "
                                           "events.jsonl and 1 kept run it did not record")
    sim.reboot()
    assert step.step(loop, m) == 0
    assert sim.asked[-1]["build"] == BUILDS[loop.slots()[1].side]
    assert any("the recovered state records no boot in progress: booting the next slot" in x for x in sim.logs)


def test_a_kernel_that_crashes_under_the_checks_twice_is_blamed_where_pstore_kept_the_panic(tmp_path):
    loop = make_loop(tmp_path, rounds=1, seed=1, max_failures=3)
    sim = SimMachine(loop)
    m = sim.machine()
    patched = next(s.slot for s in loop.slots() if s.side == "patched")
    sim.cut_every_patched_run(m, on_cut=lambda: sim.crash_record(
        "7.2.13-nt", "Kernel panic - not syncing: Fatal exception in interrupt"))
    f = slot_state(loop.state(), patched)["failures"][-1]
    assert f["kind"] == "cut" and f["blamed"] == "kernel"
    assert f["why"].startswith("its run was cut short 2 times; the machine came back on 6.1.0-57-amd64 (the default "
                               "kernel) by firmware; 7.2.13-nt crashed: Kernel panic - not syncing: Fatal exception "
                               "in interrupt (pstore sys/fs/pstore/dmesg-ramoops-0)")


def test_a_boot_the_shutdown_under_way_refused_is_asked_again_not_counted_as_failed(tmp_path):
    loop, sim, m = begun(tmp_path, rounds=2, seed=3)
    sim.reboot()

    def refused(kernel, cmdline, entry):
        sim.shutdown = "reboot.target queued"        # the admin's reboot came while validate ran
        raise RuntimeError("systemctl --no-block kexec failed: Transaction for kexec.target/start is destructive")
    m.boot = refused
    assert step.step(loop, m) == 0
    st = loop.state()
    assert st["state"] == "running" and sorted(loop.runs()) == [1]
    assert st["booting"]["slot"] == 2 and st["booting"]["not_issued"] == "reboot.target queued"
    m.boot = sim.boot
    sim.reboot(lands_on=DEFAULT)                       # the admin's reboot: the firmware's default kernel
    assert step.step(loop, m) == 0
    st = loop.state()
    assert slot_state(st, 2)["failures"] == [] and slot_state(st, 2)["attempts"] == 1
    assert sim.asked[-1]["build"] == BUILDS[loop.slots()[1].side]
    _finish(loop, sim, m)
    assert loop.state()["state"] == "complete"


def test_a_stopped_loop_whose_state_is_lost_is_rebuilt_stopped(tmp_path):
    from nttrace.ab import stop

    class Booter:
        def clear(self):
            return []
    loop, sim, m = _at_slot_2(tmp_path)
    stop.stop(loop, booter=Booter(), remove_unit=lambda name: [])
    for p in (loop.state_path, store.previous(loop.state_path)):
        p.write_text("{")
    st = loop.state()
    assert (st["state"], st["why"], st["booting"]) == ("stopped", "stopped by `nttrace ab stop`", None)
    assert step.step(loop, m) == 0 and len(sim.asked) == 2 and sim.finished == [False]    # nothing booted


def test_a_panic_systemd_pstore_moved_out_of_pstore_at_boot_is_found_where_it_put_it(tmp_path):
    """systemd-pstore.service empties /sys/fs/pstore early at boot, before the
    step runs: an EFI record lands in /var/lib/systemd/pstore/<id>/, a ramoops
    one in /var/lib/systemd/pstore/ itself."""
    efi = tmp_path / "var/lib/systemd/pstore/17330510450"
    efi.mkdir(parents=True)
    (efi / "dmesg-efi-173305104501001").write_text(
        "Panic#2 Part1\n<4>[    2.917] CPU: 0 UID: 0 PID: 1 Comm: swapper/0 Tainted: G        W          "
        "7.2.13-nt #1\n<0>[    2.918] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n")
    (efi / "dmesg.txt").write_text("dmesg-efi-173305104501001:\n(the reconstruction: not read twice)\n")
    records = last_reset.pstore(tmp_path, since=None)
    assert records == [{"file": "var/lib/systemd/pstore/17330510450/dmesg-efi-173305104501001",
                        "at": records[0]["at"], "release": "7.2.13-nt",
                        "panic": "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"}]
    a = last_reset.assess({"pstore": records}, "7.2.13-nt", "6.1.0-57-amd64", "6.1.0-57-amd64", "by firmware")
    assert a["blamed"] == "kernel" and a["cause"].startswith("7.2.13-nt crashed: Kernel panic - not syncing: VFS")


def test_the_journals_account_is_read_through_journalctl(tmp_path, monkeypatch):
    """journal() as the step runs it: `journalctl --list-boots`, then each
    boot's kernel log for its "Linux version" line (a journalctl on PATH
    answering as systemd 252's does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    js = bin_dir / "journalctl"
    js.write_text("#!/bin/sh\n"
                  "case \"$*\" in\n"
                  "*--list-boots*) printf '%s\\n' "
                  "'IDX BOOT ID                          FIRST ENTRY                 LAST ENTRY' "
                  "' -2 0f6ad1d4c5f54f0b9f1a9a0a4cf1e6a1 Sun 2026-12-06 10:00:01 UTC Sun 2026-12-06 10:05:00 UTC' "
                  "' -1 3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4 Sun 2026-12-06 10:05:20 UTC Sun 2026-12-06 10:05:31 UTC' "
                  "'  0 9a8b7c6d5e4f40312a1b2c3d4e5f6a7b Sun 2026-12-06 10:07:02 UTC Sun 2026-12-06 10:09:00 UTC';;\n"
                  "*'-b 3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4 -k'*) printf '%s\\n' "
                  "'Linux version 7.2.13-nt (builder@lab) (gcc 15.3.0) #1 SMP PREEMPT_DYNAMIC' "
                  "'Command line: root=/dev/sda1 ro nttrace.ab_from=0f6ad1d4-c5f5-4f0b-9f1a-9a0a4cf1e6a1';;\n"
                  "*) exit 1;;\n"
                  "esac\n")
    js.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    j = last_reset.journal("0f6ad1d4-c5f5-4f0b-9f1a-9a0a4cf1e6a1", "9a8b7c6d-5e4f-4031-2a1b-2c3d4e5f6a7b")
    assert j == {"readable": True, "asking_found": True,
                 "between": [{"boot_id": "3b2c9e0e7d1e4b3aa7e7f1b4b1c2d3e4", "release": "7.2.13-nt"}]}
    # a journal that does not hold the asking boot (volatile, or rotated away) tells nothing
    assert last_reset.journal("11111111-2222-3333-4444-555555555555", "9a8b7c6d-5e4f-4031-2a1b-2c3d4e5f6a7b") == \
        {"readable": True, "asking_found": False, "between": []}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert last_reset.journal("a", "b") == {"readable": False, "asking_found": False, "between": []}


def test_systemd_not_running_is_not_a_shutdown(tmp_path, monkeypatch):
    """Where systemctl cannot reach systemd (not PID 1, as on this host) or is
    not there, nothing says the system is stopping: a validate that failed
    is the loop's fault to stop on, not a cut."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert step.system_shutting_down() is None
