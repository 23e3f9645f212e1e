# SPDX-License-Identifier: Apache-2.0
"""The lab harness: build (and cache) the guest image, boot it under QEMU
(TCG) with an emulated NVDIMM as a CPU-less NUMA node, hand it nttrace as a
wheel built from the working tree, and bring its results back. Every wait is
bounded; QEMU is always killed on the way out.

Cache: $NTTRACE_LAB_CACHE (default /var/cache/nttrace-lab), one directory
per hash of the image inputs (build-base-root.sh, build-image.sh,
guest-init.sh); the base root they start from (base_root(), the lab's one
debootstrap) in base-root-<hash of build-base-root.sh>/.

Kernels: the image's stock Debian kernel by default; a lab-built one
(kernel_build.py: base, nt-v3, nt-v2) passed as run(kernel=...); or one of
your own (README.md beside this file): NTTRACE_LAB_KERNEL=bzImage, optionally
NTTRACE_LAB_INITRD, and NTTRACE_LAB_MODULES=a directory holding <release>/
(modules_install output, with build/ holding its headers).

QEMU runs TCG single-threaded (one host thread for both vCPUs): under
multi-threaded TCG one boot in three of a lab kernel oopsed with an int3 in
__schedule while BPF programs attached (kernel text patching), and the
scenarios are single-threaded work that gains little from a second thread.
The guest runs with oops=panic and panic=-1, so an Oops ends the boot at
once and the harness reports it as a guest panic, with the scenario it hit.

A guest that reboots (run(reboot=True), the A/B loop of ab_loop.py): QEMU
runs without -no-reboot, so a guest reset (a panic, or the loop's last
reboot) re-runs -kernel, the default kernel, as firmware brings up the
default kernel on real hardware; the root disk's snapshot overlay lives as
long as the QEMU process, so what the guest wrote survives kexec and reset.
Such a guest reads nttrace from a frozen copy of the tree (frozen_tree()),
not the live checkout, for the whole run.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from lab.locks import locked
from nttrace.bench.daemon_process import free_port
from nttrace.daemon.process import die_with_parent
from nttrace.kernel import conditions

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
BASE_INPUTS = ("build-base-root.sh",)
IMAGE_INPUTS = (*BASE_INPUTS, "build-image.sh", "guest-init.sh")
TCG = os.environ.get("NTTRACE_LAB_TCG", "tcg,thread=single")


@dataclass(frozen=True)
class GuestCPU:
    """How QEMU runs the guest's CPUs: how many vCPUs (round-robin on one
    host thread under thread=single TCG) and, with `icount`, a guest clock
    that counts executed instructions (QEMU's -icount shift=N: 2^N ns an
    instruction) instead of following the host's."""
    vcpus: int = 2
    icount: str | None = None

    def qemu_args(self) -> list[str]:
        return ["-accel", TCG, "-cpu", "max", "-smp", str(self.vcpus),
                *(["-icount", self.icount] if self.icount else [])]

    def describe(self) -> str:
        return (f"QEMU {TCG.replace(',', ' ')}, {self.vcpus} vCPU{'s' if self.vcpus != 1 else ''}"
                + (f", icount {self.icount} (guest time counts instructions)" if self.icount else ", host clock"))


# Every boot but the A/B's: two vCPUs (the daemon and trace scenarios run
# work beside the tracer), the host's clock.
DEFAULT_CPU = GuestCPU()
# The A/B's boots (lab.ab): chosen by measurement (a3f1339's BENCHMARKS.md, "The lab's noise").
MEASURE_CPU = GuestCPU(vcpus=1, icount="shift=0,sleep=on")
# Lines a kernel prints when it oopses or panics.
PANIC_MARKERS = ("Kernel panic", "Oops:", "BUG: ", "general protection fault", "kernel BUG at")
# Lines after which the guest is powering off (guest-init.sh's own, the kernel's).
POWER_OFF_MARKERS = ("nttrace-lab: powering off", "reboot: Power down")
CACHE = Path(os.environ.get("NTTRACE_LAB_CACHE", "/var/cache/nttrace-lab"))


class LabError(AssertionError):
    """The guest failed; the message carries the guest's log."""


