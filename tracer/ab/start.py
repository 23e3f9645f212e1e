# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab start`: everything checked before the first reboot, then the
schedule written, the units installed and enabled, the reset path armed, the
first kernel booted.

The loop's kernels are a series (`--series [LABEL=]K0,K1,...,Kn`: K0 the
base, each Ki a step on the one before) or its common case, two (`--base B
--patched P`, the series base=B,patched=P): one schedule, one step, one
report either way.

Order: the input (exit 2 at once: NAME, N, the kernels, the namespace, the
exercises, the measured checks, --until, the command line, the room on the
disk); then the refusals a plan can be printed beside, in this order: what
the machine must have (exit 3: root, systemd as init, kexec-tools and every
kernel loading with `kexec -l` for --via kexec, grub for --via reboot), the
kernels' preflight (nttrace.ab.preflight: every two kernels
distinguishable, each with its own modules and headers, the bootloader's
default; exit 2, or 3 for lockdown and Secure Boot) and the reset path
(nttrace.ab.reset: a watchdog or --no-watchdog, exit 3; each kernel with
the watchdog's driver, exit 2). A real start raises the first of them;
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

from nttrace.ab import boot, kernels, measured, preflight, reset, schedule, store, unit
from nttrace.ab.loop import Lock, Loop, changeable_by_others, new_state, nttrace_exe, nttrace_identity
from nttrace.ab.step import FREE_FLOOR_BYTES, RUN_BYTES, Machine, begin, real_machine
from nttrace.errors import EXIT_OK, CapabilityError, UsageError


def validate_args(args) -> list[str]:
    """The loop's validate options, as validate's own flags."""
    return measured.validate_args(args.check, args.quick, args.rebind, args.runs, getattr(args, "demote", False),
                                  args.exercise)


def series_specs(args) -> list[tuple[str, str]]:
    """[(label, kernel spec)] in series order: --series, or --base and --patched."""
    if getattr(args, "series", None):
        if args.base or args.patched:
            raise UsageError("ab start: --series names every kernel, the base first: it does not go with --base "
                             "and --patched")
        return schedule.parse_series(args.series)
    if not args.base or not args.patched:
        raise UsageError("ab start: give --base and --patched, or --series K0,K1,... (the base first)")
    return [("base", args.base), ("patched", args.patched)]


def until_time(text: str | None, now: float | None = None) -> float | None:
    """--until HH:MM: the next time the local clock reads it (today, or
    tomorrow where that time has passed), as a timestamp; None without it."""
    if text is None:
        return None
    import datetime
    m = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", text.strip())
    if not m:
        raise UsageError(f"ab start --until {text!r}: a local time HH:MM (e.g. 06:30)")
    now_dt = datetime.datetime.fromtimestamp(now if now is not None else time.time())
    at = now_dt.replace(hour=int(m[1]), minute=int(m[2]), second=0, microsecond=0)
    if at <= now_dt:
        at += datetime.timedelta(days=1)
    return at.timestamp()


def check_input(args, hashes: kernels.HashCache | None = None) -> tuple[Loop, dict]:
    """Exit-2 checks; returns the loop and the kernels {label: Kernel}, the
    base first (the hashes of their files kept in `hashes`)."""
    loop = Loop.named(args.name)
    if args.boots < 1:
        raise UsageError("ab start: --boots must be at least 1 (boots of each kernel)")
    if args.max_failures < 1:
        raise UsageError("ab start: --max-failures must be at least 1")
    if args.runs < 1 or not 0 <= args.wait_quiet < math.inf or not 0 < args.validate_timeout < math.inf:
        raise UsageError("ab start: --runs and --validate-timeout must be positive, --wait-quiet not negative, "
                         "both finite numbers of seconds")
    deadline = getattr(args, "boot_deadline", None)
    if deadline is not None and not 60 <= deadline < math.inf:
        raise UsageError("ab start: --boot-deadline must be at least 60 seconds (a boot's kernel, initrd and "
                         "services must fit in it)")
    specs = series_specs(args)
    until_time(getattr(args, "until", None))
    refuse_if_taken(loop)
    ks = {label: kernels.resolve(spec, cache=hashes) for label, spec in specs}
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
    if not measured.measured_checks(validate_args(args)):
        lacking = measured.not_asked(validate_args(args))
        raise UsageError("ab start: no selected check measures a figure the A/B tests at these options, so every "
                         "boot would measure nothing; "
                         + (f"ask one to do its work: {'; '.join(lacking)}" if lacking else
                            "select kernel.memmap_latency (--rebind NAMESPACE), kernel.demotion_nt (--demote) or a "
                            "probe.<name> check (--exercise NAME)"))
    return loop, ks


def command_line(args) -> str:
    if args.via == "reboot":
        return ""
    cmdline = args.cmdline if args.cmdline is not None else boot.default_cmdline(Path("/proc/cmdline").read_text())
    if "root=" not in cmdline:
        raise UsageError(f"ab start: the command line to pass has no root= ({cmdline[:60]!r}{'...' if len(cmdline) > 60 else ''}); give it with --cmdline")
    return cmdline


def check_room(loop: Loop, boots: int) -> int:
    """Bytes the runs need (`boots` in all); UsageError where the disk has not that room."""
    where = loop.dir.parent
    while not where.exists():
        where = where.parent
    need = boots * RUN_BYTES + FREE_FLOOR_BYTES
    free = shutil.disk_usage(where).free
    if free < need:
        raise UsageError(f"ab start: {free >> 20} MiB free under {where}, {boots} runs need {need >> 20} MiB")
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
    slots = schedule.make(args.boots, seed, list(ks))
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
            "preflight": {"config_diffs": dict(getattr(pre, "config_diffs", None) or {}), "default_boot": default_boot},
            "estimate": estimate, "measured_checks": measured.measured_checks(validate_args(args)),
            "deadline_s": deadline_of(args, estimate), "until": until_time(getattr(args, "until", None)),
            "stay": bool(getattr(args, "stay", False)),
            "nttrace": {"exe": exe, **nttrace_identity()}}


