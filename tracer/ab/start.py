"""`nttrace ab start`: everything checked before the first reboot, then the
schedule written, the unit installed and enabled, the first kernel booted.

Order: the input (exit 2: NAME, N, the kernels, the namespace, the exercises,
the command line, the room on the disk), then what the machine must have
(exit 3: root, systemd as init, kexec-tools and both kernels loading with
`kexec -l` for --via kexec, grub for --via reboot). Nothing is written until
every check passed. --dry-run does every check, prints the plan and installs,
loads and boots nothing.
"""
from __future__ import annotations

import importlib.util
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nttrace.ab import boot, kernels, schedule, store, unit
from nttrace.ab.loop import Lock, Loop, changeable_by_others, new_state, nttrace_exe, nttrace_identity
from nttrace.ab.step import FREE_FLOOR_BYTES, RUN_BYTES, Machine, begin, real_machine
from nttrace.errors import EXIT_OK, CapabilityError, UsageError


def validate_args(args) -> list[str]:
    """The loop's validate options, as validate's own flags."""
    out = []
    for pat in args.check or []:
        out += ["--check", pat]
    if args.quick:
        out.append("--quick")
    if args.rebind:
        out += ["--rebind", args.rebind, "--runs", str(args.runs)]
    if args.exercise:
        out += ["--exercise", args.exercise]
    return out


def check_input(args) -> tuple[Loop, dict]:
    """Exit-2 checks; returns the loop and the kernels {side: Kernel}."""
    loop = Loop.named(args.name)
    if args.boots < 1:
        raise UsageError("ab start: --boots must be at least 1 (boots of each kernel)")
    if args.max_failures < 1:
        raise UsageError("ab start: --max-failures must be at least 1")
    if args.runs < 1 or not 0 <= args.wait_quiet < math.inf or not 0 < args.validate_timeout < math.inf:
        raise UsageError("ab start: --runs and --validate-timeout must be positive, --wait-quiet not negative, "
                         "both finite numbers of seconds")
    refuse_if_taken(loop)
    ks = {"base": kernels.resolve(args.base), "patched": kernels.resolve(args.patched)}
    if args.via == "reboot" and any("/" in k.spec for k in ks.values()):
        raise UsageError("ab start --via reboot: grub boots its own entries: give installed releases, not paths")
    if args.via == "reboot" and args.cmdline is not None:
        raise UsageError("ab start --via reboot: the command line is grub's entry's; --cmdline goes with --via kexec")
    if args.rebind:
        from nttrace.workloads import namespace_rebind
        namespace_rebind.resolve(args.rebind)       # UsageError naming what is missing
    if args.exercise:
        from nttrace.probes import check_names
        check_names([n for n in args.exercise.split(",") if n])
    if args.check:
        from nttrace.validate import checks
        if not checks.select(args.check, args.quick):
            raise UsageError(f"ab start: --check {','.join(args.check)} matches no check "
                             "(see `nttrace validate --list`)")
    return loop, ks


def command_line(args) -> str:
    if args.via == "reboot":
        return ""
    cmdline = args.cmdline if args.cmdline is not None else boot.default_cmdline(Path("/proc/cmdline").read_text())
    if "root=" not in cmdline:
        raise UsageError(f"ab start: the command line to pass has no root= ({cmdline[:60]!r}{'...' if len(cmdline) > 60 else ''}); give it with --cmdline")
    return cmdline


def check_room(loop: Loop, boots: int) -> int:
    """Bytes the runs need; UsageError where the disk has not that room."""
    where = loop.dir.parent
    while not where.exists():
        where = where.parent
    need = 2 * boots * RUN_BYTES + FREE_FLOOR_BYTES
    free = shutil.disk_usage(where).free
    if free < need:
        raise UsageError(f"ab start: {free >> 20} MiB free under {where}, {2 * boots} runs need {need >> 20} MiB")
    return need


