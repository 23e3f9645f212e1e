# SPDX-License-Identifier: Apache-2.0
"""A loop of `nttrace ab` on a machine that is a plain Python object: the
kernels are small files with a real bzImage setup header (what nttrace.ab.
kernels reads), the boots are what the test says the firmware did, and each
boot's validate returns a report the lab recorded (tests/fixtures/recorded/ab:
base's boots for base, nt-v3's for patched). What the step reads of /proc
and /sys (the boot's settings, pstore, the watchdog's bootstatus) is a
directory laid out like them, rewritten at each boot (/proc/cmdline: the
kexec command line the step passed, or the firmware's); the journal's boots
are the boots this machine went through. The state machine under test is
the real one (nttrace.ab.step); only the machine around it is this."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from nttrace.ab import kernels, schedule, step, store, unit
from nttrace.ab.loop import Loop, new_state
from nttrace.kernel import boot_settings, last_reset

RECORDED_AB = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ab" / "ab-base-nt-v3"
BUILDS = {"base": "7.2.13 (builder@lab) #1 SMP PREEMPT_DYNAMIC Sat Nov 28 10:00:00 UTC 2026",
          "patched": "7.2.13-nt (builder@lab) #1 SMP PREEMPT_DYNAMIC Sat Nov 28 11:00:00 UTC 2026"}
DEFAULT = "6.1.0-57-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)"
FIRMWARE_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-57-amd64 root=/dev/vda ro quiet"
# the files of /proc and /sys the boot's settings come from, as on a 2-socket Intel server
SYS_FILES = {
    "sys/devices/system/cpu/intel_pstate/no_turbo": "0",
    "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
    "sys/kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never",
    "proc/sys/kernel/numa_balancing": "1",
    "sys/devices/system/cpu/smt/control": "on",
    "sys/devices/system/cpu/smt/active": "1",
    "sys/devices/system/cpu/cpuidle/current_driver": "intel_idle",
    "sys/devices/system/cpu/cpuidle/current_governor_ro": "menu",
    "sys/module/intel_idle/parameters/max_cstate": "9",
    "sys/devices/system/cpu/cpufreq/policy0/scaling_driver": "intel_pstate",
    "sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "performance",
    "sys/devices/system/cpu/cpufreq/policy1/scaling_driver": "intel_pstate",
    "sys/devices/system/cpu/cpufreq/policy1/scaling_governor": "performance",
    "sys/class/watchdog/watchdog0/bootstatus": "0",
    "sys/class/watchdog/watchdog0/identity": "iTCO_wdt",
    "proc/cpuinfo": "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nmicrocode\t: 0x2b000571\n\n"
                    "processor\t: 1\nmodel name\t: Intel(R) Xeon(R)\nmicrocode\t: 0x2b000571\n",
}


def bzimage(path: Path, version: str, body: bytes = b"") -> Path:
    """A file with an x86 boot setup header ("HdrS" at 0x202) whose
    kernel_version field (0x20E) points at `version`, as a bzImage's does."""
    data = bytearray(0x400)
    data[0x1FE:0x200] = b"\x55\xaa"
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x206, 0x020F)
    struct.pack_into("<H", data, 0x20E, 0x400 - 0x200)
    data += version.encode() + b"\0" + body
    path.write_bytes(bytes(data))
    return path


def proc_version(image_version: str) -> str:
    """/proc/version of a kernel whose image says image_version."""
    release, builder, rest = image_version.split(" ", 2)
    return f"Linux version {release} {builder} (gcc (GCC) 15.3.0, GNU ld (GNU Binutils) 2.46) {rest}"


def running_of(image_version: str) -> kernels.Running:
    return kernels.Running(image_version.split()[0], proc_version(image_version))


def recorded_run(side: str, k: int) -> dict:
    """The lab's recorded report of boot k (cycled) of the side: base = A, any other kernel = B."""
    d = RECORDED_AB / ("A" if side == "base" else "B")
    boots = sorted(d.glob("boot-*"))
    return json.loads((boots[(k - 1) % len(boots)] / "memmap_fsdax.report.json").read_text())


