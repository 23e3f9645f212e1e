# SPDX-License-Identifier: Apache-2.0
"""What the units run at each boot (`nttrace ab step NAME`): the loop's
state machine. Everything it reads from the machine or does to it goes
through a `Machine` (the real one below; the tests pass plain functions), so
every boot and every fault can be driven without rebooting.

At each boot, in order:
  1. the loop is not running any more (stopped, complete, failed): make
     sure nothing is enabled or pending, exit;
  2. the unit already handled this boot (same boot id): nothing to do;
  3. this boot's deadline is stopped (the step started in time);
  4. the state directory is root-only; no kernel's image, initrd, module
     tree, headers or config changed since the start (sha256): else the
     loop stops (no mixed builds); the bootloader's default entry, read
     again, does not boot one of the loop's patched kernels (an update-grub
     can move an index default): else the loop stops where it is;
  5. the running kernel (release AND build string) is the one the slot
     expects: else a failed boot for that slot, retried once, then the slot
     is given up; K consecutive failed boots stop the loop. The failure
     says what is known (the kernel the machine came back on, by firmware
     or by kexec from which boot) and the cause where the machine recorded
     one (pstore, the watchdog's bootstatus, the journal's boots, the boot
     deadline's record); it is blamed on the kernel only on such evidence.
     A reset nobody is blamed for ("unknown": a power cut looks the same)
     is retried without spending the slot's attempts, twice at most. A run
     cut short (a power cut, a reset, an orderly shutdown during validate)
     is not a failed boot: the slot is redone (a run cut twice with no
     shutdown recorded is a crash under the checks, three orderly
     shutdowns are as many as are redone: then a failure of the slot);
  6. the night is over (--until): the loop ends here, its report written,
     the default kernel booted;
  7. the watchdog the loop armed is there, held by systemd with the
     planned timeout: else the loop stops (the kernel would run
     unprotected);
  8. room on the disk and the namespace (--rebind) are there: else stop;
  9. read the boot's settings (command line, how it was reached, turbo,
     THP, SMT, C-states, microcode, governors) and its kernel's identity
     (build-id, config and headers hashes), wait (bounded) for a quiet
     host, run validate, keep its JSON whole (tmp + fsync + rename) with
     what the loop knows of the boot; a report where any of the loop's
     measured checks skipped or gave no primary figure
     (nttrace.ab.measured) is a failed measurement (counted as a failed
     boot, its report kept under unmeasured/, never a run); a validate
     that cannot run (exit 2, 3, 4, no JSON) stops the loop;
 10. boot the next slot's kernel (its image's sha256 checked once more
     right before; a kexec's command line marked with this boot's id), or
     after the last: write the report, remove the units, reboot into the
     default kernel. A boot a shutdown under way refused is asked again
     from the boot after it, not counted as failed. A schedule that ends
     with a kernel without a run ends the loop failed ("incomplete"), never
     complete.
A loop that stops on a fault keeps its runs, removes its units, leaves
nothing pending and reboots into the default kernel (unless it was started
with --stay, it already runs there, or the default entry is what went
wrong); where its state cannot be saved (a full disk) the units are gone
all the same, and `ab status` says so.
A state file that does not read whole is recovered (nttrace.ab.loop), and
the step says so in the journal and the state.

The boot deadline (`ab step NAME --deadline`, from the deadline timer at a
boot that never got here) records that boot's failure where it can and
resets the machine (nttrace.ab.unit).
"""
from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from nttrace.kernel import boot_id, boot_settings, last_reset
from nttrace.kernel import build_id as kernel_build_id
from nttrace.ab import boot, kernels, measured, preflight, reset, schedule, store, unit
from nttrace.ab.loop import Loop, expected_found, nttrace_identity, slot_state
from nttrace.errors import EXIT_CHECK_FAILED, EXIT_OK

# room a run needs (a validate --json report is well under 1 MiB) and a floor
# kept free for the rest of the machine
RUN_BYTES = 4 << 20
FREE_FLOOR_BYTES = 64 << 20
# a slot's run cut by orderly shutdowns is redone this many times at most
ORDERLY_CUTS = 3
# resets no record explains, retried without spending a slot's attempts
UNEXPLAINED_RETRIES = 2
# what a boot that never reached the step may have been held in
HELD_TARGETS = ("emergency.target", "rescue.target")
SHUTDOWN_TARGETS = ("reboot.target", "poweroff.target", "halt.target", "kexec.target")


def say(msg: str) -> None:
    print(f"nttrace ab: {msg}", file=sys.stderr, flush=True)


def shutting_down_from(is_running: str, jobs: str) -> str | None:
    """Why systemd's answers say the system is shutting down, or None:
    `systemctl is-system-running` says "stopping", or `systemctl list-jobs`
    holds a start job of reboot/poweroff/halt/kexec.target."""
    if is_running.strip() == "stopping":
        return "systemctl is-system-running: stopping"
    for line in jobs.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in SHUTDOWN_TARGETS and parts[2] == "start":
            return f"{parts[1]} queued"
    return None


