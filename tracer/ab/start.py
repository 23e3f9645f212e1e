# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab start`: everything checked before the first reboot, then the
schedule written, the unit installed and enabled, the reset path armed, the
first kernel booted.

Order: the input (exit 2 at once: NAME, N, the kernels, the namespace, the
exercises, the command line, the room on the disk); then the refusals a plan
can be printed beside, in this order: what the machine must have (exit 3:
root, systemd as init, kexec-tools and both kernels loading with `kexec -l`
for --via kexec, grub for --via reboot), the kernels' preflight
(nttrace.ab.preflight: the two kernels distinguishable, each with its own
modules and headers, the bootloader's default; exit 2, or 3 for lockdown and
Secure Boot) and the reset path (nttrace.ab.reset: a watchdog or
--no-watchdog, exit 3; each kernel with the watchdog's driver, exit 2). A
real start raises the first of them;
--dry-run prints the plan and every one as "would refuse", and exits with the
first one's code. Nothing is written until every check passed, and without
--yes the user is asked before the first reboot.
"""
from __future__ import annotations

import importlib.util
import math
import re
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nttrace.ab import boot, kernels, preflight, reset, schedule, store, unit
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
        checks.select(args.check, args.quick)      # UsageError: a pattern that selects nothing (with --quick too)
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
    """Exit-3 checks: what they found (a line each) and what is missing.
    The bootloader's one-shot for --via reboot is the preflight's
    (preflight.check -> bootloader.check_reboot)."""
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
    except (CapabilityError, UsageError) as exc:
        missing.append(exc)
    return found, missing


def with_added(cmdline: str, reset_plan: dict | None) -> str:
    """The command line the loop kernels boot with: the user's, and the
    panic settings it did not set (--via kexec)."""
    added = (reset_plan or {}).get("cmdline_added") or []
    return " ".join([cmdline, *added]).strip() if cmdline else cmdline


def plan(args, loop: Loop, ks: dict, cmdline: str, exe: str, reset_plan: dict | None = None,
         pre=None, estimate: dict | None = None) -> dict:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    slots = schedule.make(args.boots, seed)
    # --via reboot: the bootloader's one-shot entries as the preflight found
    # them (none where it refused, which stops a real start before this)
    grub_entries = {side: (getattr(pre, "entries", None) or {}).get(side) for side in ks} if args.via == "reboot" else None
    default_boot = dict(getattr(pre, "default_boot", None) or {})
    default_kernel = default_boot.get("release")
    default_note = None
    if not default_kernel:
        default_kernel = os.uname().release
        default_note = (f"the bootloader's default entry could not be read ({default_boot.get('how') or 'not read'}); "
                        f"taken to be the running kernel {default_kernel}")
    return {"name": loop.name, "created": round(time.time(), 1), "seed": seed, "rounds": args.boots,
            "slots": [s.as_json() for s in slots], "kernels": {side: k.as_json() for side, k in ks.items()},
            "via": args.via, "cmdline": with_added(cmdline, reset_plan), "grub_entries": grub_entries,
            "validate_args": validate_args(args), "rebind": args.rebind, "max_failures": args.max_failures,
            "wait_quiet_s": args.wait_quiet, "validate_timeout_s": args.validate_timeout,
            "default_kernel": default_kernel, "default_kernel_note": default_note,
            "reset": reset_plan,
            "preflight": {"config_diff": list(getattr(pre, "config_diff", None) or []), "default_boot": default_boot},
            "estimate": estimate,
            "nttrace": {"exe": exe, **nttrace_identity()}}


# -- the time a loop takes ---------------------------------------------------------
_SPAN_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_timespan(text: str) -> float | None:
    """systemd's '1min 2.511s', '712ms' in seconds; None where it is not one."""
    total, seen = 0.0, False
    for word in text.split():
        m = re.fullmatch(r"([\d.]+)(us|ms|s|min|h|d)", word)
        if not m:
            return None
        total += float(m.group(1)) * _SPAN_UNITS[m.group(2)]
        seen = True
    return total if seen else None


def parse_analyze_time(text: str) -> dict[str, float]:
    """`systemd-analyze time`'s parts: {"firmware": s, "loader": s, "kernel": s,
    "initrd": s, "userspace": s} (those it names)."""
    line = next((ln for ln in text.splitlines() if ln.startswith("Startup finished in ")), "")
    parts = {}
    for m in re.finditer(r"((?:[\d.]+(?:us|ms|s|min|h|d)\s*)+)\((\w+)\)", line):
        secs = parse_timespan(m.group(1))
        if secs is not None:
            parts[m.group(2)] = secs
    return parts


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def measured_boot(via: str, run=_run, proc: Path = Path("/proc")) -> dict:
    """This machine's own boot time, as this boot measured it: {"boot_s":
    seconds or None, "how": where it comes from}. --via kexec skips the
    firmware and the loader, so their parts are left out. Neither counts the
    shutdown before the boot (not measured)."""
    try:
        p = run(["systemd-analyze", "time"])
        parts = parse_analyze_time(p.stdout) if p.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError):
        parts = {}
    if parts:
        used = [k for k in ("firmware", "loader", "kernel", "initrd", "userspace")
                if k in parts and (via == "reboot" or k not in ("firmware", "loader"))]
        return {"boot_s": round(sum(parts[k] for k in used), 1),
                "how": f"measured: this boot's {' + '.join(used)} (systemd-analyze time)"}
    try:
        start_ticks = int((proc / "1/stat").read_text().rsplit(")", 1)[1].split()[19])
        secs = start_ticks / os.sysconf("SC_CLK_TCK")
        return {"boot_s": round(secs, 1),
                "how": "measured: this boot's kernel until init started (/proc/1/stat); userspace not measured"}
    except (OSError, ValueError, IndexError):
        return {"boot_s": None, "how": "not measured (no systemd-analyze time, no /proc/1/stat)"}


