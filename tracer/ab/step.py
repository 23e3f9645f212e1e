"""What the unit runs at each boot (`nttrace ab step NAME`): the loop's state
machine. Everything it reads from the machine or does to it goes through a
`Machine` (the real one below; the tests pass plain functions), so every
boot and every fault can be driven without rebooting.

At each boot, in order:
  1. the loop is not running any more (stopped, complete, failed): make
     sure nothing is enabled or pending, exit;
  2. the unit already handled this boot (same boot id): nothing to do;
  3. the state directory is root-only, and neither kernel image changed
     since the start (sha256): else the loop stops (no mixed builds);
  4. the running kernel (release AND build string) is the one the slot
     expects: else a failed boot for that slot, retried once, then the slot
     is given up; K consecutive failed boots stop the loop. A run cut short
     by a power cut or reset is not a failed boot: the slot is redone;
  5. room on the disk and the namespace (--rebind) are there: else stop;
  6. wait (bounded) for a quiet host, run validate, keep its JSON whole
     (tmp + fsync + rename) with what the loop knows of the boot;
     a validate that cannot run (exit 2, 3, 4, no JSON) stops the loop;
  7. boot the next slot's kernel (its image's sha256 checked once more
     right before), or after the last: write the report,
     remove the unit, reboot into the default kernel.
A loop that stops on a fault keeps its runs, removes its unit, leaves
nothing pending and does not reboot: the default kernel boots next.
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

from nttrace.kernel import boot_id
from nttrace.ab import boot, kernels, schedule, store, unit
from nttrace.ab.loop import Loop, expected_found, nttrace_identity, slot_state
from nttrace.errors import EXIT_CHECK_FAILED, EXIT_OK

# room a run needs (a validate --json report is well under 1 MiB) and a floor
# kept free for the rest of the machine
RUN_BYTES = 4 << 20
FREE_FLOOR_BYTES = 64 << 20


def say(msg: str) -> None:
    print(f"nttrace ab: {msg}", file=sys.stderr, flush=True)


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


def real_machine(loop: Loop, sched: dict) -> Machine:
    from nttrace.ab import report, unit
    from nttrace.kernel import conditions
    booter = boot.Booter(sched["via"])

    def finish(reboot: bool) -> list:
        done = unit.remove(loop.name) + booter.clear()
        if reboot:
            booter.reboot_default()
            done.append("systemctl reboot (the default kernel)")
        return done

    def run_validate(argv: list[str], timeout: float) -> tuple[int, str, str]:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, "", f"validate did not finish in {timeout:.0f} s"
        return p.returncode, p.stdout, p.stderr

    return Machine(boot=booter.boot, finish=finish,
                   wait_quiet=lambda limit: conditions.wait_quiet(limit, say=say) if limit > 0 else {"state": "not waited"},
                   validate=run_validate, write_report=report.write_all)


def validate_argv(sched: dict) -> list[str]:
    return [sched["nttrace"]["exe"], "validate", "--json", *sched["validate_args"]]


class _Stop(Exception):
    """The loop stops here: state failed with this status line."""


class _Ended(Exception):
    """`ab stop` ended the loop while this step's validate ran: its state stands."""


def step(loop: Loop, m: Machine | None = None) -> int:
    sched = loop.schedule()
    m = m or real_machine(loop, sched)
    with loop.lock() as lock:
        st = loop.state()
        if st["state"] != "running":
            done = m.finish(False)
            m.log(f"{loop.name} is {st['state']}: nothing to do" + (f" ({'; '.join(done)})" if done else ""))
            return EXIT_OK
        bid = m.boot_id()
        if st.get("handled_boot_id") == bid:
            m.log(f"{loop.name}: this boot ({bid}) was handled already")
            return EXIT_OK
        st["handled_boot_id"] = bid
        slots = schedule.from_json(sched["slots"])
        return _guarded(loop, st, m, lambda: _step(loop, sched, st, slots, bid, m, lock))