def system_shutting_down(run=subprocess.run) -> str | None:
    try:
        state = run(["systemctl", "is-system-running"], capture_output=True, text=True, timeout=10).stdout
        jobs = run(["systemctl", "list-jobs", "--no-legend", "--no-pager"], capture_output=True, text=True,
                   timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return shutting_down_from(state or "", jobs or "")


@dataclass
class Machine:
    """The machine as the step sees it. Defaults are the real machine."""
    running: Callable[[], kernels.Running] = kernels.Running.now
    boot_id: Callable[[], str] = boot_id
    boot: Callable[[dict, str, "str | None"], None] = None          # (kernel, cmdline, grub entry)
    finish: Callable[[bool], list] = None                           # (reboot into default?) -> what it did
    wait_quiet: Callable[[float], dict] = None
    validate: Callable[[list[str], float], tuple[int, str, str]] = None
    free_bytes: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free
    namespace_present: Callable[[str], bool] = lambda ns: Path(f"/sys/bus/nd/devices/{ns}").is_dir()
    write_report: Callable[[Loop], object] = None
    clock: Callable[[], float] = time.time
    nttrace: Callable[[], dict] = nttrace_identity
    log: Callable[[str], None] = say
    settings: Callable[[], dict] = boot_settings.read                # this boot's settings
    shutting_down: Callable[[], "str | None"] = system_shutting_down  # why the system is going down, or None
    # (the booting record, this boot's id) -> what the machine recorded of why the boot before ended
    last_reset: Callable[[dict, str], dict] = lambda booting, this: last_reset.read(
        Path("/"), booting.get("at"), booting.get("from_boot"), this)
    stop_deadline: Callable[[], "str | None"] = lambda: None        # -> None, or why it could not
    default_boot: Callable[[], dict] = lambda: {}                   # the bootloader's default now (Loader.default())
    watchdog: Callable[[str], dict] = reset.observed                # (device) -> what this boot has of it
    build_id: Callable[[], "str | None"] = kernel_build_id.read            # the running kernel's
    targets: Callable[[], list] = lambda: []                        # the special targets active (emergency, rescue)
    reset_now: Callable[[], None] = lambda: None                    # reset the machine (the boot deadline)


def active_targets(run=subprocess.run) -> list[str]:
    """The targets of HELD_TARGETS systemd has active, and the units that
    failed (what held a boot that never reached the step)."""
    out = []
    try:
        for t in HELD_TARGETS:
            if run(["systemctl", "is-active", "--quiet", t], timeout=10).returncode == 0:
                out.append(t)
        p = run(["systemctl", "list-units", "--failed", "--plain", "--no-legend", "--no-pager"],
                capture_output=True, text=True, timeout=10)
        out += [f"failed: {line.split()[0]}" for line in (p.stdout or "").splitlines() if line.split()]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def real_machine(loop: Loop, sched: dict) -> Machine:
    from nttrace.ab import bootloader, report
    from nttrace.kernel import conditions
    booter = boot.Booter(sched["via"])

    def finish(reboot: bool) -> list:
        # The reboot is asked for before the unit goes: removing the unit
        # reloads systemd, which then holds the running step to its default
        # start timeout (90 s) and may kill it before it asks. A step killed
        # after asking leaves the unit behind for the default kernel's boot,
        # whose step finds the loop over and removes it.
        if reboot:
            done = booter.reboot_default() + ["systemctl reboot (the default kernel)"]
            return done + unit.remove(loop.name)
        return unit.remove(loop.name) + booter.clear()

    def run_validate(argv: list[str], timeout: float) -> tuple[int, str, str]:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, "", f"validate did not finish in {timeout:.0f} s"
        return p.returncode, p.stdout, p.stderr

    def reset_now() -> None:
        subprocess.run(["systemctl", "--force", "reboot"], timeout=60)

    return Machine(boot=booter.boot, finish=finish,
                   wait_quiet=lambda limit: conditions.wait_quiet(limit, say=say) if limit > 0 else {"state": "not waited"},
                   validate=run_validate, write_report=report.write_all,
                   stop_deadline=lambda: unit.stop_deadline(loop.name),
                   default_boot=lambda: bootloader.detect().default(),
                   targets=active_targets, reset_now=reset_now)


def validate_argv(sched: dict) -> list[str]:
    return [sched["nttrace"]["exe"], "validate", "--json", *sched["validate_args"]]


class _Stop(Exception):
    """The loop stops here: state failed with this status line; `reboot`:
    into the default kernel (False where the default is what went wrong)."""

    def __init__(self, why: str, reboot: bool = True):
        super().__init__(why)
        self.reboot = reboot


class _Ended(Exception):
    """`ab stop` ended the loop while this step's validate ran: its state stands."""


class _Cut(Exception):
    """The system is shutting down under this step's validate: a run cut short."""


def step(loop: Loop, m: Machine | None = None) -> int:
    sched = loop.schedule()
    m = m or real_machine(loop, sched)
    with loop.lock() as lock:
        st = loop.state()
        _recovered(loop, st, m)
        if st["state"] != "running":
            done = m.finish(False)
            m.log(f"{loop.name} is {st['state']}: nothing to do" + (f" ({'; '.join(done)})" if done else ""))
            return EXIT_OK
        bid = m.boot_id()
        if st.get("handled_boot_id") == bid:
            m.log(f"{loop.name}: this boot ({bid}) was handled already")
            return EXIT_OK
        st["handled_boot_id"] = bid
        not_stopped = m.stop_deadline()
        if not_stopped:
            m.log(f"{loop.name}: this boot's deadline could not be stopped ({not_stopped})")
        slots = schedule.from_json(sched["slots"])
        return _guarded(loop, st, m, lambda: _step(loop, sched, st, slots, bid, m, lock))


def _recovered(loop: Loop, st: dict, m: Machine) -> None:
    """A state recovered from its copy or rebuilt says so: a journal line, an
    event and a record the status and the report show (saved with the next
    change of the state)."""
    rec = st.pop("recovered_now", None)
    if rec:
        st.setdefault("recoveries", []).append({**rec, "at": round(m.clock(), 1), "boot_id": m.boot_id()})
        _event(loop, st, m, "state recovered", text=rec["text"])
        m.log(f"{loop.name}: STATE RECOVERED: {rec['text']}")


def ended(loop: Loop, service_result: str, exit_code: str = "", exit_status: str = "",
          m: Machine | None = None) -> int:
    """The unit's ExecStopPost, after every step, with systemd's
    $SERVICE_RESULT (systemd.exec(5)). "success": nothing to do; nor when
    the step had asked for the next boot from this boot (the kexec or
    reboot it asked for stops every service, the step too if it has not
    exited yet: "signal", seen in the lab at every kexec). A step ended
    because the system is shutting down (an admin's reboot, unattended-
    upgrades: systemd stops it with SIGTERM) is a run cut short: the state
    is left saying so and the next boot redoes the slot. Otherwise systemd
    ended the step before it finished (TimeoutStartSec passed, a kill) or it
    died outside its own fault handling; if the loop still says running, it
    stops here as on any fault: failed, with why, nothing left loaded or
    enabled, runs kept. Without this the loop would say running, its unit
    enabled, until someone rebooted."""
    if service_result in ("", "success"):
        return EXIT_OK
    sched = loop.schedule()
    m = m or real_machine(loop, sched)
    with loop.lock():
        st = loop.state()
        _recovered(loop, st, m)
        if st["state"] != "running":        # the step stopped the loop itself, or `ab stop` did
            return EXIT_OK
        bid = m.boot_id()
        if (st.get("booting") or {}).get("from_boot") == bid:
            return EXIT_OK                  # the boot it asked for is under way
        down = m.shutting_down() if service_result != "timeout" else None
        slot = (st.get("measuring") or {}).get("slot") or (st.get("booting") or {}).get("slot")
        if down and slot is not None:
            _cut_by_shutdown(loop, st, m, slot, bid, down)
            return EXIT_OK
        if service_result == "timeout":
            why = f"systemd ended the step after the unit's TimeoutStartSec ({unit.timeout_s(sched)} s)"
        else:
            how = ", ".join(x for x in (service_result, exit_code, exit_status) if x)
            why = f"the step ended without finishing its own work (systemd says: {how})"
        return _fail(loop, st, why, m)


def _cut_by_shutdown(loop: Loop, st: dict, m: Machine, slot: int, bid: str, down: str) -> None:
    """This boot's step was ended by an orderly shutdown before it stored a
    run: the state says so (a run cut short of this boot), and the next boot
    redoes the slot."""
    meas = st.get("measuring")
    if not meas or meas.get("boot_id") != bid:
        meas = st["measuring"] = {"slot": slot, "boot_id": bid, "at": round(m.clock(), 1)}
    meas["cut_by"] = down
    _event(loop, st, m, "cut by a shutdown", slot=slot, boot_id=bid, how=down)
    loop.save_state(st)
    m.log(f"slot {slot}: the step was ended by an orderly shutdown ({down}) before its run was stored: "
          "a run cut short, redone at the next boot")


def begin(loop: Loop, m: Machine) -> int:
    """The first boot of a loop `ab start` has just written."""
    with loop.lock():         # an `ab stop` at once waits for the first boot's request, then ends the loop
        sched, st = loop.schedule(), loop.state()
        st["handled_boot_id"] = m.boot_id()
        return _guarded(loop, st, m, lambda: _boot(loop, sched, st, schedule.from_json(sched["slots"])[0], m))


def _guarded(loop: Loop, st: dict, m: Machine, go: Callable[[], int]) -> int:
    """go(), and whatever fault it meets stops the loop: nothing left enabled or pending."""
    try:
        return go()
    except _Ended as exc:
        done = m.finish(False)
        m.log(str(exc) + (f" ({'; '.join(done)})" if done else ""))
        return EXIT_OK
    except _Cut as exc:
        _cut_by_shutdown(loop, st, m, st["measuring"]["slot"], st["measuring"]["boot_id"], str(exc))
        return EXIT_OK
    except _Stop as exc:
        return _fail(loop, st, str(exc), m, exc.reboot)
    except OSError as exc:        # the state itself cannot be written (disk full, read-only)
        what = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
        return _fail(loop, st, f"cannot write the loop's files ({what}: {exc.filename or loop.dir})", m)
    except Exception as exc:      # a bug in nttrace: the loop stops rather than stay enabled and stuck
        return _fail(loop, st, f"internal error in the step ({exc.__class__.__name__}: {exc})", m)


def _event(loop: Loop, st: dict, m: Machine, what: str, /, **kw) -> None:
    loop.event(st, m.clock(), what, **kw)


def _step(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], bid: str, m: Machine, lock) -> int:
    if loop.check_private():
        raise _Stop(f"the state directory is not root-only: {loop.check_private()}")
    gone = store.remove_partial(loop.runs_dir)
    if gone:
        _event(loop, st, m, "partial files removed", files=gone)
    hashes = loop.hash_cache()
    for side in schedule.sides(sched):
        why = kernels.changed(sched["kernels"][side], cache=hashes)
        if why:
            raise _Stop(f"the {side} kernel {sched['kernels'][side]['release']}: {why}")
    hashes.save()
    _check_default(loop, sched, st, m)
    running = m.running()
    interrupted = st.get("measuring")
    cut = bool(interrupted) and interrupted.get("boot_id") != bid
    if cut:
        kept = loop.runs().get(interrupted["slot"])
        if kept and kept["ab_run"].get("boot_id") == interrupted["boot_id"]:
            # the run was stored whole; the cut came before the state said so
            st["measuring"] = None
            slot_state(st, interrupted["slot"])["outcome"] = "run"
            st["consecutive_failures"] = 0
            _event(loop, st, m, "run found stored after a cut", slot=interrupted["slot"])
            return _next(loop, sched, st, slots, m)
        # the last boot began a run and never finished it (power cut, reset,
        # an orderly shutdown): the run is redone; not a failed boot of the kernel
        by = interrupted.get("cut_by")
        rec = {"slot": interrupted["slot"], "boot_id": interrupted["boot_id"], "found": running.release,
               "at": round(m.clock(), 1), **({"by": "shutdown", "how": by} if by else {})}
        st["interrupted"].append(rec)
        _event(loop, st, m, "run cut short, redone", slot=interrupted["slot"], cut=rec)
        st["measuring"] = None
        slot = slots[interrupted["slot"] - 1]
        same = [c for c in st["interrupted"] if c["slot"] == slot.slot]
        unknown = sum(1 for c in same if c.get("by") != "shutdown")
        if unknown > 1:    # not a power cut: the machine goes down under the checks (a kernel that crashes)
            extra = _reset_evidence(sched, st, sched["kernels"][slot.side], running, bid, m)
            return _failed_boot(loop, sched, st, slots, slot, running, bid, m,
                                f"its run was cut short {unknown} times; {extra['known']}; {extra['cause']}",
                                kind="cut", extra=extra)
        if len(same) - unknown >= ORDERLY_CUTS:
            return _failed_boot(loop, sched, st, slots, slot, running, bid, m,
                                f"its run was cut by an orderly shutdown {len(same) - unknown} times", kind="cut")
    elif st.get("booting"):
        slot = slots[st["booting"]["slot"] - 1]
        if st["booting"].get("not_issued") and not kernels.is_running(sched["kernels"][slot.side], running):
            # the boot was never asked (a shutdown under way refused it): not a failed boot
            slot_state(st, slot.slot)["attempts"] -= 1
            m.log(f"slot {slot.slot}: its boot was not asked before the shutdown ({st['booting']['not_issued']}): "
                  "asking it now")
            return _boot(loop, sched, st, slot, m)
    elif st.get("recoveries"):
        # a state rebuilt without a record of the boot under way: the first
        # slot without an outcome is booted (no failure is recorded for it)
        m.log(f"{loop.name}: the recovered state records no boot in progress: booting the next slot")
        return _next(loop, sched, st, slots, m)
    else:
        raise _Stop("the state records no boot in progress (state.json damaged?)")
    expected = sched["kernels"][slot.side]
    if not kernels.is_running(expected, running):
        if cut:
            how = f" by an orderly shutdown ({interrupted['cut_by']})" if interrupted.get("cut_by") else ""
            m.log(f"slot {slot.slot}: the run was cut short{how} and the machine came back on {running.release}: "
                  f"booting {expected['release']} again")
            return _boot(loop, sched, st, slot, m)
        found = {"release": running.release, "build": running.build()}
        extra = _reset_evidence(sched, st, expected, running, bid, m)
        return _failed_boot(loop, sched, st, slots, slot, running, bid, m,
                            f"{expected_found(expected, found)}: {extra['known']}; {extra['cause']}", extra=extra)
    if _night_over(sched, m):
        return _end(loop, sched, st, slots, m, until=True)
    w = (sched.get("reset") or {}).get("watchdog")
    if w:
        why = reset.watchdog_fault(w, m.watchdog(w["device"]))
        if why:
            raise _Stop(f"the watchdog is not armed at this boot of {expected['release']} (slot {slot.slot}, "
                        f"{slot.side}): {why}")
    unmeasured_why = _measure(loop, sched, st, slot, bid, m, lock)
    if unmeasured_why:
        return _failed_boot(loop, sched, st, slots, slot, running, bid, m,
                            f"a failed measurement: {unmeasured_why}", kind="measurement")
    return _next(loop, sched, st, slots, m)