def estimate(args, boot_m: dict) -> dict:
    """Per boot and in all: the measured boot time and the two bounds."""
    bounds = float(args.wait_quiet) + float(args.validate_timeout)
    per = (boot_m["boot_s"] or 0.0) + bounds
    n = 2 * args.boots
    return {**boot_m, "wait_quiet_max_s": float(args.wait_quiet), "validate_max_s": float(args.validate_timeout),
            "per_boot_max_s": round(per, 1), "boots": n, "total_max_s": round(n * per, 1),
            "boots_measured_s": round(n * boot_m["boot_s"], 1) if boot_m["boot_s"] is not None else None}


def duration(secs: float) -> str:
    secs = float(secs)
    if secs < 10:
        return f"{secs:.1f} s"
    if secs < 90:
        return f"{secs:.0f} s"
    if secs < 90 * 60:
        return f"{secs / 60:.0f} min"
    h, m = divmod(round(secs / 60), 60)
    return f"{h} h" + (f" {m} min" if m else "")


def time_lines(e: dict) -> list[str]:
    boot_part = (f"{duration(e['boot_s'])} to boot ({e['how']})" if e["boot_s"] is not None
                 else f"the boot itself ({e['how']})")
    return [f"time per boot: {boot_part} + up to {duration(e['wait_quiet_max_s'])} waiting for a quiet host "
            f"(--wait-quiet) + up to {duration(e['validate_max_s'])} of validate (--validate-timeout): at most "
            f"{duration(e['per_boot_max_s'])}; the wait and validate are bounds, their real time is known after "
            "the first run (`nttrace ab status`)",
            f"time in all: {e['boots']} boots, at most {duration(e['total_max_s'])}"
            + (f", of which the boots themselves about {duration(e['boots_measured_s'])}"
               if e["boots_measured_s"] is not None else "")]


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
    r = sched.get("reset")
    if r:
        if r["cmdline_added"]:
            print(f"    added by nttrace: {' '.join(r['cmdline_added'])}", file=out)
        if r.get("kept"):
            print(f"    kept, the command line's own: {' '.join(r['kept'])} (the user's value wins)", file=out)
        print(f"  reset: {r['text']}", file=out)
        for line in r.get("not_covered", []):
            print(f"    not covered: {line}", file=out)
    how = ((sched.get("preflight") or {}).get("default_boot") or {}).get("how")
    print(f"  default kernel: {sched['default_kernel']}"
          + (f" ({how})" if how and not sched.get("default_kernel_note") else "")
          + ": every reset and the loop's end boot it", file=out)
    if sched.get("default_kernel_note"):
        print(f"    note: {sched['default_kernel_note']}", file=out)
    diff = (sched.get("preflight") or {}).get("config_diff") or []
    if diff:
        print(f"  the kernels' configs differ in {len(diff)} line(s):", file=out)
        for line in diff[:DIFF_SHOWN]:
            print(f"    {line}", file=out)
        if len(diff) > DIFF_SHOWN:
            print(f"    ... and {len(diff) - DIFF_SHOWN} more (schedule.json, \"preflight\")", file=out)
    if sched.get("estimate"):
        for line in time_lines(sched["estimate"]):
            print(f"  {line}", file=out)
    print(f"  seed {sched['seed']}; order (B base, P patched): {schedule.order_text(slots)}", file=out)
    print(f"  at each boot: {' '.join(['nttrace', 'validate', '--json', *sched['validate_args']])}", file=out)
    print(f"  unit: {unit.unit_name(sched['name'])} -> {' '.join(unit.command(sched['nttrace']['exe'], sched['name']))}",
          file=out)
    for line in changes(sched):
        print(f"  will change: {line}", file=out)
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
              f"{testable} a side (docs/ab.md, \"Reading an A/B\"); the report will say so", file=out)


