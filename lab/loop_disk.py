# SPDX-License-Identifier: Apache-2.0
"""The A/B loop's guest: a disk that boots like a server, and QEMU to boot it.

The disk (built once, cached in $NTTRACE_LAB_CACHE/loop-disk-<key>/): an
MBR label, one ext4 partition holding a Debian 12 root (systemd as init,
Debian's stock kernel as grub's default entry, grub-pc reading its own
grub.cfg and grubenv, kexec-tools, nttrace's runtime dependencies) and the
loop's kernels installed as the packages `make bindeb-pkg` made
(kernel_build: linux-image-R and linux-headers-R, one release a variant,
so each has its own /boot/vmlinuz-R, initrd, /lib/modules/R and headers).
Each loop kernel's initramfs holds the lab's script for the faults before
systemd (guest-loop-initramfs.sh), and the disk the kernel's own lockup
test module built for it (lockup_modules()), outside its module tree.
Three steps: build-loop-root.sh (apt on the lab's base root, lab.base_root(): the server's root as
a tar archive, cached on its own in loop-root-<key>/, so a rebuilt kernel
does not fetch Debian again), build-loop-disk.sh on the host (dpkg -i of
the kernels' packages, the filesystem written into the image at its
partition's offset), then an install boot, the lab's own guest with the new
disk as its second drive, which runs grub-install and update-grub on it
(guest-loop-install.sh) and powers off. The disk's key covers the three
scripts and the packages' contents.

The guest (qemu_command): boots from the disk through the firmware and
grub, no -kernel and no command line from the lab, with QEMU's i6300ESB
watchdog (`-action watchdog=reset`: when it fires, the machine resets, as
a board's watchdog does) and the lab's memory layout (lab.qemu_command's:
2 GiB on node 0, an emulated NVDIMM as the CPU-less node 1). Each run boots
a qcow2 overlay of the cached disk, so what it writes stays its own. A
reset, whoever asks for it, brings up grub and its default entry, Debian's
stock kernel, as on a server. The lab's only hand in it is a fault it
injects and names (a monitor's `system_reset`: a power cut).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

from lab import lab
from lab.locks import locked

HERE = Path(__file__).resolve().parent
ROOT_INPUTS = (*lab.BASE_INPUTS, "build-loop-root.sh")
DISK_INPUTS = (*ROOT_INPUTS, "build-loop-disk.sh", "guest-loop-install.sh", "guest-loop-initramfs.sh")
LOCKUP_SOURCE = "lib/test_lockup.c"     # the kernel's own lockup test module (CONFIG_TEST_LOCKUP)
BUILD_TIMEOUT_S = 2400
INSTALL_BOOT_TIMEOUT_S = 900


class LoopDisk:
    """A cached, installed loop disk."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.info = json.loads((directory / "disk.json").read_text())

    @property
    def raw(self) -> Path:
        return self.directory / "disk.raw"

    @property
    def stock_release(self) -> str:
        return self.info["stock_release"]

    @property
    def releases(self) -> dict[str, str]:
        """variant -> its installed release"""
        return self.info["releases"]

    def overlay(self, dest: Path) -> Path:
        """A qcow2 overlay of the disk for one run: what the run writes stays in it."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(self.raw), "-F", "raw", str(dest)],
                       check=True, timeout=60)
        return dest


def root_key() -> str:
    h = hashlib.sha256()
    for name in ROOT_INPUTS:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()[:16]


def server_root(log=print) -> Path:
    """The server root's directory (root.tar, stock-release), built first
    when the cache lacks it (under the disk's lock)."""
    d = lab.CACHE / f"loop-root-{root_key()}"
    if (d / "complete").exists():
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.parent.mkdir(parents=True, exist_ok=True)
    build_log = d.parent / f"{d.name}.build.log"
    t0 = time.monotonic()
    with open(build_log, "w") as f:
        try:
            p = subprocess.run(["bash", str(HERE / "build-loop-root.sh"), str(d), str(lab.base_root())], stdout=f,
                               stderr=subprocess.STDOUT,
                               timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise lab.LabError(f"loop root build exceeded {BUILD_TIMEOUT_S}s: {build_log.read_text()[-3000:]}") from None
    if p.returncode != 0:
        raise lab.LabError(f"loop root build failed ({p.returncode}): {build_log.read_text()[-3000:]}")
    (d / "complete").write_text(f"{time.monotonic() - t0:.1f}\n")
    log(f"loop disk: server root built in {time.monotonic() - t0:.0f} s")
    # older roots are superseded
    for old in lab.CACHE.glob("loop-root-*"):
        if old.is_dir() and old != d:
            shutil.rmtree(old, ignore_errors=True)
    return d


def disk_key(kernels: list) -> str:
    """The scripts and every package's content: a rebuilt kernel is a new disk."""
    h = hashlib.sha256()
    for name in DISK_INPUTS:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    for k in sorted(kernels, key=lambda k: k.variant):
        h.update(f"kernel {k.variant} {k.release}\n".encode())
        for deb in k.debs:
            h.update(deb.name.encode() + b"\0" + hashlib.sha256(deb.read_bytes()).digest())
    return h.hexdigest()[:16]


def disk(kernels: list, log=print) -> LoopDisk:
    """The installed disk with these kernel_build.Kernel packages, built
    first when the cache lacks it (one builder at a time)."""
    for k in kernels:
        if len(k.debs) != 2:
            raise lab.LabError(f"kernel {k.variant} in {k.directory} has no packages (debs/): rebuild it with "
                               "python3 -m lab.kernel_build")
    d = lab.CACHE / f"loop-disk-{disk_key(kernels)}"
    if (d / "complete").exists():
        return LoopDisk(d)
    with locked(lab.CACHE / "loop-disk.lock"):
        if not (d / "complete").exists():
            _build(d, server_root(log), kernels, log)
            for old in lab.CACHE.glob("loop-disk-*"):     # keep two: this one and the newest before it
                if old.is_dir() and old != d and old not in _newest_other(d):
                    shutil.rmtree(old, ignore_errors=True)
    return LoopDisk(d)


def _newest_other(d: Path) -> list[Path]:
    """The newest complete disk besides `d` (a run that started before may still boot it)."""
    others = [o for o in lab.CACHE.glob("loop-disk-*") if o.is_dir() and o != d and (o / "complete").exists()]
    return sorted(others, key=lambda o: (o / "complete").stat().st_mtime)[-1:]


def lockup_modules(kernels: list, out: Path) -> Path:
    """out/<release>/test_lockup.ko for each kernel: the kernel's own
    lib/test_lockup.c (the source package's) built as an external module
    against the headers the kernel's linux-headers package installs, the
    same build as the kernel it loads into. The lab's "lockup" fault loads
    it; the kernels themselves are not rebuilt with CONFIG_TEST_LOCKUP."""
    from lab import kernel_build
    src = kernel_build.source_file(LOCKUP_SOURCE)
    for k in kernels:
        headers = next((deb for deb in k.debs if deb.name.startswith("linux-headers-")), None)
        if headers is None:
            raise lab.LabError(f"kernel {k.variant} has no linux-headers package to build {LOCKUP_SOURCE} against")
        with tempfile.TemporaryDirectory(prefix="nttrace-lockup-") as t:
            tree, mod = Path(t) / "headers", Path(t) / "module"
            mod.mkdir()
            subprocess.run(["dpkg-deb", "-x", str(headers), str(tree)], check=True, timeout=300)
            shutil.copy(src, mod / "test_lockup.c")
            (mod / "Kbuild").write_text("obj-m := test_lockup.o\n")
            p = subprocess.run(["make", "-C", str(tree / "usr/src" / f"linux-headers-{k.release}"), f"M={mod}",
                                "modules"], capture_output=True, text=True, timeout=600)
            if p.returncode != 0 or not (mod / "test_lockup.ko").exists():
                raise lab.LabError(f"building {LOCKUP_SOURCE} for {k.release} failed ({p.returncode}): "
                                   f"{(p.stdout + p.stderr)[-3000:]}")
            (out / k.release).mkdir(parents=True, exist_ok=True)
            shutil.copy(mod / "test_lockup.ko", out / k.release / "test_lockup.ko")
    return out


def _build(d: Path, root: Path, kernels: list, log) -> None:
    shutil.rmtree(d, ignore_errors=True)
    d.parent.mkdir(parents=True, exist_ok=True)
    build_log = d.parent / f"{d.name}.build.log"
    root_uuid = str(uuidlib.uuid4())
    t0 = time.monotonic()
    modules = lockup_modules(kernels, Path(tempfile.mkdtemp(prefix="nttrace-loop-modules-")))
    with open(build_log, "w") as f:
        try:
            p = subprocess.run(["bash", str(HERE / "build-loop-disk.sh"), str(d), root_uuid, str(root / "root.tar"),
                                (root / "stock-release").read_text().strip(), str(modules),
                                *(str(deb) for k in kernels for deb in k.debs)],
                               stdout=f, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise lab.LabError(f"loop disk build exceeded {BUILD_TIMEOUT_S}s: {build_log.read_text()[-3000:]}") from None
        finally:
            shutil.rmtree(modules, ignore_errors=True)
    if p.returncode != 0:
        raise lab.LabError(f"loop disk build failed ({p.returncode}): {build_log.read_text()[-3000:]}")
    host_s = time.monotonic() - t0
    log(f"loop disk: root written in {host_s:.0f} s; the install boot (grub-install, update-grub) next")
    t1 = time.monotonic()
    install = _install_boot(d, root_uuid)
    install_s = time.monotonic() - t1
    releases = (d / "releases").read_text().split()
    by_variant = {k.variant: k.release for k in kernels}
    missing = set(by_variant.values()) - set(releases)
    if missing:
        raise lab.LabError(f"loop disk: the packages of {sorted(missing)} did not install (installed: {releases})")
    info = {"uuid": root_uuid, "stock_release": (root / "stock-release").read_text().strip(), "root": root.name,
            "releases": by_variant, "debs": [deb.name for k in kernels for deb in k.debs],
            "grub_cfg": install["grub_cfg"], "host_build_s": round(host_s, 1), "install_boot_s": round(install_s, 1),
            "built_at": time.strftime("%F %T")}
    (d / "disk.json").write_text(json.dumps(info, indent=1))
    with open(build_log, "a") as f:
        f.write(install["console"][-20000:])
    (d / "complete").write_text(time.strftime("%F %T\n"))


def _install_boot(d: Path, root_uuid: str) -> dict:
    """The lab's guest with the disk as /dev/vdb runs guest-loop-install.sh
    as its script (the lab image's init runs the share's lab/guest-run.sh)."""
    img = lab.image()
    work = d / "install"
    tree = work / "tree"
    results = work / "results"
    (tree / "lab").mkdir(parents=True)
    results.mkdir()
    shutil.copy(HERE / "guest-loop-install.sh", tree / "lab" / "guest-run.sh")
    (tree / "uuid").write_text(root_uuid + "\n")
    cmd = ["qemu-system-x86_64", *lab.DEFAULT_CPU.qemu_args(), "-m", "2G",
           "-kernel", str(img / "vmlinuz"), "-initrd", str(img / "initrd.img"),
           "-append", "root=/dev/vda rw console=ttyS0 init=/sbin/nttrace-lab-init",
           "-drive", f"file={img / 'root.img'},if=virtio,format=raw,snapshot=on",
           "-drive", f"file={d / 'disk.raw'},if=virtio,format=raw",
           "-virtfs", f"local,path={tree},mount_tag=nttrace,security_model=none,readonly=on",
           "-virtfs", f"local,path={results},mount_tag=results,security_model=none",
           "-display", "none", "-serial", f"file:{results / 'console.log'}", "-monitor", "none", "-no-reboot",
           "-nic", "none"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        p.wait(timeout=INSTALL_BOOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise lab.LabError(f"the loop disk's install boot did not finish within {INSTALL_BOOT_TIMEOUT_S}s:\n"
                           + _tail(results)) from None
    rc = (results / "guest-run.rc").read_text().strip() if (results / "guest-run.rc").exists() else None
    if rc != "0":
        raise lab.LabError(f"the loop disk's install boot failed (guest-run.rc {rc}):\n" + _tail(results))
    out = {"console": (results / "console.log").read_text(errors="replace"),
           "grub_cfg": (results / "grub.cfg").read_text()}
    shutil.rmtree(work)
    return out


def _tail(results: Path, n: int = 60) -> str:
    parts = []
    for name in ("console.log", "guest-run.log"):
        if (results / name).exists():
            parts += [f"--- {name} (tail) ---", *(results / name).read_text(errors="replace").splitlines()[-n:]]
    return "\n".join(parts)


def qemu_command(overlay: Path, results: Path, tree: Path, nvdimm: Path, monitor: Path,
                 cpu: lab.GuestCPU = lab.DEFAULT_CPU) -> list[str]:
    """The loop's guest: firmware, grub and the disk's default entry; the
    i6300ESB watchdog resets the machine when it fires; the lab's NVDIMM
    and memory tier (lab.machine_args); the tree (read-only) and
    the results shares; a monitor socket for the faults the lab injects."""
    return [
        "qemu-system-x86_64", *lab.machine_args(cpu, nvdimm),
        "-drive", f"file={overlay},if=virtio,format=qcow2",
        "-device", "i6300esb", "-action", "watchdog=reset",
        "-virtfs", f"local,path={tree},mount_tag=nttrace,security_model=none,readonly=on",
        "-virtfs", f"local,path={results},mount_tag=results,security_model=none",
        "-nic", "none",
        "-display", "none", "-serial", f"file:{results / 'console.log'}",
        "-monitor", f"unix:{monitor},server=on,wait=off",
    ]


def monitor_command(monitor: Path, command: str, timeout: float = 10) -> str:
    """One HMP command through the guest's monitor socket (e.g. system_reset:
    the power cut the lab injects), and what the monitor answered."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(monitor))
        time.sleep(0.2)
        s.recv(4096)                                  # the banner and prompt
        s.sendall(command.encode() + b"\n")
        time.sleep(0.5)
        try:
            return s.recv(4096).decode(errors="replace")
        except socket.timeout:
            return ""