def _reset_evidence(sched: dict, st: dict, expected: dict, running: kernels.Running, bid: str, m: Machine) -> dict:
    """What is known of a boot that came back on another kernel than the
    slot's, and the cause where the machine recorded one; who is blamed."""
    try:
        reached = m.settings().get("reached") or {}
    except Exception as exc:      # what cannot be read is not known; the failure is still recorded
        reached = {"how": None, "error": str(exc)}
    try:
        records = m.last_reset(st.get("booting") or {}, bid)
    except Exception as exc:
        records = {"error": f"{exc.__class__.__name__}: {exc}"}
    rtext = boot_settings.reached_text(reached) if reached.get("how") else "(how it was reached unknown)"
    default = st.get("default_kernel") or sched.get("default_kernel")
    a = last_reset.assess(records, expected["release"], running.release, default, rtext)
    passed = st.get("deadline_passed") or {}
    asked_at = (st.get("booting") or {}).get("at") or 0
    if passed.get("release") == expected["release"] and (passed.get("at") or 0) >= asked_at:
        # the boot deadline recorded this boot of the kernel: it never reached the loop's step
        held = f" ({', '.join(passed['targets'])})" if passed.get("targets") else ""
        a = {"blamed": "kernel", "known": a["known"],
             "cause": f"{expected['release']} started (boot {str(passed.get('boot_id'))[:12]}) and did not reach the "
                      f"loop's step within the boot deadline of {passed.get('deadline_s')} s{held}: the deadline "
                      "reset the machine"}
    return {"blamed": a["blamed"], "known": a["known"], "cause": a["cause"], "reached": reached, "records": records}