def inputs_key(names: tuple[str, ...]) -> str:
    """A hash of the lab's files NAMES (a cache directory's key: a changed input, a new directory)."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()[:16]


def image_key() -> str:
    return inputs_key(IMAGE_INPUTS)


BASE_BUILD_TIMEOUT_S = 1200


def base_root() -> Path:
    """The lab's one debootstrap, build-base-root.sh's root.tar (a minimal
    Debian 12 root the image, the A/B loop's server root and the package's
    build chroot start from), built first when missing (one builder at a
    time). Kept as the images are: a tree with another build-base-root.sh
    may be reading its own at the same time."""
    d = CACHE / f"base-root-{inputs_key(BASE_INPUTS)}"
    tar = d / "root.tar"
    if (d / "complete").exists():
        return tar
    with locked(CACHE / "base-root.lock"):
        if (d / "complete").exists():
            return tar
        shutil.rmtree(d, ignore_errors=True)
        d.parent.mkdir(parents=True, exist_ok=True)
        log = d.parent / f"{d.name}.build.log"
        with open(log, "w") as f:
            try:
                p = subprocess.run(["bash", str(HERE / "build-base-root.sh"), str(d)], stdout=f,
                                   stderr=subprocess.STDOUT, timeout=BASE_BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise LabError(f"base root build exceeded {BASE_BUILD_TIMEOUT_S}s: {log.read_text()[-3000:]}") \
                    from None
        if p.returncode != 0:
            raise LabError(f"base root build failed ({p.returncode}): {log.read_text()[-3000:]}")
        (d / "complete").write_text(time.strftime("%F %T\n"))
    return tar


def image(build_timeout: float = 1800) -> Path:
    """The cached image directory, built first when missing (one builder at a time)."""
    d = CACHE / image_key()
    if (d / "complete").exists():
        return d
    with locked(CACHE / "image.lock"):   # two guests booting at once share the image
        if (d / "complete").exists():   # built while we waited
            return d
        return _build_image(d, build_timeout)


def _build_image(d: Path, build_timeout: float) -> Path:
    base = base_root()
    shutil.rmtree(d, ignore_errors=True)
    d.parent.mkdir(parents=True, exist_ok=True)
    log = d.parent / f"{d.name}.build.log"
    with open(log, "w") as f:
        try:
            p = subprocess.run(["bash", str(HERE / "build-image.sh"), str(d), str(base)], stdout=f,
                               stderr=subprocess.STDOUT, timeout=build_timeout)
        except subprocess.TimeoutExpired:
            raise LabError(f"image build exceeded {build_timeout}s: {log.read_text()[-3000:]}") from None
    if p.returncode != 0:
        raise LabError(f"image build failed ({p.returncode}): {log.read_text()[-3000:]}")
    (d / "complete").write_text(time.strftime("%F %T\n"))
    return d


def build_wheel(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    # /usr/bin/python3 is Debian 12's 3.11, the guest's Python too. setuptools
    # builds in the tree (build/, *.egg-info): one build at a time.
    with locked(CACHE / "wheel.lock"):
        return _build_wheel(dest)


def _build_wheel(dest: Path) -> Path:
    p = subprocess.run(["/usr/bin/python3", "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                        "-w", str(dest), str(TREE)], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise LabError(f"building the nttrace wheel failed: {p.stderr[-2000:]}")
    return next(dest.glob("nttrace-*.whl"))


@dataclass
class LabRun:
    results: Path
    console: str
    elapsed_s: float
    scrape: dict = field(default_factory=dict)
    host_conditions: dict = field(default_factory=dict)   # the host's, over the boot (nttrace.kernel.conditions)

    def json(self, name: str) -> dict:
        path = self.results / f"{name}.json"
        if not path.exists():
            raise LabError(f"the guest wrote no {name}.json\n{self.tail()}")
        data = json.loads(path.read_text())
        if "error" in data:
            raise LabError(f"guest scenario {name} failed: {data['error']}\n{data.get('traceback', '')}\n{self.tail()}")
        return data

    def panic(self) -> str:
        """The console lines of a kernel panic or Oops, from the first marker
        on (empty when there was none). What follows the guest's power-off
        does not count: as the disk goes away under it, PID 1 can fault and
        the kernel then reports "Attempted to kill init" (seen once in about
        ten lab boots, after every scenario had finished)."""
        lines = self.console.splitlines()
        for i, line in enumerate(lines):
            if any(m in line for m in POWER_OFF_MARKERS):
                lines = lines[:i]
                break
        for i, line in enumerate(lines):
            if any(m in line for m in PANIC_MARKERS):
                return "\n".join(lines[i:i + 40])
        return ""

    def where(self) -> str:
        """' in scenario X' for the last scenario the guest started."""
        started = [line.split("scenario ", 1)[1].split()[0] for line in self.console.splitlines()
                   if "nttrace-lab: scenario " in line]
        return f" in scenario {started[-1]}" if started else ""

    def tail(self, n: int = 60) -> str:
        run_log = self.results / "guest-run.log"
        parts = ["--- console (tail) ---", *self.console.splitlines()[-n:]]
        if run_log.exists():
            parts += ["--- guest-run.log (tail) ---", *run_log.read_text().splitlines()[-n:]]
        return "\n".join(parts)


def kernel_args(img: Path, kernel=None) -> tuple[list[str], list[str]]:
    """-kernel/-initrd and extra -virtfs for the stock, a lab-built
    (kernel_build.Kernel) or a user's kernel."""
    if kernel is not None:
        return (["-kernel", str(kernel.bzimage)],
                ["-virtfs", f"local,path={kernel.modules},mount_tag=kmods,security_model=none,readonly=on"])
    kernel = os.environ.get("NTTRACE_LAB_KERNEL")
    if not kernel:
        return ["-kernel", str(img / "vmlinuz"), "-initrd", str(img / "initrd.img")], []
    args = ["-kernel", kernel]
    if os.environ.get("NTTRACE_LAB_INITRD"):
        args += ["-initrd", os.environ["NTTRACE_LAB_INITRD"]]
    extra = []
    if os.environ.get("NTTRACE_LAB_MODULES"):
        extra = ["-virtfs", f"local,path={os.environ['NTTRACE_LAB_MODULES']},mount_tag=kmods,security_model=none,readonly=on"]
    return args, extra