def make_loop(tmp_path: Path, rounds: int = 2, seed: int = 1, max_failures: int = 3, rebind: str | None = None,
              via: str = "kexec", builds: dict | None = None, unit_dir: Path | None = None, **extra) -> Loop:
    """A loop as `ab start` leaves it: schedule and state written, its units'
    drop-ins in `unit_dir` (default tmp_path/units, which the unit room's
    conftest makes unit.UNIT_DIR), nothing booted. `builds`: {label: build
    string} of a series (default BUILDS: base and patched); `extra`: more of
    the schedule (reset, until, stay, ...)."""
    builds = builds or BUILDS
    unit_dir = unit_dir or tmp_path / "units"
    for u, text in unit.dropins("t", "/usr/local/bin/nttrace", tmp_path / "ab", 9000, 900,
                                [b.split()[0] for b in builds.values()]).items():
        (unit_dir / f"{u}.d").mkdir(parents=True, exist_ok=True)
        (unit_dir / f"{u}.d" / "loop.conf").write_text(text)
    images = {side: bzimage(tmp_path / f"{side}.bzImage", build) for side, build in builds.items()}
    ks = {side: kernels.resolve(str(images[side])) for side in builds}
    loop = Loop(tmp_path / "ab" / "t")
    store.make_private_dir(loop.dir.parent)
    store.make_private_dir(loop.dir)
    store.make_private_dir(loop.runs_dir)
    slots = schedule.make(rounds, seed, list(builds))
    store.write_json(loop.schedule_path, {
        "name": "t", "created": 1000.0, "seed": seed, "rounds": rounds, "slots": [s.as_json() for s in slots],
        "kernels": {side: k.as_json() for side, k in ks.items()}, "via": via, "cmdline": "root=/dev/vda ro",
        "grub_entries": None, "validate_args": ["--check", "kernel.memmap*", "--rebind", rebind or "namespace0.0",
                                                "--runs", "30"],
        "rebind": rebind, "max_failures": max_failures, "wait_quiet_s": 0, "validate_timeout_s": 60,
        "default_kernel": DEFAULT.split()[0], "deadline_s": 900,
        "nttrace": {"exe": "/usr/local/bin/nttrace", "version": "0.1.0", "commit": "abc", "package_sha256": "p1"},
        **extra})
    loop.save_state(new_state())
    return loop