def _failed_boot(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], slot: schedule.Slot,
                 running: kernels.Running, bid: str, m: Machine, why: str, kind: str = "boot",
                 extra: dict | None = None) -> int:
    """A boot of the slot gave no run (it did not come up as the slot's
    kernel, its run was cut again and again, or it measured nothing):
    recorded with its kind and evidence; the slot booted once more, or given
    up after its second attempt; K in a row stop the loop."""
    expected = sched["kernels"][slot.side]
    ss = slot_state(st, slot.slot)
    failure = {"kind": kind, "expected": {"release": expected["release"], "build": expected["build"]},
               "found": {"release": running.release, "build": running.build()},
               "why": why, "boot_id": bid, "at": round(m.clock(), 1), **(extra or {})}
    ss["failures"].append(failure)
    st["consecutive_failures"] += 1
    _event(loop, st, m, "failed measurement" if kind == "measurement" else "failed boot", slot=slot.slot,
           found=running.release, why=why, blamed=failure.get("blamed"), failure=failure,
           consecutive=st["consecutive_failures"])
    what = "a failed measurement" if kind == "measurement" else "a failed boot"
    m.log(f"slot {slot.slot} ({slot.side}): {why}: {what} ({st['consecutive_failures']} in a row)"
          + (f" [blamed: {failure['blamed']}]" if failure.get("blamed") else ""))
    k = int(sched["max_failures"])
    if st["consecutive_failures"] >= k:
        raise _Stop(f"stopped after {st['consecutive_failures']} consecutive failed boots (--max-failures {k}): "
                    f"slot {slot.slot} {why}")
    if kind == "boot" and failure.get("blamed") == "unknown" and ss.get("unexplained", 0) < UNEXPLAINED_RETRIES:
        # a reset no record explains (a power cut looks the same): the slot's attempt is given back
        ss["unexplained"] = ss.get("unexplained", 0) + 1
        ss["attempts"] -= 1
        _event(loop, st, m, "unexplained, retried", slot=slot.slot, unexplained=ss["unexplained"])
        return _boot(loop, sched, st, slot, m)
    if ss["attempts"] < 2:
        return _boot(loop, sched, st, slot, m)
    ss["outcome"] = "failed boot"
    _event(loop, st, m, "slot given up", slot=slot.slot)
    return _next(loop, sched, st, slots, m)