def machine_args(cpu: GuestCPU, nvdimm: Path) -> list[str]:
    """The guest machine every lab guest runs on: cpu's processor, 2 GiB of
    RAM on NUMA node 0 and a 2 GiB NVDIMM backed by the file nvdimm on
    node 1 (the memory tier the fsdax and tiering paths use)."""
    return [
        *cpu.qemu_args(),
        "-machine", "pc,nvdimm=on", "-m", "2G,slots=2,maxmem=8G",
        "-object", "memory-backend-ram,id=ram0,size=2G",
        "-numa", f"node,nodeid=0,cpus=0-{cpu.vcpus - 1},memdev=ram0", "-numa", "node,nodeid=1",
        "-object", f"memory-backend-file,id=nv0,share=on,mem-path={nvdimm},size=2G",
        "-device", "nvdimm,id=nvdimm0,memdev=nv0,node=1",
    ]


def qemu_command(img: Path, results: Path, nvdimm: Path, host_port: int, append: str, kernel=None,
                 init: str = "/sbin/nttrace-lab-init", cpu: GuestCPU = DEFAULT_CPU, reboot: bool = False,
                 tree: Path = TREE, shares: dict[str, Path] | None = None, plugin: str | None = None) -> list[str]:
    """`reboot`: a guest reset re-runs -kernel (no -no-reboot); `tree`: the
    directory the guest mounts as /nttrace; `shares`: more read-only 9p
    shares, mount tag -> host directory; `plugin`: a TCG plugin, as -plugin
    takes it (lab/traffic/)."""
    kargs, extra = kernel_args(img, kernel)
    for tag, path in (shares or {}).items():
        extra += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=none,readonly=on"]
    return [
        "qemu-system-x86_64", *machine_args(cpu, nvdimm),
        *kargs,
        "-append", f"root=/dev/vda rw console=ttyS0 init={init} panic=-1 oops=panic {append}".strip(),
        "-drive", f"file={img / 'root.img'},if=virtio,format=raw,snapshot=on",
        "-virtfs", f"local,path={tree},mount_tag=nttrace,security_model=none,readonly=on",
        "-virtfs", f"local,path={results},mount_tag=results,security_model=none",
        "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{host_port}-:9435", "-device", "virtio-net-pci,netdev=n0",
        *extra,
        "-display", "none", "-serial", f"file:{results / 'console.log'}", "-monitor", "none",
        *([] if reboot else ["-no-reboot"]),
        *(["-plugin", plugin] if plugin else []),
    ]


# What a frozen tree holds: what the guest reads from /nttrace (its scripts
# and scenarios; the suite's kernel-facts tests). nttrace itself goes in as
# the wheel run() builds at the start.
FROZEN = ("lab", "tests")


