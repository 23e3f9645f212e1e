"""A loop of `nttrace ab` on a machine that is a plain Python object: the
kernels are small files with a real bzImage setup header (what nttrace.ab.
kernels reads), the boots are what the test says the firmware did, and each
boot's validate returns a report the lab recorded (tests/fixtures/recorded/ab:
base's boots for base, nt-v3's for patched). The state machine under test is
the real one (nttrace.ab.step); only the machine around it is this."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from nttrace.ab import kernels, schedule, store
from nttrace.ab.loop import Loop, new_state
from nttrace.ab.step import Machine

RECORDED_AB = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ab" / "ab-base-nt-v3"
BUILDS = {"base": "7.2.13 (builder@lab) #1 SMP PREEMPT_DYNAMIC Sat Nov 28 10:00:00 UTC 2026",
          "patched": "7.2.13-nt (builder@lab) #1 SMP PREEMPT_DYNAMIC Sat Nov 28 11:00:00 UTC 2026"}
DEFAULT = "6.1.0-57-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)"


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
    """The lab's recorded report of boot k (cycled) of the side: base = A, patched = B."""
    d = RECORDED_AB / ("A" if side == "base" else "B")
    boots = sorted(d.glob("boot-*"))
    return json.loads((boots[(k - 1) % len(boots)] / "memmap_fsdax.report.json").read_text())


def make_loop(tmp_path: Path, rounds: int = 2, seed: int = 1, max_failures: int = 3, rebind: str | None = None,
              via: str = "kexec") -> Loop:
    """A loop as `ab start` leaves it: schedule and state written, nothing booted."""
    images = {side: bzimage(tmp_path / f"{side}.bzImage", BUILDS[side]) for side in schedule.SIDES}
    ks = {side: kernels.resolve(str(images[side])) for side in schedule.SIDES}
    loop = Loop(tmp_path / "ab" / "t")
    store.make_private_dir(loop.dir.parent)
    store.make_private_dir(loop.dir)
    store.make_private_dir(loop.runs_dir)
    slots = schedule.make(rounds, seed)
    store.write_json(loop.schedule_path, {
        "name": "t", "created": 1000.0, "seed": seed, "rounds": rounds, "slots": [s.as_json() for s in slots],
        "kernels": {side: k.as_json() for side, k in ks.items()}, "via": via, "cmdline": "root=/dev/vda ro",
        "grub_entries": None, "validate_args": ["--check", "kernel.memmap*"] + (["--rebind", rebind] if rebind else []),
        "rebind": rebind, "max_failures": max_failures, "wait_quiet_s": 0, "validate_timeout_s": 60,
        "default_kernel": DEFAULT.split()[0],
        "nttrace": {"exe": "/usr/local/bin/nttrace", "version": "0.1.0", "commit": "abc", "package_sha256": "p1"}})
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

    def machine(self) -> Machine:
        return Machine(running=lambda: self.now, boot_id=lambda: f"boot-{self.bid}", boot=self.boot,
                       finish=self.finish, wait_quiet=lambda limit: {"state": "quiet"}, validate=self.validate,
                       free_bytes=lambda p: self.free, namespace_present=lambda ns: self.namespace,
                       write_report=self.reports.append, clock=lambda: self.t, nttrace=lambda: dict(self.nttrace_ident),
                       log=self.logs.append)

    def boot(self, kernel: dict, cmdline: str, entry) -> None:
        self.asked.append(kernel)

    def finish(self, reboot: bool) -> list:
        self.finished.append(reboot)
        return []

    def side_now(self) -> str | None:
        for side in schedule.SIDES:
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

    def reboot(self, lands_on: str | None = None) -> None:
        """The boot the step asked for happens (or lands_on: a build string)."""
        self.bid += 1
        self.t += 90
        asked = self.asked[-1]["build"] if self.asked else DEFAULT
        if lands_on is None:
            lands_on = DEFAULT if asked.split()[0] in self.panics else asked
        self.now = running_of(lands_on)