def _measure(loop: Loop, sched: dict, st: dict, slot: schedule.Slot, bid: str, m: Machine, lock) -> str | None:
    """Measure this boot: None where its run was stored, else why the boot
    measured nothing (a failed measurement; validate's report is kept under
    unmeasured/ to read)."""
    ss = slot_state(st, slot.slot)
    free = m.free_bytes(loop.dir)
    if free < RUN_BYTES + FREE_FLOOR_BYTES:
        raise _Stop(f"disk full: {free >> 20} MiB free under {loop.dir}, a run needs "
                    f"{(RUN_BYTES + FREE_FLOOR_BYTES) >> 20} MiB")
    ns = sched.get("rebind")
    if ns and not m.namespace_present(ns):
        raise _Stop(f"namespace {ns} is missing at slot {slot.slot} ({slot.side}, {m.running().release})")
    settings = m.settings()
    t0 = m.clock()
    st["measuring"] = {"slot": slot.slot, "boot_id": bid, "at": round(t0, 1)}
    _event(loop, st, m, "measuring", slot=slot.slot, boot_id=bid)
    loop.save_state(st)
    lock.release()            # the long part: `ab stop` may come meanwhile
    try:
        quiet = m.wait_quiet(float(sched["wait_quiet_s"]))
        m.log(f"slot {slot.slot} of {len(sched['slots'])} ({slot.side}, {sched['kernels'][slot.side]['release']}): "
              "running validate")
        rc, out, err = m.validate(validate_argv(sched), float(sched["validate_timeout_s"]))
    finally:
        lock.acquire()
    try:
        run = json.loads(out) if rc in (0, 1) else None
    except ValueError:
        run = None
    empty = None
    if isinstance(run, dict) and isinstance(run.get("checks"), list):
        timed_out = float(sched["wait_quiet_s"]) > 0 and (quiet or {}).get("state") in ("busy", "contended")
        run["ab_run"] = {"loop": loop.name, "slot": slot.slot, "round": slot.round, "side": slot.side,
                         "kernel": sched["kernels"][slot.side], "via": sched["via"], "boot_id": bid,
                         "attempt": ss["attempts"], "validate_exit": rc, "quiet_wait": quiet,
                         "quiet_timed_out": timed_out, "machine": settings,
                         "kernel_identity": identity(sched["kernels"][slot.side], m),
                         "started": round(t0, 1), "finished": round(m.clock(), 1), "nttrace": m.nttrace(),
                         "complete": True}
        empty = measured.unmeasured(run, measured.measured_checks(sched["validate_args"]))
        path = loop.run_path(slot) if not empty else \
            loop.unmeasured_dir / f"{slot.key}-attempt{ss['attempts']}.json"
        if empty:
            run["ab_run"]["complete"] = False
            run["ab_run"]["unmeasured"] = empty
        try:
            store.make_private_dir(path.parent)
            store.write_json(path, run)
        except OSError as exc:
            what = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"cannot write the run ({exc.strerror})"
            raise _Stop(f"{what} at slot {slot.slot}: {path}") from None
    else:
        run = None
    now = loop.state()["state"]
    if now != "running":
        raise _Ended(f"{loop.name} became {now} while slot {slot.slot}'s validate ran: "
                     + ("its run kept" if run and not empty else "no run kept") + "; nothing booted")
    if run is None:
        down = m.shutting_down()
        if down:              # validate was ended by the shutdown (SIGTERM to the unit): a cut run
            raise _Cut(down)
        last = (err or "").strip().splitlines()[-1:] or [f"exit {rc}, no JSON report"]
        raise _Stop(f"validate failed at slot {slot.slot} ({slot.side}): exit {rc}: {last[0]}")
    st["measuring"] = None
    if empty:
        return empty
    ss["outcome"] = "run"
    ss["stored_at"] = round(m.clock(), 1)
    st["consecutive_failures"] = 0
    _event(loop, st, m, "run stored", slot=slot.slot, validate_exit=rc,
           **({"quiet_timed_out": True} if run["ab_run"]["quiet_timed_out"] else {}))
    return None