def frozen_tree(dest: Path) -> Path:
    """A copy of the guest's part of the tree (FROZEN) in dest/tree, made
    now: a guest that boots many times in one run (the A/B loop) reads this
    at every boot, so an edit of the checkout meanwhile does not reach it."""
    tree = dest / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    for name in FROZEN:
        shutil.copytree(TREE / name, tree / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tree


def scrape(port: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return {"status": r.status, "body": r.read().decode()}
        except OSError as exc:
            last = exc
            time.sleep(1)
    return {"status": None, "error": str(last)}


def run(results: Path, timeout: float = 1800, append: str = "", kernel=None,
        scenarios: list[str] | None = None, systemd: bool = False, cpu: GuestCPU = DEFAULT_CPU,
        reboot: bool = False, tree: Path = TREE, shares: dict[str, Path] | None = None,
        plugin: str | None = None) -> LabRun:
    """Boot the guest once; returns when it powers off. `kernel`: a
    kernel_build.Kernel (default: the image's stock kernel); `scenarios`: the
    guest_scenarios to run, in order (default: all); `systemd`: boot with
    systemd as PID 1 and run the systemd scenario instead (guest_systemd.py);
    `reboot`, `tree`, `shares`, `plugin`: see qemu_command. Raises LabError on a
    timeout (QEMU killed), a guest panic or Oops (unless `reboot`: a guest
    that reboots may panic on purpose, and its caller reads LabRun.panic()),
    or a run that stopped early, with the guest's log."""
    img = image()
    results.mkdir(parents=True, exist_ok=True)
    for stale in [*results.glob("*.json"), *results.glob("guest-run.*"), *results.glob("wheel/*.whl"),
                  results / "daemon-ready", results / "host-scraped", results / "console.log"]:
        stale.unlink(missing_ok=True)   # a reused directory: nothing from an earlier boot is read as this one's
    build_wheel(results / "wheel")
    nvdimm = results / "nvdimm.img"
    with open(nvdimm, "wb") as f:
        f.truncate(2 << 30)  # sparse
    port = free_port()
    if scenarios:
        append = f"{append} nttrace.scenarios={','.join(scenarios)}".strip()
    init = "/sbin/nttrace-lab-init"
    if systemd:
        append, init = f"{append} nttrace.systemd".strip(), "/lib/systemd/systemd"
    t0 = time.monotonic()
    # what else the host ran while the guest did: only the guest's QEMU is
    # the measurement (this harness, and any test beside it, count as others)
    window = conditions.Monitor(own=set(), extra={"accelerator": cpu.describe()})
    window.__enter__()
    proc = subprocess.Popen(qemu_command(img, results, nvdimm, port, append, kernel, init, cpu, reboot, tree, shares,
                                         plugin),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)   # a killed test run leaves no guest running
    window.own.add(proc.pid)
    scraped: dict = {}
    try:
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout:
                lab = LabRun(results, _console(results), time.monotonic() - t0)
                raise LabError(f"the guest did not finish within {timeout:.0f}s{lab.where()}; QEMU killed\n"
                               + lab.tail())
            if not scraped and (results / "daemon-ready").exists():
                scraped = scrape(port)
                (results / "host-scraped").write_text(json.dumps({k: v for k, v in scraped.items() if k != "body"}))
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        window.__exit__(None, None, None)
        nvdimm.unlink(missing_ok=True)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    elapsed = time.monotonic() - t0
    host = window.as_json()
    (results / "host_conditions.json").write_text(json.dumps(host, indent=1))
    lab = LabRun(results, _console(results) + out, elapsed, scraped, host)
    panic = lab.panic()
    if panic and not reboot:
        raise LabError(f"the guest kernel panicked{lab.where()} (QEMU exit {proc.returncode}):\n{panic}\n{lab.tail()}")
    rc_file = results / "guest-run.rc"
    if not rc_file.exists():
        raise LabError(f"the guest stopped before its run finished{lab.where()} (QEMU exit {proc.returncode})\n"
                       f"{lab.tail()}")
    return lab


def _console(results: Path) -> str:
    p = results / "console.log"
    return p.read_text(errors="replace") if p.exists() else ""


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="lab.py", description="Boot the lab guest once and run its scenarios.")
    ap.add_argument("results", nargs="?", default="lab-results", help="directory for the guest's results")
    ap.add_argument("--kernel", metavar="VARIANT", help="a lab kernel (kernel_build.py: base, nt-v3, nt-v2, or "
                    "NAME=FILE:VERSION[+FILE:VERSION...] for your own series); default: the image's stock kernel, "
                    "or NTTRACE_LAB_KERNEL")
    ap.add_argument("--scenarios", metavar="A,B", help="guest scenarios to run, in order (default: all)")
    ap.add_argument("--systemd", action="store_true", help="boot with systemd as PID 1: the systemd scenario")
    ap.add_argument("--timeout", type=float, default=1800, help="bound on the whole boot, seconds")
    ap.add_argument("--append", default="", help="more kernel command line (e.g. nttrace.overhead=11,2,256)")
    args = ap.parse_args(argv)
    kernel = None
    if args.kernel:
        from lab import kernel_build
        try:
            variant = kernel_build.variant(args.kernel)
        except ValueError as exc:
            print(f"lab.py: --kernel: {exc}", file=sys.stderr)
            return 2
        try:
            kernel = kernel_build.build(variant)
        except kernel_build.KernelBuildError as exc:
            print(exc, file=sys.stderr)
            return 1
    r = run(Path(args.results), timeout=args.timeout, append=args.append, kernel=kernel,
            scenarios=args.scenarios.split(",") if args.scenarios else None, systemd=args.systemd)
    print(f"guest finished in {r.elapsed_s:.0f}s; results in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