def ended(loop: Loop, service_result: str, exit_code: str = "", exit_status: str = "",
          m: Machine | None = None) -> int:
    """The unit's ExecStopPost, after every step, with systemd's
    $SERVICE_RESULT (systemd.exec(5)). "success": nothing to do; nor when
    the step had asked for the next boot from this boot (the kexec or
    reboot it asked for stops every service, the step too if it has not
    exited yet: "signal", seen in the lab at every kexec). Otherwise systemd
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
        if st["state"] != "running":        # the step stopped the loop itself, or `ab stop` did
            return EXIT_OK
        if (st.get("booting") or {}).get("from_boot") == m.boot_id():
            return EXIT_OK                  # the boot it asked for is under way
        if service_result == "timeout":
            why = f"systemd ended the step after the unit's TimeoutStartSec ({unit.timeout_s(sched)} s)"
        else:
            how = ", ".join(x for x in (service_result, exit_code, exit_status) if x)
            why = f"the step ended without finishing its own work (systemd says: {how})"
        return _fail(loop, st, why, m)


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
    except _Stop as exc:
        return _fail(loop, st, str(exc), m)
    except OSError as exc:        # the state itself cannot be written (disk full, read-only)
        what = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
        return _fail(loop, st, f"cannot write the loop's files ({what}: {exc.filename or loop.dir})", m)
    except Exception as exc:      # a bug in nttrace: the loop stops rather than stay enabled and stuck
        return _fail(loop, st, f"internal error in the step ({exc.__class__.__name__}: {exc})", m)


def _event(st: dict, m: Machine, what: str, **kw) -> None:
    st["events"].append({"at": round(m.clock(), 1), "what": what, **kw})


def _step(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], bid: str, m: Machine, lock) -> int:
    if loop.check_private():
        raise _Stop(f"the state directory is not root-only: {loop.check_private()}")
    gone = store.remove_partial(loop.runs_dir)
    if gone:
        _event(st, m, "partial files removed", files=gone)
    for side in schedule.SIDES:
        why = kernels.changed(sched["kernels"][side])
        if why:
            raise _Stop(f"the {side} kernel's image {why}")
    running = m.running()
    interrupted = st.get("measuring")
    cut = bool(interrupted) and interrupted.get("boot_id") != bid
    if cut:
        kept = loop.runs().get(interrupted["slot"])
        if kept and kept["ab_run"].get("boot_id") == interrupted["boot_id"]:
            # the run was stored whole; the cut came before the state said so
            st["measuring"] = None
            slot_state(st, interrupted["slot"])["outcome"] = "run"
            _event(st, m, "run found stored after a cut", slot=interrupted["slot"])
            return _next(loop, sched, st, slots, m)
        # the last boot began a run and never finished it (power cut, reset):
        # the run is redone; not a failed boot of the kernel
        st["interrupted"].append({"slot": interrupted["slot"], "boot_id": interrupted["boot_id"],
                                  "found": running.release, "at": round(m.clock(), 1)})
        _event(st, m, "run cut short, redone", slot=interrupted["slot"])
        st["measuring"] = None
        slot = slots[interrupted["slot"] - 1]
        cuts = sum(1 for c in st["interrupted"] if c["slot"] == slot.slot)
        if cuts > 1:    # not a power cut: the machine goes down under the checks (a kernel that crashes)
            return _failed_boot(loop, sched, st, slots, slot, running, bid, m,
                                f"its run was cut short {cuts} times")
    elif st.get("booting"):
        slot = slots[st["booting"]["slot"] - 1]
    else:
        raise _Stop("the state records no boot in progress (state.json damaged?)")
    expected = sched["kernels"][slot.side]
    if not kernels.is_running(expected, running):
        if cut:
            m.log(f"slot {slot.slot}: the run was cut short and the machine came back on {running.release}: "
                  f"booting {expected['release']} again")
            return _boot(loop, sched, st, slot, m)
        return _failed_boot(loop, sched, st, slots, slot, running, bid, m,
                            expected_found(expected, {"release": running.release, "build": running.build()}))
    st["consecutive_failures"] = 0
    _measure(loop, sched, st, slot, bid, m, lock)
    return _next(loop, sched, st, slots, m)


def _failed_boot(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], slot: schedule.Slot,
                 running: kernels.Running, bid: str, m: Machine, why: str) -> int:
    """A boot of the slot gave no run: recorded; the slot booted once more,
    or given up after its second attempt; K in a row stop the loop."""
    expected = sched["kernels"][slot.side]
    ss = slot_state(st, slot.slot)
    ss["failures"].append({"expected": {"release": expected["release"], "build": expected["build"]},
                           "found": {"release": running.release, "build": running.build()},
                           "why": why, "boot_id": bid, "at": round(m.clock(), 1)})
    st["consecutive_failures"] += 1
    _event(st, m, "failed boot", slot=slot.slot, found=running.release, why=why)
    m.log(f"slot {slot.slot} ({slot.side}): {why}: a failed boot ({st['consecutive_failures']} in a row)")
    k = int(sched["max_failures"])
    if st["consecutive_failures"] >= k:
        raise _Stop(f"stopped after {st['consecutive_failures']} consecutive failed boots (--max-failures {k}): "
                    f"slot {slot.slot} {why}")
    if ss["attempts"] < 2:
        return _boot(loop, sched, st, slot, m)
    ss["outcome"] = "failed boot"
    return _next(loop, sched, st, slots, m)


def _measure(loop: Loop, sched: dict, st: dict, slot: schedule.Slot, bid: str, m: Machine, lock) -> None:
    ss = slot_state(st, slot.slot)
    free = m.free_bytes(loop.dir)
    if free < RUN_BYTES + FREE_FLOOR_BYTES:
        raise _Stop(f"disk full: {free >> 20} MiB free under {loop.dir}, a run needs "
                    f"{(RUN_BYTES + FREE_FLOOR_BYTES) >> 20} MiB")
    ns = sched.get("rebind")
    if ns and not m.namespace_present(ns):
        raise _Stop(f"namespace {ns} is missing at slot {slot.slot} ({slot.side}, {m.running().release})")
    t0 = m.clock()
    st["measuring"] = {"slot": slot.slot, "boot_id": bid, "at": round(t0, 1)}
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
    if isinstance(run, dict) and isinstance(run.get("checks"), list):
        run["ab_run"] = {"loop": loop.name, "slot": slot.slot, "round": slot.round, "side": slot.side,
                         "kernel": sched["kernels"][slot.side], "via": sched["via"], "boot_id": bid,
                         "attempt": ss["attempts"], "validate_exit": rc, "quiet_wait": quiet,
                         "started": round(t0, 1), "finished": round(m.clock(), 1), "nttrace": m.nttrace(),
                         "complete": True}
        try:
            store.make_private_dir(loop.runs_dir)
            store.write_json(loop.run_path(slot), run)
        except OSError as exc:
            what = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"cannot write the run ({exc.strerror})"
            raise _Stop(f"{what} at slot {slot.slot}: {loop.run_path(slot)}") from None
    else:
        run = None
    now = loop.state()["state"]
    if now != "running":
        raise _Ended(f"{loop.name} became {now} while slot {slot.slot}'s validate ran: "
                     + ("its run kept" if run else "no run kept") + "; nothing booted")
    if run is None:
        last = (err or "").strip().splitlines()[-1:] or [f"exit {rc}, no JSON report"]
        raise _Stop(f"validate failed at slot {slot.slot} ({slot.side}): exit {rc}: {last[0]}")
    st["measuring"] = None
    ss["outcome"] = "run"
    ss["stored_at"] = round(m.clock(), 1)
    _event(st, m, "run stored", slot=slot.slot, validate_exit=rc)


def _next(loop: Loop, sched: dict, st: dict, slots: list[schedule.Slot], m: Machine) -> int:
    pending = [s for s in slots if slot_state(st, s.slot)["outcome"] is None]
    if pending:
        return _boot(loop, sched, st, pending[0], m)
    st["state"] = "complete"
    st["booting"] = None
    runs = sum(1 for s in slots if slot_state(st, s.slot)["outcome"] == "run")
    st["why"] = f"complete: {runs} of {len(slots)} boots measured"
    _event(st, m, "complete")
    loop.save_state(st)
    try:
        m.write_report(loop)
    except Exception as exc:     # the runs are kept; the report can be written again by `ab report`
        m.log(f"the report could not be written ({exc.__class__.__name__}: {exc}); `nttrace ab report "
              f"{loop.name}` writes it from the kept runs")
    m.log(st["why"] + "; report in " + str(loop.report_dir) + "; rebooting into the default kernel")
    m.finish(True)
    return EXIT_OK


def _boot(loop: Loop, sched: dict, st: dict, slot: schedule.Slot, m: Machine) -> int:
    why = kernels.changed(sched["kernels"][slot.side])     # the hash at start, again right before each boot
    if why:
        raise _Stop(f"the {slot.side} kernel's image {why}")
    ss = slot_state(st, slot.slot)
    ss["attempts"] += 1
    ss["booted_at"] = round(m.clock(), 1)
    st["booting"] = {"slot": slot.slot, "side": slot.side, "attempt": ss["attempts"], "at": ss["booted_at"],
                     "from_boot": m.boot_id()}     # asked from this boot: ended() knows the shutdown was asked
    _event(st, m, "boot", slot=slot.slot, side=slot.side, attempt=ss["attempts"])
    loop.save_state(st)       # before the boot: whatever happens next, the state says what was asked
    kernel = sched["kernels"][slot.side]
    m.log(f"booting slot {slot.slot} of {len(sched['slots'])}: {slot.side} {kernel['release']} "
          f"(attempt {ss['attempts']}, via {sched['via']})")
    try:
        m.boot(kernel, sched["cmdline"], (sched.get("grub_entries") or {}).get(slot.side))
    except Exception as exc:
        raise _Stop(f"could not boot slot {slot.slot} ({slot.side} {kernel['release']}): {exc}") from None
    return EXIT_OK


def _fail(loop: Loop, st: dict, why: str, m: Machine) -> int:
    ended = loop.state()["state"]
    if ended != "running":      # `ab stop` came first (while validate ran): its state stands
        done = m.finish(False)
        m.log(f"{loop.name} is {ended}; this step's own fault: {why}" + (f" ({'; '.join(done)})" if done else ""))
        return EXIT_OK
    st["state"] = "failed"
    st["why"] = why
    st["measuring"] = None
    _event(st, m, "stopped", why=why)
    try:
        loop.save_state(st)
    except OSError as exc:
        m.log(f"the state could not be saved ({exc.strerror})")
    done = m.finish(False)
    m.log(f"{loop.name}: LOOP STOPPED: {why}; runs kept in {loop.runs_dir}"
          + (f"; {'; '.join(done)}" if done else "")
          + ("; the default kernel boots next" if boot.all_cleared(done) else ""))
    return EXIT_CHECK_FAILED