class SimMachine:
    """The machine under the loop. `boot()` records what the step asked;
    `reboot()` is the boot happening: the kernel asked comes up, unless the
    test said it panics (then the firmware brings up the default kernel)."""

    def __init__(self, loop: Loop):
        self.loop = loop
        self.sched = loop.schedule()
        self.now = running_of(DEFAULT)
        self.bid = 0
        self.root = loop.dir.parent.parent / "machine-root"    # /proc and /sys as the step reads them
        for rel, text in SYS_FILES.items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text + "\n")
        (self.root / "sys/fs/pstore").mkdir(parents=True, exist_ok=True)
        self.set_cmdline(FIRMWARE_CMDLINE)
        self.journal_boots: list[tuple[str, str]] = [("boot-0", DEFAULT.split()[0])]   # (boot id, release started)
        self.cmdlines: list[str] = []        # the command line passed with each boot asked
        self.shutdown: str | None = None     # why the system is going down, while it is
        self.t = 1000.0
        self.asked: list[dict] = []          # kernels the step asked to boot, in order
        self.finished: list[bool] = []       # finish(reboot) calls
        self.validated: list[tuple[str, int]] = []   # (side, boot id) of each validate run
        self.panics: set[str] = set()        # releases that panic at boot
        self.free = 10 << 30
        self.namespace = True
        self.validate_result: tuple[int, str, str] | None = None   # force validate's (rc, out, err)
        self.nttrace_ident = {"version": "0.1.0", "commit": "abc", "package_sha256": "p1"}
        self.reports: list[Loop] = []
        self.logs: list[str] = []
        self.default_entry = {"loader": "grub", "entry": "gnulinux-advanced>gnulinux-6.1", "release": DEFAULT.split()[0],
                              "how": "/boot/grub/grub.cfg: set default=\"gnulinux-advanced>gnulinux-6.1\""}
        # the watchdog as this boot has it: armed by systemd, as the loop planned (reset.observed's fields)
        self.watchdog_seen = {"device": "/dev/watchdog0", "present": True, "held_by_pid1": True, "state": "active",
                              "timeout_s": 60, "systemd_runtime_s": 60.0}
        self.deadlines_stopped: list[str] = []   # boot ids whose deadline the step stopped
        self.held: list[str] = []                # the special targets active (what the deadline records)
        self.resets: list[str] = []              # boot ids the deadline reset

    def machine(self) -> step.Machine:
        return step.Machine(running=lambda: self.now, boot_id=lambda: f"boot-{self.bid}", boot=self.boot,
                       finish=self.finish, wait_quiet=lambda limit: {"state": "quiet"}, validate=self.validate,
                       free_bytes=lambda p: self.free, namespace_present=lambda ns: self.namespace,
                       write_report=self.reports.append, clock=lambda: self.t, nttrace=lambda: dict(self.nttrace_ident),
                       log=self.logs.append, settings=lambda: boot_settings.read(self.root),
                       shutting_down=lambda: self.shutdown,
                       last_reset=lambda booting, this: last_reset.read(
                           self.root, booting.get("at"), booting.get("from_boot"), this, journal_of=self.journal),
                       stop_deadline=lambda: self.deadlines_stopped.append(f"boot-{self.bid}"),
                       default_boot=lambda: dict(self.default_entry),
                       watchdog=lambda device: dict(self.watchdog_seen, device=device),
                       build_id=lambda: f"buildid-{self.now.release}",
                       targets=lambda: list(self.held),
                       reset_now=lambda: self.resets.append(f"boot-{self.bid}"))

    def set_cmdline(self, cmdline: str) -> None:
        (self.root / "proc").mkdir(parents=True, exist_ok=True)
        (self.root / "proc/cmdline").write_text(cmdline + "\n")

    def journal(self, asking: str, this: str) -> dict:
        """What `journalctl --list-boots` and each boot's first kernel line would say."""
        releases = dict(self.journal_boots)
        return last_reset.between([b for b, _ in self.journal_boots], asking, this,
                                  lambda b: next((r for i, r in releases.items() if last_reset.boot_key(i) == b), None))

    def crash_record(self, release: str, panic: str = "Kernel panic - not syncing: Fatal exception",
                     name: str = "dmesg-ramoops-0") -> Path:
        """A crashed kernel's log tail as pstore keeps it."""
        p = self.root / "sys/fs/pstore" / name
        p.write_text(f"Panic#1 Part1\n<4>[   3.2] CPU: 1 PID: 1 Comm: swapper/0 Not tainted {release} #1\n"
                     f"<0>[   3.3] {panic}\n")
        return p

    def boot(self, kernel: dict, cmdline: str, entry) -> None:
        self.asked.append(kernel)
        self.cmdlines.append(cmdline)

    def finish(self, reboot: bool) -> list:
        self.finished.append(reboot)
        return []

    def side_now(self) -> str | None:
        for side in schedule.sides(self.sched):
            if kernels.is_running(self.sched["kernels"][side], self.now):
                return side
        return None

    def validate(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        side = self.side_now()
        self.validated.append((side, self.bid))
        self.t += 60
        if self.validate_result is not None:
            return self.validate_result
        run = recorded_run(side, sum(1 for s, _ in self.validated if s == side))
        run["boot_id"] = f"boot-{self.bid}"
        return 0, json.dumps(run), ""

    def reboot(self, lands_on: str | None = None, started: bool = False) -> None:
        """The boot the step asked for happens (or lands_on: a build string,
        then the firmware's boot). started: the asked kernel got as far as
        writing its journal before the machine reset (a boot of it the
        journal lists before this one)."""
        self.bid += 1
        self.t += 90
        self.shutdown = None
        asked = self.asked[-1]["build"] if self.asked else DEFAULT
        if lands_on is None:
            lands_on = DEFAULT if asked.split()[0] in self.panics else asked
        if started and lands_on != asked:
            self.journal_boots.append((f"boot-{self.bid}-started", asked.split()[0]))
        self.now = running_of(lands_on)
        via_kexec = self.sched["via"] == "kexec" and self.asked and lands_on == asked
        self.set_cmdline(self.cmdlines[-1] if via_kexec else FIRMWARE_CMDLINE)
        self.journal_boots.append((f"boot-{self.bid}", lands_on.split()[0]))

    def cut_every_patched_run(self, m: step.Machine, on_cut=lambda: None, boots: int = 12) -> None:
        """The loop from its start with the patched kernel going down in the
        middle of each of its runs (after on_cut(), the crash's trace), the
        firmware then bringing up the default kernel: the step is run after
        each boot until the loop stops running or `boots` boots have passed."""
        def validate(argv, timeout):
            if self.side_now() == "patched":
                on_cut()
                raise KeyboardInterrupt              # the machine goes down mid-run
            return self.validate(argv, timeout)
        m.validate = validate
        step.begin(self.loop, m)
        patched = BUILDS["patched"].split()[0]
        for _ in range(boots):
            if self.loop.state()["state"] != "running":
                break
            self.reboot(lands_on=DEFAULT if self.now.release.startswith(patched) else None)
            try:
                step.step(self.loop, m)
            except KeyboardInterrupt:
                pass                                 # the crash; the next reboot() is the firmware's


def begun(tmp_path: Path, **loop_args) -> tuple[Loop, SimMachine, step.Machine]:
    """A loop (make_loop(tmp_path, **loop_args)) begun on a SimMachine, its
    first boot asked for and not yet happened."""
    loop = make_loop(tmp_path, **loop_args)
    sim = SimMachine(loop)
    m = sim.machine()
    step.begin(loop, m)
    return loop, sim, m


def first_slot_measured(tmp_path: Path, **loop_args) -> tuple[Loop, SimMachine, step.Machine]:
    """A loop (make_loop(tmp_path, **loop_args)) begun on a SimMachine, whose
    first boot came up on slot 1's kernel and whose step then measured it."""
    loop, sim, m = begun(tmp_path, **loop_args)
    sim.reboot()
    step.step(loop, m)
    return loop, sim, m


def drive(loop: Loop, sim: SimMachine, m: step.Machine | None = None, lands=None, limit: int = 40) -> list[int]:
    """begin, then boot after boot until the loop leaves `running` (at most
    `limit` boots); lands(n) may say what the n-th boot lands on (a build
    string). m: the machine the step runs on (sim.machine() by default).
    The exit codes of begin and of each step, in order."""
    if m is None:
        m = sim.machine()
    codes = [step.begin(loop, m)]
    n = 0
    while loop.state()["state"] == "running" and n < limit:
        n += 1
        sim.reboot(lands(n) if lands else None)
        codes.append(step.step(loop, m))
    return codes