DIFF_SHOWN = 12


def changes(sched: dict) -> list[str]:
    """What the loop changes on the machine, a line each; all of it undone
    when the loop ends."""
    out = [f"{unit.UNIT_DIR / unit.unit_name(sched['name'])}: installed and enabled (runs at each boot)"]
    if sched.get("reset"):
        out += reset.changes(sched["name"], sched["reset"])
    if sched["via"] == "kexec":
        out.append("at each boot the next kernel is loaded (kexec -l) and booted (systemctl kexec)")
    else:
        out.append("at each boot grub's one-shot entry is set (grub-reboot) and the machine reboots")
    if sched.get("reset") and sched["reset"]["cmdline_added"]:
        out.append(f"the loop kernels' command line gains {' '.join(sched['reset']['cmdline_added'])}")
    out.append("all of it undone when the loop ends (complete, `nttrace ab stop`, a fault)")
    return out


def boots_to_test() -> int:
    """The fewest boots a side at which validate's A/B can mark a primary figure."""
    from nttrace.ab import statistics
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


def confirm(sched: dict, stdin=None, out=None) -> bool:
    """Ask on the terminal before the first reboot: y or yes starts."""
    stdin, out = stdin or sys.stdin, out or sys.stdout
    first = schedule.from_json(sched["slots"])[0]
    k = sched["kernels"][first.side]
    print(f"start loop {sched['name']} and {'kexec' if sched['via'] == 'kexec' else 'reboot'} into the {first.side} "
          f"kernel {k['release']} now? [y/N] ", end="", file=out, flush=True)
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def main(args, machine: Machine | None = None, stdin=None) -> int:
    stdin = stdin or sys.stdin
    if os.geteuid() != 0 and not args.dry_run:
        raise CapabilityError("ab start: needs root (it installs a systemd unit and boots kernels)")
    asks = not args.dry_run and not getattr(args, "yes", False)
    loop, ks = check_input(args)
    cmdline = command_line(args)
    need = check_room(loop, args.boots)
    pre = preflight.check(ks, args.via)
    reset_plan = reset.plan_reset(args, ks, args.via)
    reset_found, reset_refusals = reset.check(reset_plan, ks)
    found, missing = check_machine(args, ks, with_added(cmdline, reset_plan))
    refusals = missing + list(pre.refusals) + reset_refusals     # what this machine cannot do first
    if refusals and not args.dry_run:
        raise refusals[0]
    if asks and not stdin.isatty():
        raise UsageError("ab start: no terminal to ask on before the first reboot: pass --yes "
                         "(read the plan with --dry-run first)")
    exe = nttrace_exe()
    sched = plan(args, loop, ks, cmdline, exe, reset_plan, pre, estimate(args, measured_boot(args.via)))
    unit_text = unit.text(loop.name, exe, store.root(), unit.timeout_s(sched))     # exit 2 before anything is written
    print_plan(sched, [f"room for {2 * args.boots} runs ({need >> 20} MiB)"] + list(pre.found) + reset_found + found)
    if args.dry_run:
        for exc in refusals:
            print(f"  would refuse: {exc}")
        print("dry run: nothing written, installed, loaded or booted")
        return refusals[0].exit_code if refusals else EXIT_OK
    if asks and not confirm(sched, stdin):
        print("not started: nothing written, installed, loaded or booted")
        return EXIT_OK
    claim(loop, sched)                # exit 2 here leaves what another start made untouched
    try:
        store.make_private_dir(loop.runs_dir)
        unit.install(loop.name, unit_text)
        for line in reset.arm(loop.name, reset_plan):
            print(line)
    except BaseException as exc:      # a full disk, systemctl timing out, Ctrl-C: nothing left installed or armed
        unit.remove(loop.name)        # disarms too
        shutil.rmtree(loop.dir, ignore_errors=True)
        if isinstance(exc, (OSError, RuntimeError, subprocess.SubprocessError)):
            raise CapabilityError(f"ab start: cannot install the loop: {exc}") from None
        raise
    print(f"installed and enabled {unit.unit_name(loop.name)}; `nttrace ab status {loop.name}`, "
          f"`nttrace ab stop {loop.name}` ends it")
    m = machine or real_machine(loop, sched)
    # the plan on its way before the machine goes down: to a file or a pipe
    # stdout is block-buffered, and a kexec takes what it still holds
    sys.stdout.flush()
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
