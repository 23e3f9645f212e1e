"""`nttrace ab` in the lab: ONE QEMU run of the lab guest, which boots the
base kernel, runs `nttrace ab start` with the lab's base and patched kernels
and kexecs between them until the loop is over; the host waits and reads
the loop's report.

    python3 -m lab.ab_loop --boots 4 --out ab-loop-base-nt-v3       # 4 boots a side
    python3 -m lab.ab_loop --boots 2 --inject-panic --out ab-fault  # the patched kernel's first boot panics

The guest (guest-systemd.sh -> guest-ab.sh, guest-ab-boot.sh, guest_ab.py)
boots with systemd as PID 1, nttrace installed from a wheel built at the
start and its scripts read from a frozen copy of the tree (lab.frozen_tree):
the loop runs what the tree was when it started, however long it takes.
Each loop kernel is a read-only share (kernel-<variant>, at
/lab-kernels/<variant> in the guest: bzImage, modules/<release>/); the
guest tells them apart by their build strings, which the host reads from
the bzImages' headers (build_string). QEMU runs with reboot=True: a panic,
and the loop's last reboot, bring the guest back on its default kernel
(base, QEMU's -kernel), as firmware would.

Out: OUT/guest/ (the guest's console, its log, ab-boots.jsonl: one line a
boot; ab/<name>/: the loop's state directory, report included; ab-end.json:
what the loop left installed), and OUT/run.json: the kernels, the command,
the wall time, each boot's host time (when its line arrived), the commit.
Exit: 0 the loop completed, 1 it did not (its status and the guest's log
said), 2 a bad argument.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import kernel_build, lab
from lab.ab import checkout_commit, say
from nttrace.ab import kernels
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


@dataclass
class LoopRun:
    """One loop's QEMU run, as the host found it afterwards."""
    out: Path
    run: lab.LabRun
    kernels: dict            # side (base, patched) -> kernel_build.Kernel
    boots: list[dict] = field(default_factory=list)   # ab-boots.jsonl, each with the host's arrival time
    end: dict = field(default_factory=dict)           # ab-end.json

    @property
    def state(self) -> Path:
        return self.run.results / "ab" / NAME

    def json(self, rel: str) -> dict:
        p = self.state / rel
        if not p.exists():
            raise lab.LabError(f"the loop left no {rel}\n{self.run.tail()}")
        return json.loads(p.read_text())


def _watch(path: Path, arrived: list[tuple[float, str]], stop: threading.Event) -> None:
    """Each new line of the guest's ab-boots.jsonl with the host's time it
    was seen (within a second): the guest's own clock counts instructions."""
    seen = 0
    while not stop.wait(1):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines[seen:]:
            arrived.append((time.time(), line))
        seen = len(lines)


def run_loop(out: Path, base, patched, boots: int, check_args: list[str], inject_panic: bool = False,
             cpu: lab.GuestCPU = lab.DEFAULT_CPU, timeout: float = 3600, seed: int = SEED,
             no_udev: bool = False) -> LoopRun:
    """The loop in one QEMU run. `base`, `patched`: kernel_build.Kernel.
    Raises lab.LabError when the guest does not power off within `timeout`
    or stops before the loop is over."""
    out.mkdir(parents=True, exist_ok=True)
    tree = lab.frozen_tree(out)
    loop = tree / "ab-loop"
    loop.mkdir()
    by_variant = {k.variant: k for k in (base, patched)}
    if len(by_variant) != 2:
        raise ValueError("the loop needs two different kernels (an A/A boots one kernel: lab.ab does that)")
    for k in by_variant.values():
        (loop / f"{k.variant}.build").write_text(build_string(k.bzimage) + "\n")
    (loop / "patched").write_text(patched.variant + "\n")
    (loop / "name").write_text(NAME + "\n")
    (loop / "wheels").mkdir()
    for w in guest_wheels():
        shutil.copy(w, loop / "wheels" / w.name)
    (loop / "config.json").write_text(json.dumps({
        "name": NAME, "kernels": {side: f"/lab-kernels/{k.variant}/bzImage" for side, k in
                                  (("base", base), ("patched", patched))}, "boots": boots, "seed": seed,
        "check_args": check_args, "setup": [FSDAX] if "--rebind" in check_args else [],
        "inject_panic": inject_panic, "no_udev": no_udev}, indent=1))
    results = out / "guest"
    for stale in ("ab-boots.jsonl", "ab-end.json", "ab-start.log", "ab-error.txt", "ab-journal.txt"):
        (results / stale).unlink(missing_ok=True)
    shutil.rmtree(results / "ab", ignore_errors=True)
    arrived: list[tuple[float, str]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(results / "ab-boots.jsonl", arrived, stop), daemon=True)
    watcher.start()
    try:
        run = lab.run(results, timeout=timeout, kernel=base, systemd=True, cpu=cpu, reboot=True, tree=tree,
                      shares={f"kernel-{v}": k.directory for v, k in by_variant.items()},
                      append="nttrace.ab nttrace.boot=firmware")
    finally:
        stop.set()
        watcher.join()
    _watch_once(results / "ab-boots.jsonl", arrived)
    boots_seen = [{**json.loads(line), "host_time": t} for t, line in arrived]
    end_file = results / "ab-end.json"
    return LoopRun(out, run, {"base": base, "patched": patched}, boots_seen,
                   json.loads(end_file.read_text()) if end_file.exists() else {})