def identity(kernel: dict, m: Machine) -> dict:
    """What a run records of its kernel's build beyond the release and build
    string: the running kernel's build-id, and its config's and headers'
    hashes (checked against the start's at this boot: kernels.changed)."""
    return {"build_id": m.build_id(), "config_sha256": kernel.get("config_sha256"),
            "headers_sha256": kernel.get("headers_sha256")}


def _night_over(sched: dict, m: Machine) -> bool:
    return bool(sched.get("until")) and m.clock() >= float(sched["until"])


def _check_default(loop: Loop, sched: dict, st: dict, m: Machine) -> None:
    """The bootloader's default entry, read again at this boot: recorded as
    the kernel a reset brings up; one that now boots a patched kernel of the
    loop stops it where it is (a reboot would boot that kernel)."""
    try:
        d = m.default_boot() or {}
    except Exception as exc:       # what cannot be read is not known; the start's reading stands
        d = {"how": f"cannot read the default entry: {exc}"}
    if d.get("release"):
        if d["release"] != st.get("default_kernel"):
            if st.get("default_kernel"):
                _event(loop, st, m, "default entry changed", was=st["default_kernel"], now=d["release"],
                       how=d.get("how"))
            st["default_kernel"] = d["release"]
        why = preflight.default_is_patched(d, sched["kernels"])
        if why:
            raise _Stop(f"{why} now ({d.get('how')}; read again at this boot): every reset would boot it; the loop "
                        "stops where it is, without a reboot: make a working kernel the default, then `nttrace ab "
                        "report` has the runs", reboot=False)