def check_machine(args, ks: dict, cmdline: str, run=None) -> tuple[list[str], list[CapabilityError]]:
    """Exit-3 checks: what they found (a line each) and what is missing."""
    found, missing = [], []
    if os.geteuid() != 0:
        missing.append(CapabilityError("ab start: needs root (it installs a systemd unit and boots kernels)"))
    if unit.systemd_running():
        found.append(f"systemd is init ({unit.SYSTEMD_RUNNING})")
    else:
        missing.append(CapabilityError(f"ab start: systemd is not this machine's init (no {unit.SYSTEMD_RUNNING}); "
                                       "the loop runs from a systemd unit at each boot"))
    if importlib.util.find_spec("numpy") is None:
        missing.append(CapabilityError("ab start: the loop's A/B report needs numpy (Debian: apt install python3-numpy)"))
    if importlib.util.find_spec("matplotlib") is None:
        found.append("no matplotlib (python3-matplotlib): the report will be text, markdown and JSON, no HTML")
    try:
        if args.via == "kexec":
            boot.kexec_supported()
            boot.kexec_binary()
            if not missing:         # loading kernels needs root; a refused start loads nothing
                found += boot.check_kexec([k.as_json() for k in ks.values()], cmdline, **({"run": run} if run else {}))
        else:
            _exe, cfg = boot.check_grub()
            text = cfg.read_text(errors="replace")
            found += [f"grub entry {boot.grub_entry(text, k.release)} ({cfg})" for k in ks.values()]
    except CapabilityError as exc:
        missing.append(exc)
    return found, missing


def plan(args, loop: Loop, ks: dict, cmdline: str, exe: str) -> dict:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    slots = schedule.make(args.boots, seed)
    grub_entries = None
    if args.via == "reboot":
        text = boot.grub_cfg().read_text(errors="replace")
        grub_entries = {side: boot.grub_entry(text, k.release) for side, k in ks.items()}
    return {"name": loop.name, "created": round(time.time(), 1), "seed": seed, "rounds": args.boots,
            "slots": [s.as_json() for s in slots], "kernels": {side: k.as_json() for side, k in ks.items()},
            "via": args.via, "cmdline": cmdline, "grub_entries": grub_entries,
            "validate_args": validate_args(args), "rebind": args.rebind, "max_failures": args.max_failures,
            "wait_quiet_s": args.wait_quiet, "validate_timeout_s": args.validate_timeout,
            "default_kernel": os.uname().release,
            "nttrace": {"exe": exe, **nttrace_identity()}}


def print_plan(sched: dict, checked: list[str], out=None) -> None:
    out = out or sys.stdout
    k = sched["kernels"]
    slots = schedule.from_json(sched["slots"])
    print(f"nttrace ab {sched['name']}: {sched['rounds']} boots of each kernel, {len(slots)} in all, via {sched['via']}",
          file=out)
    for side in schedule.SIDES:
        print(f"  {side:8} {k[side]['release']}  {k[side]['image']}"
              + (f" + {k[side]['initrd']}" if k[side]["initrd"] else "") + f"  sha256 {k[side]['sha256'][:16]}",
              file=out)
    print(f"  command line: {sched['cmdline'] or '(the grub entry)'}", file=out)
    print(f"  seed {sched['seed']}; order (B base, P patched): {schedule.order_text(slots)}", file=out)
    print(f"  at each boot: {' '.join(['nttrace', 'validate', '--json', *sched['validate_args']])}", file=out)
    print(f"  unit: {unit.unit_name(sched['name'])} -> {' '.join(unit.command(sched['nttrace']['exe'], sched['name']))}",
          file=out)
    for line in checked:
        print(f"  checked: {line}", file=out)
    others = changeable_by_others(sched["nttrace"]["exe"])
    if others:
        print(f"  warning: the unit runs as root, at every boot, code a user other than root can change: {others[0]}"
              + (f" and {len(others) - 1} more" if len(others) > 1 else "")
              + "; install nttrace where only root can write", file=out)
    testable = boots_to_test()
    if sched["rounds"] < testable:
        print(f"  note: {sched['rounds']} boot(s) a side cannot test a change: the exact test across boots needs "
              f"{testable} a side (README, \"Reading an A/B\"); the report will say so", file=out)


def boots_to_test() -> int:
    """The fewest boots a side at which validate's A/B can mark a primary figure."""
    from nttrace.validate import statistics
    return next(n for n in range(2, 50) if statistics.smallest_p(n, n) <= statistics.ALPHA)


