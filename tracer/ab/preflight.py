# SPDX-License-Identifier: Apache-2.0
"""What `ab start` checks of the loop's two kernels before anything reboots.

For every pair of the loop's kernels (two, or a series): the two can be told
apart (release and build string, and the image hashes), they have distinct
releases (one release is one /lib/modules/R: its modules and the headers bcc
compiles against; two builds of one release would run one build's modules
on both sides), and their headers are two trees (/lib/modules/R/build
resolved: two releases installed with `make modules_install` from one build
tree link to the same tree, and bcc on one would compile against the
other's build).

For each kernel: its module tree and headers are there, its config is there
and has CONFIG_DEBUG_INFO_BTF=y (validate's probes need BTF) and, for --via
kexec, CONFIG_KEXEC or CONFIG_KEXEC_FILE (each loop kernel kexecs the next);
without an initrd, the root filesystem and the root disk's drivers are built
in (not modules only an initrd could load), and root= names the disk in a
form the kernel itself reads.

For the machine: the bootloader's default entry (what every reset boots) is
read and must not be a patched kernel (any of the series after its base),
else a panic, a watchdog reset or a power cut would boot it again and again; Secure Boot and
lockdown are named where they keep kexec or the firmware from booting an
unsigned image. For --via reboot, the bootloader's one-shot entry for each
kernel (bootloader.check_reboot).

Each kernel's config is compared with the one before it in the series:
config_diffs lists, per kernel after the base, every option the two set
differently, for the plan and the report.

Everything is read under `root`, so the tests lay out a machine in a directory.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from nttrace.ab import bootloader, kernels
from nttrace.errors import CapabilityError, UsageError

PROC_MOUNTS = Path("/proc/mounts")
PROC_CMDLINE = Path("/proc/cmdline")
SYS_BLOCK = Path("/sys/class/block")
# root devices the kernel cannot assemble by itself: device-mapper (LVM,
# LUKS) and software RAID are set up by userspace in the initrd
NEEDS_USERSPACE = re.compile(r"^/dev/(mapper/|dm-|md)")
# root= forms only the initrd's udev/blkid resolve; the kernel reads /dev/X,
# PARTUUID=, PARTLABEL= and MAJ:MIN itself
NEEDS_BLKID = re.compile(r"^(UUID|LABEL)=")
UNSIGNED_FIX = ("sign it (sbsign --key KEY --cert CERT, the certificate enrolled with mokutil --import) "
                "or turn Secure Boot off in the firmware setup")


@dataclass
class Preflight:
    found: list[str] = field(default_factory=list)          # a line per thing checked and fine
    refusals: list[Exception] = field(default_factory=list)  # UsageError (exit 2), CapabilityError (exit 3)
    config_diffs: dict = field(default_factory=dict)        # {label: ["CONFIG_X: base=y patched=m", ...]}
    default_boot: dict = field(default_factory=dict)        # {"loader", "entry", "release", "how"}
    entries: dict | None = None                             # --via reboot: {side: the loader's one-shot entry}

    def refuse(self, exc: Exception) -> None:
        self.refusals.append(exc)


def check(ks: dict, via: str, root: Path = Path("/"), run=None) -> Preflight:
    """Every check above; `ks` is {label: Kernel}, the base first. `run` runs
    grub-probe (the tests pass one)."""
    pf = Preflight()
    kd = {side: (k if isinstance(k, dict) else k.as_json()) for side, k in ks.items()}
    labels = list(kd)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            check_pair(a, kd[a], b, kd[b], pf)
    for side, k in kd.items():
        check_kernel(side, k, via, pf)
        check_initrd(side, k, root, pf)
    loader = bootloader.detect(root)
    check_default(loader, kd, pf)
    if via == "reboot":
        try:
            found, pf.entries = bootloader.check_reboot(
                loader, {side: k["release"] for side, k in kd.items()}, run or _run)
            pf.found += found
        except (UsageError, CapabilityError) as exc:
            pf.refuse(exc)
    check_signing(kd, via, root, pf)
    for before, after in zip(labels, labels[1:]):
        pf.config_diffs[after] = config_diff(before, kd[before], after, kd[after])
        if kd[before].get("config") and kd[after].get("config"):
            pf.found.append(f"configs compared, {after} against {before}: {len(pf.config_diffs[after])} option(s) "
                            "differ")
    return pf


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


# -- each pair --------------------------------------------------------------------------
def check_pair(a: str, ka: dict, b: str, kb: dict, pf: Preflight) -> None:
    if ka["sha256"] == kb["sha256"] or (ka["release"], ka["build"]) == (kb["release"], kb["build"]):
        same = "the same image (sha256 " + ka["sha256"][:12] + ")" if ka["sha256"] == kb["sha256"] else \
            f"the same release and build string ({ka['build']})"
        pf.refuse(UsageError(f"ab start: {a} and {b} are {same}: the loop could not tell which one booted; "
                             "give two different kernels"))
    elif ka["release"] == kb["release"]:
        pf.refuse(UsageError(
            f"ab start: {a} and {b} are both release {ka['release']}: they share /lib/modules/{ka['release']} "
            "(modules and the headers bcc compiles against), so one build's modules would run on both sides; "
            "build them with distinct releases (CONFIG_LOCALVERSION=\"-nt\", or make LOCALVERSION=-nt; "
            "make bindeb-pkg with a distinct version)"))
    elif ka.get("headers_real") and ka.get("headers_real") == kb.get("headers_real"):
        pf.refuse(UsageError(
            f"ab start: {a} ({ka['release']}) and {b} ({kb['release']}) have one headers tree: "
            f"/lib/modules/R/build of both leads to {ka['headers_real']}, so bcc would compile the probes of both "
            "against one build (what `make modules_install` gives when one tree builds both kernels); install "
            "each kernel's own headers (the linux-headers package `make bindeb-pkg` makes, or a build tree each)"))
    else:
        pf.found.append(f"two distinct kernels: {ka['release']} ({a}) and {kb['release']} ({b})"
                        + (", each with its own headers" if ka.get("headers_real") and kb.get("headers_real")
                           else ""))


# -- each kernel ------------------------------------------------------------------------
def check_kernel(side: str, k: dict, via: str, pf: Preflight) -> None:
    r = k["release"]
    who = f"ab start: the {side} kernel {r}"
    if not k.get("config"):
        pf.refuse(UsageError(f"{who} has no config (not /boot/config-{r}, nor a config or the tree's .config beside "
                             f"{k['image']}): its BTF and kexec support cannot be checked; install it as "
                             f"/boot/config-{r}"))
    else:
        if kernels.config_value(k, "CONFIG_DEBUG_INFO_BTF") != "y":
            pf.refuse(UsageError(f"{who} is built without CONFIG_DEBUG_INFO_BTF=y ({k['config']}): validate's "
                                 "probes need its BTF"))
        else:
            pf.found.append(f"{side} {r}: CONFIG_DEBUG_INFO_BTF=y")
        if via == "kexec":
            kexec = [o for o in ("CONFIG_KEXEC", "CONFIG_KEXEC_FILE") if kernels.config_value(k, o) == "y"]
            if not kexec:
                pf.refuse(UsageError(f"{who} is built without CONFIG_KEXEC or CONFIG_KEXEC_FILE ({k['config']}): it "
                                     "could not kexec the loop's next kernel; rebuild it with CONFIG_KEXEC=y, "
                                     "or use --via reboot"))
            else:
                pf.found.append(f"{side} {r}: {' and '.join(o + '=y' for o in kexec)}")
    no_modules = k.get("config") and kernels.config_value(k, "CONFIG_MODULES") is None
    if k.get("modules_dir"):
        pf.found.append(f"{side} {r}: its own module tree {k['modules_dir']}")
    elif no_modules:
        pf.found.append(f"{side} {r}: built without module support (no module tree needed)")
    else:
        pf.refuse(UsageError(f"{who} has no module tree /lib/modules/{r}: install its modules (its linux-image "
                             "package, or make modules_install)"))
    if k.get("headers"):
        pf.found.append(f"{side} {r}: headers {k['headers']}")
    else:
        pf.refuse(UsageError(f"{who} has no headers (/lib/modules/{r}/build with include/): validate's probes are "
                             f"compiled against them; install linux-headers-{r} (make bindeb-pkg builds it), or "
                             "make modules_install from its build tree, which links build/ to it"))


def root_mount(root: Path) -> tuple[str, str] | None:
    """(device, filesystem type) of / in /proc/mounts; the last one mounted wins."""
    try:
        text = kernels.under(root, PROC_MOUNTS).read_text()
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] == "/" and f[0] != "rootfs":
            found = (f[0], f[2])
    return found


def disk_drivers(root: Path, device: str) -> list[str] | None:
    """The modules (or driver names) behind a block device, nearest first:
    /sys/class/block/DEV (a partition's disk is its parent), then the disk's
    device and each parent device that has a driver. None where sysfs does
    not say."""
    node = kernels.under(root, SYS_BLOCK) / Path(device).name
    if not node.exists():
        return None
    disk = node.resolve()
    if (disk / "partition").exists():
        disk = disk.parent
    dev = disk / "device"
    if not dev.exists():
        return None
    out = []
    d = dev.resolve()
    sys_root = kernels.under(root, Path("/sys")).resolve()
    while d != sys_root and sys_root in d.parents:
        drv = d / "driver"
        if drv.exists():
            mod = drv.resolve() / "module"
            out.append((mod.resolve().name if mod.exists() else drv.resolve().name).replace("-", "_"))
        d = d.parent
    return out


def root_arg(root: Path) -> str | None:
    try:
        words = kernels.under(root, PROC_CMDLINE).read_text().split()
    except OSError:
        return None
    return next((w[len("root="):] for w in reversed(words) if w.startswith("root=")), None)


def check_initrd(side: str, k: dict, root: Path, pf: Preflight) -> None:
    """A kernel without an initrd must mount the root filesystem by itself."""
    if k.get("initrd"):
        pf.found.append(f"{side} {k['release']}: initrd {k['initrd']}")
        return
    r = k["release"]
    who = f"ab start: the {side} kernel {r} has no initrd"
    fix = f"make one (update-initramfs -c -k {r}, or dracut --kver {r})" + (
        f" and give it as PATH:INITRD" if "/" in k["spec"] else "")
    rm = root_mount(root)
    arg = root_arg(root)
    if arg and NEEDS_BLKID.match(arg):
        pf.refuse(UsageError(f"{who}, and the command line's root={arg} is found by the initrd's blkid, not by the "
                             f"kernel (it reads /dev/X or PARTUUID=): {fix}"))
        return
    if rm is None:
        pf.found.append(f"{side} {r}: no initrd; cannot read the root mount ({PROC_MOUNTS}) to tell whether it needs one")
        return
    device, fstype = rm
    if NEEDS_USERSPACE.match(device):
        pf.refuse(UsageError(f"{who}, and the root filesystem is on {device}, which only the initrd sets up: {fix}"))
        return
    builtin, loadable = kernels.builtin_modules(k), kernels.loadable_modules(k)
    if builtin is None:
        if k.get("config") and kernels.config_value(k, "CONFIG_MODULES") is None:
            pf.found.append(f"{side} {r}: no initrd, no modules: its root disk's drivers are built in or absent")
        else:
            pf.found.append(f"{side} {r}: no initrd, and no modules.builtin to tell whether root's drivers are built in")
        return
    drivers = disk_drivers(root, device)
    fs = fstype.replace("-", "_")
    if fs in ("ext2", "ext3") and fs not in builtin | loadable:
        fs = "ext4"                      # CONFIG_EXT4_USE_FOR_EXT2: the ext4 driver mounts them
    need = [fs] + (drivers or [])
    as_modules = [m for m in need if m in loadable and m not in builtin]
    if as_modules:
        pf.refuse(UsageError(f"{who}, and mounting root ({device}, {fstype}) needs {', '.join(as_modules)}, "
                             f"which it has as modules, not built in: {fix}"))
        return
    said = f"{fstype} and the disk's drivers ({', '.join(drivers)})" if drivers else \
        f"{fstype} (the disk's driver is not in sysfs under {SYS_BLOCK}: not checked)"
    pf.found.append(f"{side} {r}: no initrd; root {device}: {said} not modules of it")


# -- the bootloader's default -------------------------------------------------------------
def check_default(loader: bootloader.Loader, kd: dict, pf: Preflight) -> None:
    try:
        pf.default_boot = loader.default()
    except OSError as exc:
        pf.default_boot = {"loader": loader.kind, "entry": None, "release": None,
                           "how": f"cannot read the default entry: {exc}"}
    d = pf.default_boot
    if d.get("release") is None:
        pf.found.append(f"the bootloader's default entry is not known: {d['how']}; a reset boots what it boots")
        return
    why = default_is_patched(d, kd)
    if why:
        fix = {"systemd-boot": "bootctl set-default ID (or loader.conf's default)"}.get(
            loader.kind, "grub-set-default ENTRY (with GRUB_DEFAULT=saved), or GRUB_DEFAULT and update-grub")
        pf.refuse(UsageError(f"ab start: {why} ({d['how']}): every reset (a panic, the watchdog, a power cut) would "
                             f"boot it again; make a working kernel the default first: {fix}"))
        return
    which = next((side for side, k in kd.items() if k["release"] == d["release"]), None)
    pf.found.append(f"the bootloader's default entry boots {d['release']}"
                    + (f" (the {which} kernel)" if which else "") + f": {d['how']}")


def default_is_patched(default: dict, kd: dict) -> str | None:
    """Why the bootloader's default (Loader.default()) boots one of the loop's
    patched kernels (any after the base), or None. Read at start and again at
    every boot of the loop (an update-grub mid-loop can move an index default)."""
    base = next(iter(kd.values()))
    for label, k in list(kd.items())[1:]:
        if default.get("release") == k["release"] and k["release"] != base["release"]:
            what = "the patched kernel" if label == "patched" else f"the {label} kernel"
            return f"the bootloader's default entry boots {what} {k['release']}"
    return None


# -- Secure Boot and lockdown -----------------------------------------------------------
def check_signing(kd: dict, via: str, root: Path, pf: Preflight) -> None:
    sb, ld = bootloader.secure_boot(root), bootloader.lockdown(root)
    sb_text = "Secure Boot is on (EFI variable SecureBoot)"
    ld_text = f"lockdown is {ld} ({bootloader.LOCKDOWN})"
    locked = ld in ("integrity", "confidentiality")
    if via == "kexec" and (locked or (sb and ld is None)):
        why = ld_text if locked else f"{sb_text}, and the lockdown mode cannot be read (no {bootloader.LOCKDOWN})"
        for side, k in kd.items():
            lacks = [o for o in ("CONFIG_KEXEC_FILE", "CONFIG_KEXEC_SIG") if k.get("config")
                     and kernels.config_value(k, o) != "y"]
            if lacks:      # the loop kernel, locked down in turn, must kexec_file_load the next and check its signature
                pf.refuse(UsageError(
                    f"ab start --via kexec: {why}, and the {side} kernel {k['release']} is built without "
                    f"{' and '.join(lacks)}: locked down in turn, it could not load the loop's next kernel; rebuild "
                    "it with CONFIG_KEXEC_FILE=y and CONFIG_KEXEC_SIG=y, or use --via reboot"))
            signed = bootloader.pe_signed(Path(k["image"]))
            if not signed:
                pf.refuse(CapabilityError(
                    f"ab start --via kexec: {why}: kexec_load is refused and kexec_file_load takes only signed images; "
                    f"the {side} kernel {k['image']} is {'not an EFI image' if signed is None else 'not signed'} "
                    f"(no Authenticode certificate table): {UNSIGNED_FIX}, or use --via reboot"
                    + ("" if sb is False else " with signed kernels")))
            else:
                pf.found.append(f"{why}: the {side} kernel is signed; kexec -s loads it (the key must be one the "
                                "kernel trusts)")
    elif via == "kexec" and sb:
        pf.found.append(f"{sb_text}, {ld_text}: kexec_load is allowed")
    if via == "reboot" and sb:
        for side, k in kd.items():
            signed = bootloader.pe_signed(Path(k["image"]))
            if not signed:
                pf.refuse(CapabilityError(
                    f"ab start --via reboot: {sb_text}: the firmware and shim boot only signed kernels, and the "
                    f"{side} kernel {k['image']} is {'not an EFI image' if signed is None else 'not signed'} "
                    f"(no Authenticode certificate table): {UNSIGNED_FIX}"))
            else:
                pf.found.append(f"{sb_text}: the {side} kernel is signed (whether by a trusted key, the firmware says "
                                "at boot)")


# -- the configs --------------------------------------------------------------------------
def config_diff(a: str, ka: dict, b: str, kb: dict) -> list[str]:
    """Every option two configs set differently, "CONFIG_X: base=y
    patched=m" ("not set" where one does not set it), sorted by name."""
    try:
        ca, cb = kernels.read_config(ka["config"]), kernels.read_config(kb["config"])
    except (OSError, TypeError):
        return []
    return [f"{o}: {a}={ca.get(o, 'not set')} {b}={cb.get(o, 'not set')}"
            for o in sorted(set(ca) | set(cb)) if ca.get(o) != cb.get(o)]