def _next(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], m: Machine) -> int:
    pending = [s for s in slots if slot_state(st, s.slot)["outcome"] is None]
    if pending and not _night_over(sched, m):
        return _boot(loop, sched, st, pending[0], m)
    return _end(loop, sched, st, slots, m, until=bool(pending))


def _end(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], m: Machine, until: bool = False) -> int:
    """The schedule is done (or the night is: --until): the loop ends,
    complete where every kernel has a run, its report written, the units
    removed, the default kernel booted."""
    st["booting"] = None
    runs = sum(1 for s in slots if slot_state(st, s.slot)["outcome"] == "run")
    empty = [side for side in schedule.sides(sched)
             if not any(slot_state(st, s.slot)["outcome"] == "run" for s in slots if s.side == side)]
    measured_text = f"{runs} of {len(slots)} boots measured"
    if until:
        measured_text += f"; the night ended at --until {time.strftime('%H:%M', time.localtime(sched['until']))}"
    if empty:
        # no A/B without every kernel: the schedule ended, the loop did not complete
        whys = []
        for side in empty:
            last = [f for s in slots if s.side == side for f in slot_state(st, s.slot)["failures"]]
            whys.append(f"no {side} run" + (f" (last: {last[-1]['why']})" if last else ""))
        st["state"] = "failed"
        st["why"] = f"incomplete: {'; '.join(whys)}; {measured_text}"
        _event(loop, st, m, "incomplete", state="failed", why=st["why"])
    elif until:
        st["state"] = "stopped"
        st["why"] = f"ended by --until: {measured_text}"
        _event(loop, st, m, "stopped", state="stopped", why=st["why"])
    else:
        st["state"] = "complete"
        st["why"] = f"complete: {measured_text}"
        _event(loop, st, m, "complete", state="complete", why=st["why"])
    loop.save_state(st)
    try:
        m.write_report(loop)
    except Exception as exc:     # the runs are kept; the report can be written again by `ab report`
        m.log(f"the report could not be written ({exc.__class__.__name__}: {exc}); `nttrace ab report "
              f"{loop.name}` writes it from the kept runs")
    m.log(("LOOP INCOMPLETE: " if empty else "") + st["why"] + "; report in " + str(loop.report_dir)
          + "; rebooting into the default kernel")
    m.finish(True)
    return EXIT_CHECK_FAILED if empty else EXIT_OK