def running_loops() -> list[str]:
    """The loops under the state root whose state says running (a directory
    with no schedule is a start cut short, not a loop)."""
    out = []
    for d in sorted(store.root().iterdir()) if store.root().is_dir() else []:
        if d.is_dir() and store.NAME_RE.fullmatch(d.name) \
                and (d / "schedule.json").exists() and Loop(d).state()["state"] == "running":
            out.append(d.name)
    return out


def refuse_if_taken(loop: Loop) -> None:
    """Exit 2 when the name is taken, or another loop runs."""
    if loop.dir.exists():
        raise UsageError(f"ab start: a loop named {loop.name} exists ({loop.dir}); `nttrace ab status {loop.name}`, "
                         "or choose another NAME")
    others = running_loops()
    if others:
        raise UsageError(f"ab start: loop {others[0]} is running (one loop at a time): "
                         f"`nttrace ab stop {others[0]}` first")


def claim(loop: Loop, sched: dict) -> None:
    """Make the loop's directory with its schedule and state, as the one start
    of it: under a lock on the state root, so that two starts at once cannot
    both pass the checks; the name is taken by mkdir (one wins, the other is
    told the name exists, and what the winner made is left alone), and no
    second loop starts while one runs (each would kexec the machine into its
    own kernels)."""
    root = store.make_root()
    with Lock(root / "start.lock"):
        refuse_if_taken(loop)
        try:
            loop.dir.mkdir(mode=0o700)
        except FileExistsError:          # made since the check: not under this lock (an older nttrace)
            refuse_if_taken(loop)
            raise
        try:
            os.chmod(loop.dir, 0o700)
            store.write_json(loop.schedule_path, sched)
            loop.save_state(new_state())
        except BaseException as exc:      # a full disk, Ctrl-C: the directory goes
            shutil.rmtree(loop.dir, ignore_errors=True)
            if isinstance(exc, OSError):
                raise CapabilityError(f"ab start: cannot install the loop: {exc}") from None
            raise


def main(args, machine: Machine | None = None) -> int:
    if os.geteuid() != 0 and not args.dry_run:
        raise CapabilityError("ab start: needs root (it installs a systemd unit and boots kernels)")
    loop, ks = check_input(args)
    cmdline = command_line(args)
    need = check_room(loop, args.boots)
    found, missing = check_machine(args, ks, cmdline)
    if missing and not args.dry_run:
        raise missing[0]
    exe = nttrace_exe()
    sched = plan(args, loop, ks, cmdline, exe)
    unit_text = unit.text(loop.name, exe, store.root(), unit.timeout_s(sched))     # exit 2 before anything is written
    print_plan(sched, [f"room for {2 * args.boots} runs ({need >> 20} MiB)"] + found)
    if args.dry_run:
        for exc in missing:
            print(f"  would refuse: {exc}")
        print("dry run: nothing written, installed, loaded or booted")
        return missing[0].exit_code if missing else EXIT_OK
    claim(loop, sched)                # exit 2 here leaves what another start made untouched
    try:
        store.make_private_dir(loop.runs_dir)
        unit.install(loop.name, unit_text)
    except BaseException as exc:      # a full disk, systemctl timing out, Ctrl-C: nothing left installed
        unit.remove(loop.name)
        shutil.rmtree(loop.dir, ignore_errors=True)
        if isinstance(exc, (OSError, RuntimeError, subprocess.SubprocessError)):
            raise CapabilityError(f"ab start: cannot install the loop: {exc}") from None
        raise
    print(f"installed and enabled {unit.unit_name(loop.name)}; `nttrace ab status {loop.name}`, "
          f"`nttrace ab stop {loop.name}` ends it")
    m = machine or real_machine(loop, sched)
    try:
        rc = begin(loop, m)
    except BaseException:             # Ctrl-C while the first boot is asked for
        m.finish(False)
        shutil.rmtree(loop.dir, ignore_errors=True)
        raise
    if rc != EXIT_OK:      # the first boot could not be asked for: unit removed by then, no run taken
        why = loop.state().get("why")
        shutil.rmtree(loop.dir, ignore_errors=True)
        raise CapabilityError(f"ab start: {why}; nothing left installed")
    return rc