def _watch_once(path: Path, arrived: list[tuple[float, str]]) -> None:
    """Lines the watcher had not seen when QEMU exited (the last), stamped now."""
    if path.exists():
        lines = path.read_text().splitlines()
        arrived += [(time.time(), line) for line in lines[len(arrived):]]


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
    ap.add_argument("--base", default="base", help="the default kernel, and the loop's base (default base)")
    ap.add_argument("--patched", default="nt-v3", help="the loop's patched kernel (default nt-v3)")
    ap.add_argument("--boots", type=int, default=4, help="boots a side (default 4)")
    ap.add_argument("--checks", default="memmap", help="check sets each boot runs: memmap, memremap (default memmap)")
    ap.add_argument("--inject-panic", action="store_true",
                    help="the patched kernel's first boot panics (the loop must record it, retry, and complete)")
    ap.add_argument("--no-udev", action="store_true",
                    help="stop udevd early in each kexec'd boot (a diagnosis: what it adds to the timings)")
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
    except ValueError as exc:
        print(f"lab.ab_loop: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    commit = checkout_commit()
    try:
        base, patched = (kernel_build.build(v) for v in specs)
    except kernel_build.KernelBuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    cpu = lab.GuestCPU(args.vcpus, None if args.icount == "off" else args.icount)
    timeout = args.timeout or 900 * (2 * args.boots + 3)
    say(f"loop: {base.variant} against {patched.variant}, {args.boots} boots a side, checks {args.checks}; "
        f"{cpu.describe()}; bound {timeout:.0f} s")
    t0 = time.time()
    try:
        r = run_loop(out, base, patched, args.boots, check_args, args.inject_panic, cpu, timeout, args.seed,
                     args.no_udev)
        error = None
    except lab.LabError as exc:
        r, error = None, str(exc)
    wall = time.time() - t0
    boots = [b for b in (r.boots if r else []) if b["event"] == "boot"]
    marks = [b["host_time"] for b in boots] + [t0 + wall]
    run_json = {
        "base": base.variant, "patched": patched.variant, "boots_a_side": args.boots, "checks": check_args,
        "inject_panic": args.inject_panic, "no_udev": args.no_udev, "seed": args.seed, "cpu": cpu.describe(),
        "kernels": [{"variant": k.variant, "release": k.release, "key": k.directory.name,
                     "build": build_string(k.bzimage)} for k in (base, patched)],
        "wall_s": round(wall, 1),
        # each boot's host seconds: from its line (early in the boot) to the
        # next boot's, the last to QEMU's exit; the first line comes after
        # the firmware boot's start, kernel and systemd: before_first_boot_s
        "before_first_boot_s": round(boots[0]["host_time"] - t0, 1) if boots else None,
        "boots": [{"kernel": b.get("kernel"), "booted_by": b.get("booted_by"),
                   "host_s": round(marks[i + 1] - b["host_time"], 1)} for i, b in enumerate(boots)],
        "end": r.end if r else None, "error": error,
        "finished": time.strftime("%F %T"), "machine": conditions.cpu_policy()["cpu"],
        # the guest ran the tree frozen at the start and the wheel built then:
        # the checkout's commit at the start is the run's, whatever it did after
        "commit": commit, "command": "python3 -m lab.ab_loop " + " ".join(argv)}
    (out / "run.json").write_text(json.dumps(run_json, indent=1))
    if error:
        print(f"lab.ab_loop: {error}", file=sys.stderr)
        return 1
    ok = r.end.get("why", "").startswith("complete")
    say(f"loop {'completed' if ok else 'did not complete: ' + r.end.get('why', '?')} in {wall / 60:.1f} min, "
        f"{len(run_json['boots'])} boots; report in {r.state / 'report'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
