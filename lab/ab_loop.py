# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab` in the lab, on a guest that boots like a server: ONE QEMU
run of the loop's guest (loop_disk.py: firmware, grub from its own disk,
Debian's stock kernel as the default entry, the loop's kernels installed as
packages with releases of their own, ext4, an i6300ESB watchdog), in which
the guest's driver runs `nttrace ab start` with the installed releases and
nttrace boots between them, by kexec or through grub (`--via`), until the
loop is over; the host waits and reads the loop's report.

    python3 -m lab.ab_loop --boots 4 --out ab-loop-base-nt-v3               # 4 boots a side, kexec
    python3 -m lab.ab_loop --boots 4 --via reboot --out ab-loop-reboot      # through the firmware and grub
    python3 -m lab.ab_loop --series base,nt-v2,nt-v3 --boots 2 --via reboot --out ab-loop-series
    python3 -m lab.ab_loop --boots 1 --inject panic:nt-v3 --out ab-fault    # nt-v3 panics in its initramfs
    python3 -m lab.ab_loop --faults --out ab-faults                          # the refusals and the stops

Nothing of the lab helps the loop: no command line (nttrace kexecs with
the running one), no module tree of the lab's, no reset arranged by QEMU's
options beyond the board's own (the watchdog's action is a reset, as on a
board). A boot that panics or hangs comes back only through what nttrace
set up (panic= and the lockup settings on the command line, the watchdog
it arms, its boot deadline), or the run times out. The lab's hands in it
are the faults it injects, each named, FAULT:VARIANT at the first boot of
that loop kernel (FAULTS): in its initramfs, before systemd
(guest-loop-initramfs.sh), "panic" (sysrq c), "lockup" (a CPU stuck with
preemption off: the kernel's own test_lockup), "no-watchdog" (the
watchdog's driver unbound) and "emergency" (the pmem namespace fstab
mounts unbound: emergency mode); once the machine runs
(guest-loop-boot.sh), "hang" (PID 1 held in a ptrace stop: nothing feeds
the watchdog) and "hold" (the boot never reaches multi-user.target while
PID 1 feeds the watchdog); and, at another kernel's boot, "modules" and
"headers" (VARIANT's module tree rewritten, its headers purged). And power
cuts (QEMU's system_reset from its monitor): `--power-cut V:S` S seconds
after validate began at the first boot of V, `--power-cut booting:V:S` S
seconds after the step asked for V's boot (inside the kexec or the reboot).
`--faults` runs, in one QEMU run, what `start` must refuse (the same kernel
twice; grub's default left to Debian's own choice, the highest version: the
patched kernel) and the 1+1 loops of fault_scenarios().

The guest's scripts (guest-loop-boot.sh early at every boot: a line for the
host saying which kernel came up and how; guest-loop.sh and guest_loop.py
once the machine is up: the start, the end) are read from a frozen copy of
the tree (lab.frozen_tree), and nttrace is the wheel built at the start.

Out: OUT/guest/ (the guest's console, its log, ab-boots.jsonl: one line a
boot, an injected fault, a validate begun, a boot asked; for each loop
ab/<name>/: its state directory, report included; ab-end-<name>.json: what
it left on the machine; ab-journal-<name>.txt; ab-end.json and
ab-journal.txt: the last loop's; refuse-<name>.json: a refusal's exit code,
output and what it left), OUT/disk.qcow2 (the run's overlay of the cached
disk) and OUT/run.json: the kernels, the command, the wall time, each
boot's host time (when its line arrived), the faults injected, the commit.
Exit: 0 the loop completed, 1 it did not (its status and the guest's log
said), 2 a bad argument.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import kernel_build, lab, loop_disk
from lab.ab import checkout_commit, say
from nttrace.ab import kernels
from nttrace.daemon.process import die_with_parent
from nttrace.kernel import conditions

NAME = "lab"
# What the loop's every boot checks: the memmap path, timed over the
# rebinds of an fsdax namespace the first boot makes (the figure lab.ab
# calls memmap_fsdax). The CI's loop checks this only: it is the series'
# path, and nothing else the guest spends time on.
MEMMAP = ["--check", "kernel.memmap_latency", "--rebind", "namespace0.0"]
# probe.memremap: memremap_pages() by test_hmm (lab.ab's exercise_memremap)
MEMREMAP = ["--check", "probe.memremap", "--exercise", "memremap"]
CHECK_SETS = {"memmap": MEMMAP, "memremap": MEMREMAP}   # sets of check arguments
FSDAX = ["ndctl", "create-namespace", "-f", "-e", "namespace0.0", "-m", "fsdax", "-M", "dev"]
SEED = 47


def build_string(bzimage: Path) -> str:
    """The kernel's build string as `uname -v` gives it ("#1 SMP
    PREEMPT_DYNAMIC <build date>"), read from the bzImage's setup header
    the way nttrace ab reads it (nttrace.ab.kernels)."""
    return kernels.parse_image_version(kernels.image_version(bzimage)).version


# What the loop's report needs in the guest beyond nttrace's declared
# dependencies: validate's A/B statistics import numpy, its HTML page
# matplotlib, and the image's Debian carries neither. cp311 wheels for the
# guest's Python 3.11, with their dependencies, fetched once by pip into the
# lab's cache (one directory per GUEST_WHEELS).
GUEST_WHEELS = ["numpy<2", "matplotlib"]


def guest_wheels() -> list[Path]:
    key = hashlib.sha256(" ".join(GUEST_WHEELS).encode()).hexdigest()[:12]
    d = lab.CACHE / f"guest-wheels-{key}"
    if not (d / "complete").exists():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        p = subprocess.run(["/usr/bin/python3", "-m", "pip", "download", "-q", *GUEST_WHEELS, "--only-binary=:all:",
                            "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                            "--platform", "manylinux2014_x86_64", "-d", str(d)],
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise lab.LabError(f"pip download {' '.join(GUEST_WHEELS)} for the guest failed: {p.stderr[-2000:]}")
        (d / "complete").write_text(" ".join(GUEST_WHEELS) + "\n")
    return sorted(d.glob("*.whl"))


@dataclass(frozen=True)
class PowerCut:
    """QEMU's system_reset, `seconds` after the first line the guest's early
    unit writes to ab-boots.jsonl (from the step's journal) of `event`:
    "validate" (the step began validate at a boot of the loop kernel
    `variant`) or "booting" (the step asked for the boot of `variant`: the
    cut lands inside the kexec or the reboot). A "booting" cut comes sooner
    when the guest's console shows the shutdown begun (SHUTDOWN_BEGUN) after
    that line: under TCG the services stop and the kexec follows within
    about two seconds of guest time, so a cut timed from the line alone
    lands in the next kernel's boot on a host that runs the guest faster
    than expected (the lockup injected in its initramfs then never fires)."""
    variant: str
    seconds: float
    event: str = "validate"

    @classmethod
    def parse(cls, text: str) -> "PowerCut":
        parts = text.split(":")
        event = parts.pop(0) if len(parts) == 3 else "validate"
        try:
            seconds = float(parts[-1])
        except ValueError:
            seconds = -1.0
        if len(parts) != 2 or not parts[0] or seconds < 0 or event not in ("validate", "booting"):
            raise ValueError(f"--power-cut {text!r}: want [booting:]VARIANT:SECONDS (e.g. base:60, booting:nt-v3:4)")
        return cls(parts[0], seconds, event)

    def line(self, lines: list[tuple[float, dict]], releases: dict[str, str]) -> int | None:
        """The index of the line the cut is timed from, among those seen so far."""
        for i, (_t, b) in enumerate(lines):
            if b.get("event") != self.event:
                continue
            if self.event == "validate" and b.get("kernel") == self.variant:
                return i
            if self.event == "booting" and f" {releases.get(self.variant)} " in f" {b.get('line', '')} ":
                return i
        return None

    def due(self, lines: list[tuple[float, dict]], releases: dict[str, str],
            shutdown_seen: dict[int, float] | None = None) -> float | None:
        """When the cut is due (host time), from the lines seen so far and,
        for a "booting" cut, when the console first showed the shutdown
        begun after its line (shutdown_seen: line index -> host time)."""
        i = self.line(lines, releases)
        if i is None:
            return None
        due = lines[i][0] + self.seconds
        if self.event == "booting" and i in (shutdown_seen or {}):
            due = min(due, shutdown_seen[i])
        return due


# The console's sign that a shutdown (for a kexec or a reboot) has begun:
# systemd stopping the services, or past that, systemd-shutdown or the kexec
SHUTDOWN_BEGUN = re.compile(rb"\bStopping |systemd-shutdown\[1\]|kexec_core: Starting new kernel")


@dataclass
class LoopRun:
    """One loop's QEMU run, as the host found it afterwards."""
    out: Path
    run: lab.LabRun
    kernels: dict            # side (base, patched) or a further kernel's variant -> kernel_build.Kernel
    disk: loop_disk.LoopDisk
    boots: list[dict] = field(default_factory=list)   # ab-boots.jsonl, each with the host's arrival time
    end: dict = field(default_factory=dict)           # ab-end.json
    faults: list[dict] = field(default_factory=list)  # what the host injected, and when
    name: str = NAME                                  # the run's last loop

    @property
    def state(self) -> Path:
        return self.run.results / "ab" / self.name

    def json(self, rel: str, name: str | None = None) -> dict:
        name = name or self.name
        p = self.run.results / "ab" / name / rel
        if not p.exists():
            raise lab.LabError(f"the loop {name} left no {rel}\n{self.run.tail()}")
        return json.loads(p.read_text())

    def end_of(self, name: str) -> dict:
        """ab-end-<name>.json: how the loop `name` ended, what it left."""
        return self._file(f"ab-end-{name}.json")

    def refusal(self, name: str) -> dict:
        """refuse-<name>.json: the start that had to refuse."""
        return self._file(f"refuse-{name}.json")

    def _file(self, name: str) -> dict:
        p = self.run.results / name
        if not p.exists():
            raise lab.LabError(f"the guest wrote no {name}\n{self.run.tail()}")
        return json.loads(p.read_text())

    def kernel_boots(self) -> list[dict]:
        """The boot lines, each with its kernel (a variant, or None: the default)."""
        return [b for b in self.boots if b["event"] == "boot"]


class _Watcher:
    """Each new line of the guest's ab-boots.jsonl with the host's time it
    was seen (within a second), and the power cut, when one is asked for,
    sent through QEMU's monitor at its time."""

    def __init__(self, path: Path, monitor: Path, power_cuts: list[PowerCut], releases: dict[str, str],
                 console: Path | None = None):
        self.path, self.monitor, self.power_cuts, self.releases = path, monitor, list(power_cuts), releases
        self.console = console
        self.arrived: list[tuple[float, str]] = []
        self.console_before: list[int] = []      # per arrived line: the console's size at the poll before it
        self.shutdown_seen: dict[int, float] = {}     # a booting line's index -> when the console showed a shutdown
        self.faults: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self._console_size = 0

    def _read(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return
        new = lines[len(self.arrived):]
        self.arrived += [(time.time(), line) for line in new]
        self.console_before += [self._console_size] * len(new)

    def _read_console(self, armed: list[int]) -> None:
        """For each booting line in `armed` whose shutdown was not yet seen:
        whether the console since it shows one. Then the console's size."""
        if self.console is None:
            return
        try:
            with open(self.console, "rb") as f:
                start = min((self.console_before[i] for i in armed), default=self._console_size)
                f.seek(start)
                data = f.read()
        except OSError:
            return
        for i in armed:
            if SHUTDOWN_BEGUN.search(data, self.console_before[i] - start):
                self.shutdown_seen.setdefault(i, time.time())
        self._console_size = start + len(data)

    def _lines(self) -> list[tuple[float, dict]]:
        out = []
        for t, line in self.arrived:
            try:
                out.append((t, json.loads(line)))
            except ValueError:
                out.append((t, {}))     # kept: a line's index is its index in `arrived`
        return out

    def _armed(self, done: set) -> list[int]:
        """The booting lines a pending cut is timed from, whose shutdown the console has not shown yet."""
        lines = self._lines()
        return [i for cut in self.power_cuts if cut not in done and cut.event == "booting"
                for i in [cut.line(lines, self.releases)] if i is not None and i not in self.shutdown_seen]

    def _run(self) -> None:
        done: set[PowerCut] = set()
        while not self.stop.wait(0.05 if self._armed(done) else 1):
            self._read()
            self._read_console(self._armed(done))
            for cut in self.power_cuts:
                if cut in done:
                    continue
                due = cut.due(self._lines(), self.releases, self.shutdown_seen)
                if due is None or time.time() < due:
                    continue
                answer = loop_disk.monitor_command(self.monitor, "system_reset")
                done.add(cut)
                self.faults.append({"fault": "power cut", "how": "QEMU monitor: system_reset", "at": time.time(),
                                    "variant": cut.variant, "seconds": cut.seconds, "event": cut.event,
                                    "monitor": answer.strip()[-200:]})
                i = cut.line(self._lines(), self.releases)
                when = "as the console showed the shutdown begun" if i in self.shutdown_seen and \
                    self.shutdown_seen[i] <= self._lines()[i][0] + cut.seconds else f"{cut.seconds:.0f} s"
                self.faults[-1]["timed_by"] = "console" if when.startswith("as") else "line"
                say(f"loop: power cut (system_reset) {when} after the {cut.event} line of {cut.variant}")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._read()


# A series' kernel that is the disk's stock kernel (its default entry): its release is the disk's
STOCK = "@stock"
# The faults the lab injects, FAULT:VARIANT (module docstring): where each happens
INITRAMFS_FAULTS = ("panic", "lockup", "no-watchdog", "emergency")    # guest-loop-initramfs.sh
BOOT_FAULTS = ("hang", "hold", "modules", "headers")                   # guest-loop-boot.sh


def fault(text: str) -> str:
    """A FAULT:VARIANT word, checked."""
    f, colon, variant = text.partition(":")
    if not colon or not variant or f not in INITRAMFS_FAULTS + BOOT_FAULTS:
        raise ValueError(f"fault {text!r}: want FAULT:VARIANT, FAULT one of "
                         f"{', '.join(INITRAMFS_FAULTS + BOOT_FAULTS)}")
    return text


def loop_scenario(name: str, kernels: list[tuple[str, object]], boots: int, check_args: list[str],
                  via: str = "kexec", inject: tuple[str, ...] = (), expect: str = "complete",
                  start_args: list[str] = (), pmem_fstab: bool = False) -> dict:
    """One loop of the guest's run: `nttrace ab start NAME` with these.
    `kernels`: [(label, kernel_build.Kernel or a release)], the base first;
    two labelled base and patched are --base and --patched, else --series."""
    named = [(label, k if isinstance(k, str) else k.release) for label, k in kernels]
    faults = [fault(w) for w in inject]
    out = {"name": name, "kind": "loop", "boots": boots, "via": via, "check_args": check_args, "expect": expect,
           "inject": [w for w in faults if w.partition(":")[0] in BOOT_FAULTS],
           "initramfs": [w.split(":") for w in faults if w.partition(":")[0] in INITRAMFS_FAULTS],
           "start_args": list(start_args), "pmem_fstab": pmem_fstab}
    if [label for label, _ in named] == ["base", "patched"]:
        out.update(base=named[0][1], patched=named[1][1])
    else:
        out["series"] = named
    return out


def fault_scenarios(base, patched, check_args: list[str]) -> list[dict]:
    """--faults: what start must refuse, then 1+1 loops by kexec, each meeting
    one fault a real machine has:
    - modules, headers: the patched kernel's module tree rewritten, its
      headers purged, at the base kernel's boot between the start and the
      patched boot: the loop stops before booting it (no mixed builds) and
      reboots into the default kernel;
    - nowatchdog: the base kernel boots without its watchdog's driver: the
      loop stops (the kernel would run unprotected) and reboots into the
      default kernel;
    - emergency: the base kernel's first boot never reaches multi-user.target
      with PID 1 alive ("hold": the boot deadline resets it), the patched
      kernel's first boot drops to emergency mode (the pmem namespace fstab
      mounts does not come up: the deadline's unit, wanted by emergency.target,
      resets it); both retried, the loop completes (probe.memremap, which
      does not touch the namespace, is what it measures).
    The loops without a run end on the default kernel by themselves."""
    kernels = [("base", base), ("patched", patched)]

    def refuse(name: str, b, p, **kw) -> dict:
        return {"name": name, "kind": "refuse", "base": b.release, "patched": p.release, "boots": 1,
                "via": "kexec", "check_args": check_args, **kw}
    return [refuse("same", patched, patched),
            # grub's default where the admin chose none: the first entry, the highest version
            refuse("default", base, patched, grub_default="0"),
            loop_scenario("modules", kernels, 1, check_args, inject=(f"modules:{patched.variant}",), expect="failed"),
            loop_scenario("nowatchdog", kernels, 1, check_args, inject=(f"no-watchdog:{base.variant}",),
                          expect="failed"),
            loop_scenario("emergency", kernels, 1, [*MEMREMAP, "--wait-quiet", "60"],
                          inject=(f"hold:{base.variant}", f"emergency:{patched.variant}"),
                          start_args=["--boot-deadline", str(FAULT_DEADLINE_S)], pmem_fstab=True),
            # last: the purged headers package is not put back (the guest has
            # no copy of it), and every loop after would refuse to start
            loop_scenario("headers", kernels, 1, check_args, inject=(f"headers:{patched.variant}",), expect="failed")]


# The emergency scenario's boot deadline: above the loop guest's slowest
# normal boot to the loop's step (about 70 s of a 2-core host beside a compiler)
# and above the pmem mount's device timeout with a boot's own time (60 + 70 s)
FAULT_DEADLINE_S = 300


def write_loop_config(tree: Path, kernels: list, scenarios: list[dict], seed: int) -> Path:
    """The frozen tree's ab-loop/: what the guest's driver reads. `kernels`:
    the lab kernels on the disk (kernel_build.Kernel)."""
    loop = tree / "ab-loop"
    loop.mkdir()
    by_variant = {k.variant: k for k in kernels}
    if len(by_variant) < 2:
        raise ValueError("the loop needs two different kernels (an A/A boots one kernel: lab.ab does that)")
    for k in by_variant.values():
        (loop / f"{k.variant}.release").write_text(k.release + "\n")
    (loop / "wheels").mkdir()
    for w in guest_wheels():
        shutil.copy(w, loop / "wheels" / w.name)
    pmem = any("--rebind" in sc["check_args"] or sc.get("pmem_fstab") for sc in scenarios)
    (loop / "config.json").write_text(json.dumps({
        "releases": {k.variant: k.release for k in by_variant.values()},
        "seed": seed, "setup": [FSDAX] if pmem else [], "scenarios": scenarios}, indent=1))
    return loop


def run_loop(out: Path, base, patched, boots: int = 1, check_args: list[str] = MEMMAP, via: str = "kexec",
             inject: tuple[str, ...] = (), power_cuts: tuple[PowerCut, ...] = (),
             cpu: lab.GuestCPU = lab.DEFAULT_CPU, timeout: float = 3600, seed: int = SEED,
             scenarios: list[dict] | None = None, others: tuple = ()) -> LoopRun:
    """The loop in one QEMU run of the loop's guest (or `scenarios`, in
    order: fault_scenarios(), a series' loop_scenario()). `base`, `patched`:
    kernel_build.Kernel (with their packages), the disk's loop kernels, and
    `others` more of them (a series' steps; runs that pass the same kernels
    share one cached disk).
    Raises lab.LabError when the guest does not power off within `timeout`
    (QEMU killed)."""
    out.mkdir(parents=True, exist_ok=True)
    tree = lab.frozen_tree(out)
    on_disk = [base, patched, *others]
    disk = loop_disk.disk(on_disk, log=say)
    scenarios = scenarios or [loop_scenario(NAME, [("base", base), ("patched", patched)], boots, check_args, via,
                                            inject)]
    for sc in scenarios:          # the stock kernel's release is the disk's
        sc["series"] = [[label, disk.stock_release if release == STOCK else release]
                        for label, release in sc.get("series", [])] or sc.pop("series", None)
        if sc["series"] is None:
            sc.pop("series")
    write_loop_config(tree, on_disk, scenarios, seed)
    results = out / "guest"
    results.mkdir(parents=True, exist_ok=True)
    for pattern in ("ab-boots.jsonl", "ab-end*.json", "ab-start*.log", "ab-error.txt", "ab-journal*.txt",
                    "refuse-*.json", "guest-run.log", "guest-run.rc", "console.log"):
        for stale in results.glob(pattern):
            stale.unlink()
    shutil.rmtree(results / "ab", ignore_errors=True)
    for w in (results / "wheel").glob("*.whl"):
        w.unlink()
    lab.build_wheel(results / "wheel")
    overlay = disk.overlay(out / "disk.qcow2")
    nvdimm = out / "nvdimm.img"
    with open(nvdimm, "wb") as f:
        f.truncate(2 << 30)  # sparse
    sockdir = Path(tempfile.mkdtemp(prefix="nttrace-loop-"))   # a socket's path must be short
    monitor = sockdir / "monitor"
    t0 = time.monotonic()
    proc = subprocess.Popen(loop_disk.qemu_command(overlay, results, tree, nvdimm, monitor, cpu),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    watcher = _Watcher(results / "ab-boots.jsonl", monitor, list(power_cuts),
                       {k.variant: k.release for k in on_disk}, results / "console.log")
    timed_out = False
    try:
        with watcher:
            while proc.poll() is None:
                if time.monotonic() - t0 > timeout:
                    timed_out = True
                    break
                time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        nvdimm.unlink(missing_ok=True)
        shutil.rmtree(sockdir, ignore_errors=True)
    qemu_out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    console = (results / "console.log").read_text(errors="replace") if (results / "console.log").exists() else ""
    run = lab.LabRun(results, console + qemu_out, time.monotonic() - t0)
    boots_seen = []
    for t, line in watcher.arrived:
        try:
            boots_seen.append({**json.loads(line), "host_time": t})
        except ValueError:
            boots_seen.append({"event": "unreadable", "line": line, "host_time": t})
    end_file = results / "ab-end.json"
    r = LoopRun(out, run, {"base": base, "patched": patched, **{k.variant: k for k in others}}, disk, boots_seen,
                json.loads(end_file.read_text()) if end_file.exists() else {}, watcher.faults, scenarios[-1]["name"])
    if timed_out:
        raise lab.LabError(f"the loop's guest did not power off within {timeout:.0f}s; QEMU killed\n{run.tail()}")
    return r


def checks_of(text: str) -> list[str]:
    out = []
    for name in text.split(","):
        if name.strip() not in CHECK_SETS:
            raise ValueError(f"unknown check set {name.strip()!r} (known: {', '.join(CHECK_SETS)})")
        out += CHECK_SETS[name.strip()]
    return out


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.ab_loop", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="base", help="the loop's base kernel (default base)")
    ap.add_argument("--patched", default="nt-v3", help="the loop's patched kernel (default nt-v3)")
    ap.add_argument("--series", metavar="K0,K1,...",
                    help="a series loop over these kernels, each a lab variant (kernel_build's, built when the "
                         "cache lacks it, installed on the disk beside --base and --patched) or stock (the disk's "
                         "default kernel)")
    ap.add_argument("--boots", type=int, default=4, help="boots a side (default 4)")
    ap.add_argument("--via", choices=("kexec", "reboot"), default="kexec",
                    help="how nttrace boots each kernel: kexec, or a reboot through the firmware and grub")
    ap.add_argument("--checks", default="memmap", help="check sets each boot runs: memmap, memremap (default memmap)")
    ap.add_argument("--inject", action="append", default=[], type=fault, metavar="FAULT:VARIANT",
                    help="a fault at that kernel's first boot (the module's docstring lists them); the loop must "
                         "come back through the reset it set up, record it and complete")
    ap.add_argument("--faults", action="store_true",
                    help="instead of one loop: the refusals and the 1+1 loops of fault_scenarios()")
    ap.add_argument("--power-cut", metavar="[booting:]VARIANT:SECONDS", type=PowerCut.parse, action="append",
                    default=[], help="QEMU's system_reset SECONDS after validate began at the first boot of that "
                                     "kernel (booting: after the step asked for that kernel's boot)")
    ap.add_argument("--icount", default=lab.MEASURE_CPU.icount or "off",
                    help="QEMU -icount for the guest clock, or off (default %(default)s, lab.ab's)")
    ap.add_argument("--vcpus", type=int, default=lab.MEASURE_CPU.vcpus, help="guest vCPUs (default %(default)s)")
    ap.add_argument("--seed", type=int, default=SEED, help="the schedule's seed (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=None, help="bound on the whole QEMU run, seconds "
                    "(default: 900 s a boot)")
    ap.add_argument("--out", required=True, help="directory for the guest's results and run.json")
    args = ap.parse_args(argv)
    try:
        if args.boots < 1 or args.vcpus < 1:
            raise ValueError("--boots and --vcpus must be at least 1")
        check_args = checks_of(args.checks)
        specs = [kernel_build.variant(args.base), kernel_build.variant(args.patched)]
        series = args.series.split(",") if args.series else None
        if series and len(set(series)) != len(series):
            raise ValueError(f"--series {args.series}: a kernel named twice")
        extra = [v for v in series or () if v not in ("stock", args.base, args.patched)]
        specs += [kernel_build.variant(v) for v in extra]
    except ValueError as exc:
        print(f"lab.ab_loop: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    commit = checkout_commit()
    try:
        base, patched, *others = (kernel_build.build(v) for v in specs)
    except kernel_build.KernelBuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    cpu = lab.GuestCPU(args.vcpus, None if args.icount == "off" else args.icount)
    timeout = args.timeout or 900 * (len(series or (1, 2)) * args.boots + 3)
    say(f"loop: {base.release} against {patched.release}, {args.boots} boots a side via {args.via}, checks "
        f"{args.checks}; {cpu.describe()}; bound {timeout:.0f} s")
    t0 = time.time()
    try:
        if args.faults:
            scenarios = fault_scenarios(base, patched, [*check_args, "--runs", "1"])
        elif series:
            by = {"stock": STOCK, **{k.variant: k for k in (base, patched, *others)}}
            scenarios = [loop_scenario("series", [(v, by[v]) for v in series], args.boots, check_args, args.via,
                                       tuple(args.inject))]
        else:
            scenarios = None
        r = run_loop(out, base, patched, args.boots, check_args, args.via, tuple(args.inject),
                     tuple(args.power_cut), cpu, timeout, args.seed, scenarios, tuple(others))
        error = None
    except lab.LabError as exc:
        r, error = None, str(exc)
    wall = time.time() - t0
    boots = r.kernel_boots() if r else []
    marks = [b["host_time"] for b in boots] + [t0 + wall]
    run_json = {
        "base": base.variant, "patched": patched.variant, "boots_a_side": args.boots, "via": args.via,
        "series": series, "checks": check_args, "inject": args.inject, "faults": args.faults,
        "power_cuts": [vars(c) for c in args.power_cut],
        "seed": args.seed, "cpu": cpu.describe(),
        "kernels": [{"variant": k.variant, "release": k.release, "key": k.directory.name,
                     "build": build_string(k.bzimage), "debs": [d.name for d in k.debs]} for k in (base, patched, *others)],
        "disk": ({"directory": str(r.disk.directory), **{k: r.disk.info[k] for k in
                  ("stock_release", "releases", "host_build_s", "install_boot_s")}} if r else None),
        "wall_s": round(wall, 1),
        # each boot's host seconds: from its line (early in the boot) to the
        # next boot's, the last to QEMU's exit; the first line comes after
        # the firmware, grub, the kernel and systemd's early boot: before_first_boot_s
        "before_first_boot_s": round(boots[0]["host_time"] - t0, 1) if boots else None,
        "boots": [{"kernel": b.get("kernel"), "release": b.get("release"), "booted_by": b.get("booted_by"),
                   "host_s": round(marks[i + 1] - b["host_time"], 1)} for i, b in enumerate(boots)],
        "faults": r.faults if r else None,
        "end": r.end if r else None, "error": error,
        "finished": time.strftime("%F %T"), "machine": conditions.cpu_policy()["cpu"],
        # the guest ran the tree frozen at the start and the wheel built then:
        # the checkout's commit at the start is the run's, whatever it did after
        "commit": commit, "command": "python3 -m lab.ab_loop " + " ".join(argv)}
    (out / "run.json").write_text(json.dumps(run_json, indent=1))
    if error:
        print(f"lab.ab_loop: {error}", file=sys.stderr)
        return 1
    rc_file = r.run.results / "guest-run.rc"
    ok = (rc_file.exists() and rc_file.read_text().strip() == "0") if args.faults else \
        r.end.get("why", "").startswith("complete")
    say(f"loop {'completed' if ok else 'did not complete: ' + r.end.get('why', '?')} in {wall / 60:.1f} min, "
        f"{len(run_json['boots'])} boots; report in {r.state / 'report'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