def deadline_of(args, estimate: dict | None) -> int:
    """The boot deadline: --boot-deadline, or unit.default_deadline_s of the measured boot."""
    given = getattr(args, "boot_deadline", None)
    return int(given) if given is not None else unit.default_deadline_s((estimate or {}).get("boot_s"))


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


def estimate(args, boot_m: dict, kernel_count: int = 2) -> dict:
    """Per boot and in all: the measured boot time and the two bounds."""
    bounds = float(args.wait_quiet) + float(args.validate_timeout)
    per = (boot_m["boot_s"] or 0.0) + bounds
    n = kernel_count * args.boots
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
    labels = schedule.sides(sched)
    slots = schedule.from_json(sched["slots"])
    kind = "each kernel" if len(labels) == 2 else f"each of the series' {len(labels)} kernels"
    print(f"nttrace ab {sched['name']}: {sched['rounds']} boots of {kind}, {len(slots)} in all, via {sched['via']}",
          file=out)
    width = max(8, *(len(label) for label in labels))
    for side in labels:
        print(f"  {side:{width}} {k[side]['release']}  {k[side]['image']}"
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
    for label, diff in schedule.config_diffs(sched).items():
        if not diff:
            continue
        before = labels[labels.index(label) - 1] if label in labels else "the kernel before"
        print(f"  the configs of {before} and {label} differ in {len(diff)} line(s):", file=out)
        for line in diff[:DIFF_SHOWN]:
            print(f"    {line}", file=out)
        if len(diff) > DIFF_SHOWN:
            print(f"    ... and {len(diff) - DIFF_SHOWN} more (schedule.json, \"preflight\")", file=out)
    if sched.get("estimate"):
        for line in time_lines(sched["estimate"]):
            print(f"  {line}", file=out)
    if sched.get("until"):
        print(f"  --until: the loop ends at {time.strftime('%Y-%m-%d %H:%M %Z', time.localtime(sched['until']))} "
              "wherever it is (the report of what was reached, the default kernel booted)"
              + (f"; {fits(sched)}" if fits(sched) else ""), file=out)
    print(f"  seed {sched['seed']}; order ({schedule.legend(labels)}): {schedule.order_text(slots, labels)}", file=out)
    print(f"  at each boot: {' '.join(['nttrace', 'validate', '--json', *sched['validate_args']])}", file=out)
    print(f"  a boot is a run only where each of these gives its primary figure: "
          f"{', '.join(sched['measured_checks'])} (else a failed measurement)", file=out)
    print(f"  boot deadline: {duration(sched['deadline_s'])} from a loop kernel's start to the loop's step, or the "
          "machine is reset (emergency or rescue mode, a hang with PID 1 alive); --boot-deadline S", file=out)
    print(f"  units: {unit.unit_name(sched['name'])} -> {' '.join(unit.command(sched['nttrace']['exe'], sched['name']))}"
          f"; {unit.timer_name(sched['name'])} (the deadline)", file=out)
    if sched.get("stay"):
        print("  --stay: a loop that stops on a fault leaves the machine on the kernel it stopped at", file=out)
    for line in changes(sched):
        print(f"  will change: {line}", file=out)
    for line in checked:
        print(f"  checked: {line}", file=out)
    others = changeable_by_others(sched["nttrace"]["exe"])
    if others:
        print(f"  warning: the unit runs as root, at every boot, code a user other than root can change: {others[0]}"
              + (f" and {len(others) - 1} more" if len(others) > 1 else "")
              + "; install nttrace where only root can write", file=out)
    steps = len(labels) - 1
    testable = boots_to_test(steps)
    if sched["rounds"] < testable and steps == 1:
        print(f"  note: {sched['rounds']} boot(s) a side cannot test a change: the exact test across boots needs "
              f"{testable} a side (docs/ab.md, \"Reading an A/B\"); the report will say so", file=out)
    elif sched["rounds"] < testable:
        print(f"  note: {sched['rounds']} boot(s) a kernel cannot mark a step: at the series' alpha, 0.05/{steps} a "
              f"step (Bonferroni over its {steps} steps), the exact test across boots needs {testable} a kernel "
              "(docs/ab.md, \"Reading an A/B\"); the report will say so", file=out)


DIFF_SHOWN = 12


def fits(sched: dict) -> str:
    """How many of the schedule's boots fit before --until at the measured
    boot time and the bounds (what is known before the first run)."""
    e = sched.get("estimate") or {}
    if not sched.get("until") or not e.get("per_boot_max_s"):
        return ""
    left = sched["until"] - sched["created"]
    n = len(sched["slots"])
    at_bounds = min(n, int(left // e["per_boot_max_s"]))
    return (f"{at_bounds} of the {n} boots fit at the bounds ({duration(e['per_boot_max_s'])} a boot)"
            + (", all of them at the measured boot time alone" if e.get("boot_s") and left >= n * e["boot_s"] else ""))


def changes(sched: dict) -> list[str]:
    """What the loop changes on the machine, a line each; all of it undone
    when the loop ends."""
    out = [f"{unit.unit_name(sched['name'])} and {unit.timer_name(sched['name'])}: enabled, with their drop-ins "
           f"under {unit.UNIT_DIR}" + ("" if unit.packaged() else
                                       " (and the templates, which no package installed here)")]
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


def boots_to_test(steps: int = 1) -> int:
    """The fewest boots a kernel at which the A/B can mark a step's primary
    figure, at the series' alpha (Bonferroni over its steps)."""
    from nttrace.ab import statistics
    return statistics.fewest_runs_for(statistics.family_alpha(steps))


def running_loops() -> list[str]:
    """The loops under the state root whose state says running and whose
    units are installed (a directory with no schedule is a start cut short;
    a state that says running without its units is a loop that ended where
    it could not save its state: `ab status` says so)."""
    out = []
    for d in sorted(store.root().iterdir()) if store.root().is_dir() else []:
        if d.is_dir() and store.NAME_RE.fullmatch(d.name) and (d / "schedule.json").exists() \
                and Loop(d).state()["state"] == "running" and unit.installed(d.name):
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
    hashes = kernels.HashCache()
    loop, ks = check_input(args, hashes)
    cmdline = command_line(args)
    need = check_room(loop, len(ks) * args.boots)
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
    sched = plan(args, loop, ks, cmdline, exe, reset_plan, pre, estimate(args, measured_boot(args.via), len(ks)))
    unit_texts = unit.dropins(loop.name, exe, store.root(), unit.timeout_s(sched), sched["deadline_s"],
                              [k.release for k in ks.values()])      # exit 2 before anything is written
    print_plan(sched, [f"room for {len(ks) * args.boots} runs ({need >> 20} MiB)"] + list(pre.found) + reset_found
               + found)
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
        hashes.path = loop.hash_cache().path       # the kernels' hashes, for the first boot's checks
        hashes.save()
        for line in unit.install(loop.name, unit_texts):
            print(line)
        for line in reset.arm(loop.name, reset_plan):
            print(line)
    except BaseException as exc:      # a full disk, systemctl timing out, Ctrl-C: nothing left installed or armed
        unit.remove(loop.name)        # disarms too
        shutil.rmtree(loop.dir, ignore_errors=True)
        if isinstance(exc, (OSError, RuntimeError, subprocess.SubprocessError)):
            raise CapabilityError(f"ab start: cannot install the loop: {exc}") from None
        raise
    print(f"installed and enabled {unit.unit_name(loop.name)} and {unit.timer_name(loop.name)}; "
          f"`nttrace ab status {loop.name}`, `nttrace ab stop {loop.name}` ends it")
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