def _boot(loop: Loop, sched: dict, st: dict, slot: schedule.Slot, m: Machine) -> int:
    why = kernels.changed(sched["kernels"][slot.side], cache=loop.hash_cache())     # again right before each boot
    if why:
        raise _Stop(f"the {slot.side} kernel {sched['kernels'][slot.side]['release']}: {why}")
    ss = slot_state(st, slot.slot)
    ss["attempts"] += 1
    ss["booted_at"] = round(m.clock(), 1)
    here = m.boot_id()
    st["booting"] = {"slot": slot.slot, "side": slot.side, "attempt": ss["attempts"], "at": ss["booted_at"],
                     "from_boot": here}     # asked from this boot: ended() knows the shutdown was asked
    _event(loop, st, m, "boot", slot=slot.slot, side=slot.side, attempt=ss["attempts"], from_boot=here)
    loop.save_state(st)       # before the boot: whatever happens next, the state says what was asked
    kernel = sched["kernels"][slot.side]
    m.log(f"booting slot {slot.slot} of {len(sched['slots'])}: {slot.side} {kernel['release']} "
          f"(attempt {ss['attempts']}, via {sched['via']})")
    cmdline = sched["cmdline"]
    if sched["via"] == "kexec":     # the next boot knows it was this kexec, from this boot
        cmdline = boot_settings.with_marker(cmdline, here or "unknown")
    try:
        m.boot(kernel, cmdline, (sched.get("grub_entries") or {}).get(slot.side))
    except Exception as exc:
        down = m.shutting_down()
        if down:        # a shutdown someone else asked refused ours: the boot after it asks again
            st["booting"]["not_issued"] = down
            _event(loop, st, m, "boot not issued", slot=slot.slot, how=down, error=str(exc))
            loop.save_state(st)
            m.log(f"slot {slot.slot}: the system is shutting down ({down}); the boot of {kernel['release']} "
                  f"could not be asked ({exc}): the next boot asks it")
            return EXIT_OK
        raise _Stop(f"could not boot slot {slot.slot} ({slot.side} {kernel['release']}): {exc}") from None
    return EXIT_OK


def _fail(loop: Loop, st: dict, why: str, m: Machine, reboot: bool = True) -> int:
    ended_as = loop.state()["state"]
    if ended_as != "running":      # `ab stop` came first (while validate ran): its state stands
        done = m.finish(False)
        m.log(f"{loop.name} is {ended_as}; this step's own fault: {why}" + (f" ({'; '.join(done)})" if done else ""))
        return EXIT_OK
    st["state"] = "failed"
    st["why"] = why
    st["measuring"] = None
    saved = True
    try:
        _event(loop, st, m, "stopped", state="failed", why=why)
        loop.save_state(st)
    except OSError as exc:
        saved = False
        m.log(f"{loop.name}: the state could not be saved ({exc.strerror}): removing the loop's units all the same, "
              "so `nttrace ab status` says it ended unsaved")
    sched = loop.schedule()
    home = _on_default(sched, st, m)
    back = reboot and not sched.get("stay") and not home
    stopped = f"{loop.name}: LOOP STOPPED: {why}; runs kept in {loop.runs_dir}" + ("" if saved else " (state not saved)")
    if back:
        # said before the reboot is asked for: from then on systemd may stop this step before it says more
        # (the default kernel's step then says what it undid)
        m.log(stopped + "; rebooting into the default kernel")
        done = m.finish(True)
        if done:
            m.log(f"{loop.name}: before the reboot: {'; '.join(done)}")
        return EXIT_CHECK_FAILED
    done = m.finish(False)
    where = ("; the machine stays where it is (--stay)" if reboot and sched.get("stay") and not home else
             "" if home else "; the machine stays where it is")
    m.log(stopped + (f"; {'; '.join(done)}" if done else "")
          + (where or ("; the default kernel boots next" if boot.all_cleared(done) else "")))
    return EXIT_CHECK_FAILED


def _on_default(sched: dict, st: dict, m: Machine) -> bool:
    """The machine runs its default kernel now (nothing to reboot into)."""
    default = st.get("default_kernel") or sched.get("default_kernel")
    try:
        return bool(default) and m.running().release == default
    except Exception:
        return False


def deadline(loop: Loop, m: Machine | None = None) -> int:
    """`ab step NAME --deadline`: the boot deadline passed at a boot of one
    of the loop's kernels. Unless the loop's step ran at this boot (it holds
    the lock, or it handled this boot), the boot is recorded as one that
    never reached the step, with what held it (emergency or rescue mode,
    failed units), and the machine is reset. The record is best-effort (the
    disk may be read-only): the reset is not."""
    sched = loop.schedule()
    m = m or real_machine(loop, sched)
    lock = loop.lock()
    if not lock.try_acquire():
        m.log(f"{loop.name}: the boot deadline passed while the loop's step runs: nothing to do")
        return EXIT_OK
    try:
        st = loop.state()
        bid = m.boot_id()
        if st["state"] != "running" or st.get("handled_boot_id") == bid:
            return EXIT_OK
        running = m.running()
        held = m.targets()
        st["deadline_passed"] = {"boot_id": bid, "release": running.release, "at": round(m.clock(), 1),
                                 "targets": held, "deadline_s": sched.get("deadline_s")}
        m.log(f"{loop.name}: the loop's step has not started {sched.get('deadline_s')} s into this boot of "
              f"{running.release}" + (f" ({', '.join(held)})" if held else "") + ": resetting the machine")
        try:
            _event(loop, st, m, "deadline passed", boot_id=bid, found=running.release, targets=held)
            loop.save_state(st)
        except OSError as exc:
            m.log(f"{loop.name}: the deadline's record could not be saved ({exc.strerror}): resetting all the same")
    finally:
        lock.release()
    m.reset_now()
    return EXIT_OK
