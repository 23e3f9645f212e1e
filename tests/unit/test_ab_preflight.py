# SPDX-License-Identifier: Apache-2.0
"""What `ab start` checks of both loop kernels before anything reboots, on a
machine laid out in a directory as a Debian server is: /boot with images,
configs and initrds, /lib/modules/R with modules.builtin, modules.dep and
build/include, /proc/mounts and /proc/cmdline, the root disk in /sys/class/block
with its driver chain (sd -> sd_mod, ahci), grub.cfg and grubenv, efivars and
securityfs. Each check is shown passing, then failing."""
import os
from pathlib import Path

import pytest

from ab_loop_machine import bzimage
from nttrace.ab import bootloader, kernels, preflight
from nttrace.errors import CapabilityError, UsageError
from test_ab_bootloader import LOADER, debian_grub, efivar, pe_image, sdboot, utf16

BASE, PATCHED = "6.12.0", "6.12.0-nt"
BUILD = "{r} (builder@host) #1 SMP PREEMPT_DYNAMIC Sat Nov 28 10:00:00 UTC 2026"
CONFIG = ("CONFIG_LOCALVERSION=\"{local}\"\nCONFIG_MODULES=y\nCONFIG_DEBUG_INFO_BTF=y\nCONFIG_KEXEC=y\n"
          "CONFIG_KEXEC_FILE=y\nCONFIG_KEXEC_SIG=y\nCONFIG_EXT4_FS={ext4}\nCONFIG_BLK_DEV_SD={sd}\nCONFIG_SATA_AHCI=y\n"
          "# CONFIG_NT_STORES is not set\n")
SCSI = "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0"


def install(root: Path, release: str, initrd=True, builtin=("ext4", "sd_mod", "ahci"), loadable=("i6300esb",),
            config=None, headers=True) -> None:
    """An installed kernel package: image, config, initrd, module tree, headers."""
    boot = root / "boot"
    boot.mkdir(parents=True, exist_ok=True)
    bzimage(boot / f"vmlinuz-{release}", BUILD.format(r=release))
    if config is not False:
        local = release[len(BASE):]
        (boot / f"config-{release}").write_text(config or CONFIG.format(
            local=local, ext4="y" if "ext4" in builtin else "m", sd="y" if "sd_mod" in builtin else "m"))
    if initrd:
        (boot / f"initrd.img-{release}").write_bytes(b"initrd " + release.encode())
    mods = root / "lib/modules" / release
    paths = {"ext4": "kernel/fs/ext4/ext4.ko", "sd_mod": "kernel/drivers/scsi/sd_mod.ko",
             "virtio_blk": "kernel/drivers/block/virtio_blk.ko", "virtio_pci": "kernel/drivers/virtio/virtio_pci.ko",
             "ahci": "kernel/drivers/ata/ahci.ko", "i6300esb": "kernel/drivers/watchdog/i6300esb.ko"}
    mods.mkdir(parents=True, exist_ok=True)
    (mods / "modules.builtin").write_text("".join(paths[m] + "\n" for m in builtin))
    (mods / "modules.dep").write_text("".join(paths[m] + ".xz:\n" for m in loadable))
    for m in loadable:
        (mods / (paths[m] + ".xz")).parent.mkdir(parents=True, exist_ok=True)
        (mods / (paths[m] + ".xz")).write_bytes(b"module " + m.encode())
    if headers:
        # as linux-headers-R installs it: an absolute link to /usr/src, which must be read under the root
        src = root / "usr/src" / f"linux-headers-{release}"
        (src / "include").mkdir(parents=True)
        os.symlink(f"/usr/src/linux-headers-{release}", mods / "build")


def disk(root: Path, device="/dev/sda1", fstype="ext4", cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro") -> None:
    """The root mount and the disk behind it, as /proc and sysfs show them:
    sda1 a partition of sda, sda's device a SCSI disk (driver sd, module
    sd_mod) on an AHCI controller (driver ahci)."""
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/mounts").write_text(f"sysfs /sys sysfs rw 0 0\n{device} / {fstype} rw,relatime 0 0\n"
                                      "tmpfs /run tmpfs rw 0 0\n")
    (root / "proc/cmdline").write_text(cmdline + "\n")
    sys = root / "sys"
    scsi = sys / SCSI
    (scsi / "block/sda/sda1").mkdir(parents=True)
    (scsi / "block/sda/sda1/partition").write_text("1\n")
    os.symlink("../../../0:0:0:0", scsi / "block/sda/device")
    for drv, mod, bus in (("sd", "sd_mod", "scsi"), ("ahci", "ahci", "pci")):
        d = sys / "bus" / bus / "drivers" / drv
        d.mkdir(parents=True)
        (sys / "module" / mod).mkdir(parents=True)
        os.symlink(os.path.relpath(sys / "module" / mod, d), d / "module")
    os.symlink(os.path.relpath(sys / "bus/scsi/drivers/sd", scsi), scsi / "driver")
    ahci = sys / "devices/pci0000:00/0000:00:1f.2"
    os.symlink(os.path.relpath(sys / "bus/pci/drivers/ahci", ahci), ahci / "driver")
    (sys / "class/block").mkdir(parents=True)
    for name, target in (("sda", scsi / "block/sda"), ("sda1", scsi / "block/sda/sda1")):
        os.symlink(os.path.relpath(target, sys / "class/block"), sys / "class/block" / name)


def machine(tmp_path, **patched) -> Path:
    root = tmp_path / "root"
    install(root, BASE)
    install(root, PATCHED, **patched)
    disk(root)
    debian_grub(root, default="gnulinux-advanced-1234>gnulinux-6.12.0-advanced-1234")
    return root


def ks(root: Path, base=BASE, patched=PATCHED) -> dict:
    return {"base": kernels.resolve(base, root=root), "patched": kernels.resolve(patched, root=root)}


def refusals(pf, kind=UsageError) -> list[str]:
    assert all(isinstance(e, (UsageError, CapabilityError)) and "\n" not in str(e) for e in pf.refusals)
    return [str(e) for e in pf.refusals if type(e) is kind]


def test_a_pair_a_server_can_run_passes_every_check(tmp_path):
    root = machine(tmp_path)
    pf = preflight.check(ks(root), "kexec", root)
    assert pf.refusals == []
    found = "\n".join(pf.found)
    for said in ("two distinct kernels: 6.12.0 (base) and 6.12.0-nt (patched), each with its own headers",
                 "patched 6.12.0-nt: CONFIG_DEBUG_INFO_BTF=y",
                 "base 6.12.0: CONFIG_KEXEC=y and CONFIG_KEXEC_FILE=y",
                 f"patched 6.12.0-nt: its own module tree {root}/lib/modules/6.12.0-nt",
                 f"patched 6.12.0-nt: headers {root}/lib/modules/6.12.0-nt/build",
                 "the bootloader's default entry boots 6.12.0 (the base kernel)"):
        assert said in found
    assert pf.default_boot == {"loader": "grub", "entry": "gnulinux-advanced-1234>gnulinux-6.12.0-advanced-1234",
                               "release": "6.12.0", "how": pf.default_boot["how"]}
    assert pf.config_diffs == {"patched": ['CONFIG_LOCALVERSION: base="" patched="-nt"']}


def test_the_same_kernel_twice_and_two_builds_of_one_release_are_refused(tmp_path):
    root = machine(tmp_path)
    k = kernels.resolve(BASE, root=root)
    pf = preflight.check({"base": k, "patched": k}, "kexec", root)
    assert refusals(pf) == [f"ab start: base and patched are the same image (sha256 {k.sha256[:12]}): the loop could "
                            "not tell which one booted; give two different kernels"]
    # a rebuild of the same release elsewhere: another build string, but one /lib/modules/6.12.0 for both
    other = bzimage(tmp_path / "bzImage", BUILD.format(r=BASE).replace("#1 ", "#2 "))
    pf = preflight.check({"base": k, "patched": kernels.resolve(str(other), root=root)}, "kexec", root)
    said = refusals(pf)
    assert any("both release 6.12.0: they share /lib/modules/6.12.0" in r and "CONFIG_LOCALVERSION" in r
               and "bindeb-pkg" in r for r in said)


@pytest.mark.parametrize("patched, via, refused", [
    (dict(headers=False), "kexec", "has no headers (/lib/modules/6.12.0-nt/build with include/)"),
    (dict(config=False), "kexec", "has no config (not /boot/config-6.12.0-nt"),
    (dict(config="CONFIG_MODULES=y\nCONFIG_KEXEC=y\n# CONFIG_DEBUG_INFO_BTF is not set\n"), "kexec",
     "built without CONFIG_DEBUG_INFO_BTF=y"),
    (dict(config="CONFIG_MODULES=y\nCONFIG_DEBUG_INFO_BTF=y\n"), "kexec", "without CONFIG_KEXEC or CONFIG_KEXEC_FILE"),
])
def test_each_kernels_own_needs_are_checked(tmp_path, patched, via, refused):
    root = machine(tmp_path, **patched)
    said = refusals(preflight.check(ks(root), via, root))
    assert len(said) == 1 and said[0].startswith("ab start: the patched kernel 6.12.0-nt") and refused in said[0]


def test_kexec_support_is_not_asked_of_a_reboot_loop(tmp_path, monkeypatch):
    root = machine(tmp_path, config="CONFIG_MODULES=y\nCONFIG_DEBUG_INFO_BTF=y\n")
    monkeypatch.setattr(bootloader.shutil, "which", lambda name: f"/usr/sbin/{name}" if name == "grub-reboot" else None)
    pf = preflight.check(ks(root), "reboot", root)
    assert refusals(pf) == [] and refusals(pf, CapabilityError) == []
    assert pf.entries == {"base": "gnulinux-advanced-1234>gnulinux-6.12.0-advanced-1234",
                          "patched": "gnulinux-advanced-1234>gnulinux-6.12.0-nt-advanced-1234"}


def test_a_kernel_without_its_module_tree_is_refused(tmp_path):
    root = machine(tmp_path)
    k = ks(root)
    import shutil
    shutil.rmtree(root / "lib/modules" / PATCHED)
    said = refusals(preflight.check(ks(root), "kexec", root))
    assert any("has no module tree /lib/modules/6.12.0-nt" in r for r in said)
    assert k["patched"].modules_dir and kernels.changed(k["patched"].as_json()).endswith("is gone")


def test_a_kernel_without_an_initrd_needs_root_built_in(tmp_path):
    # built in: ext4, sd_mod, ahci (the disk's chain read from sysfs) -> fine
    root = machine(tmp_path, initrd=False)
    pf = preflight.check(ks(root), "kexec", root)
    assert refusals(pf) == []
    assert any("no initrd; root /dev/sda1: ext4 and the disk's drivers (sd_mod, ahci) not modules" in f for f in pf.found)
    # sd_mod as a module of the patched kernel: only an initrd could load it before root is mounted
    root = machine(tmp_path / "m", initrd=False, builtin=("ext4", "ahci"), loadable=("sd_mod", "i6300esb"))
    said = refusals(preflight.check(ks(root), "kexec", root))
    assert len(said) == 1 and "needs sd_mod, which it has as modules, not built in" in said[0]
    assert "update-initramfs -c -k 6.12.0-nt" in said[0]


@pytest.mark.parametrize("device, cmdline, said", [
    ("/dev/mapper/vg-root", "root=/dev/mapper/vg-root ro", "on /dev/mapper/vg-root, which only the initrd sets up"),
    ("/dev/sda1", "BOOT_IMAGE=/boot/vmlinuz root=UUID=5a1e ro", "root=UUID=5a1e is found by the initrd's blkid"),
])
def test_a_root_only_an_initrd_can_find_is_refused_without_one(tmp_path, device, cmdline, said):
    root = tmp_path / "root"
    install(root, BASE)
    install(root, PATCHED, initrd=False)
    disk(root, device=device, cmdline=cmdline)
    debian_grub(root)
    got = refusals(preflight.check(ks(root), "kexec", root))
    assert len(got) == 1 and said in got[0] and "the patched kernel 6.12.0-nt has no initrd" in got[0]


def test_a_default_entry_that_is_the_patched_kernel_is_refused(tmp_path):
    root = machine(tmp_path)
    debian_grub(root, default="1>0")                 # Debian's highest version: 6.12.0-nt
    pf = preflight.check(ks(root), "kexec", root)
    said = refusals(pf)
    assert len(said) == 1 and "default entry boots the patched kernel 6.12.0-nt" in said[0]
    assert "every reset" in said[0] and "grub-set-default" in said[0]
    assert pf.default_boot["release"] == PATCHED and pf.default_boot["entry"] == "1>0"


def test_systemd_boots_default_is_read_and_checked_too(tmp_path):
    root = machine(tmp_path)
    sdboot(root, default=None, releases=(BASE, PATCHED))
    efivar(root, "LoaderInfo", LOADER, utf16("systemd-boot 252.39-1~deb12u1"))
    efivar(root, "LoaderEntryDefault", LOADER, utf16(f"0f5d2e6a1b8c4d7e9f0a1b2c3d4e5f60-{PATCHED}.conf"))
    said = refusals(preflight.check(ks(root), "kexec", root))
    assert len(said) == 1 and "bootctl set-default" in said[0]


def test_a_default_that_cannot_be_read_is_said_not_guessed(tmp_path):
    root = machine(tmp_path)
    (root / "boot/grub/grub.cfg").unlink()
    pf = preflight.check(ks(root), "kexec", root)
    assert refusals(pf) == [] and pf.default_boot["release"] is None and pf.default_boot["loader"] == "unknown"
    assert any(f.startswith("the bootloader's default entry is not known: cannot read the default entry: no grub.cfg")
               for f in pf.found)


def test_the_configs_differences_are_listed(tmp_path):
    root = machine(tmp_path, builtin=("ext4", "ahci"), loadable=("sd_mod",))
    cfg = root / "boot" / f"config-{PATCHED}"
    cfg.write_text(cfg.read_text().replace("# CONFIG_NT_STORES is not set", "CONFIG_NT_STORES=y")
                   .replace("CONFIG_KEXEC_FILE=y\n", ""))
    assert preflight.check(ks(root), "kexec", root).config_diffs == {"patched": [
        "CONFIG_BLK_DEV_SD: base=y patched=m", "CONFIG_KEXEC_FILE: base=y patched=not set",
        'CONFIG_LOCALVERSION: base="" patched="-nt"', "CONFIG_NT_STORES: base=not set patched=y"]}


def test_two_releases_whose_headers_are_one_tree_are_refused(tmp_path):
    """`make modules_install` from one build tree, switched between branches,
    links both releases' build/ to that tree: bcc on base would compile the
    probes against the patched tree (fails if headers are not compared)."""
    root = machine(tmp_path)
    patched_build = root / "lib/modules" / PATCHED / "build"
    patched_build.unlink()
    os.symlink(f"/usr/src/linux-headers-{BASE}", patched_build)
    pf = preflight.check(ks(root), "kexec", root)
    assert refusals(pf) == [f"ab start: base (6.12.0) and patched (6.12.0-nt) have one headers tree: "
                            f"/lib/modules/R/build of both leads to {root}/usr/src/linux-headers-6.12.0, so bcc would "
                            "compile the probes of both against one build (what `make modules_install` gives when one "
                            "tree builds both kernels); install each kernel's own headers (the linux-headers package "
                            "`make bindeb-pkg` makes, or a build tree each)"]


def test_a_series_is_checked_pair_by_pair_and_the_default_may_boot_none_of_its_steps(tmp_path):
    """Every two kernels of a series are told apart; the default entry boots
    none of the steps after the base; each step's config is compared with
    the one before it (fails if only the first and last kernels are checked)."""
    root = machine(tmp_path)
    install(root, "6.12.0-v9")
    series = {"base": kernels.resolve(BASE, root=root), "step1": kernels.resolve("6.12.0-v9", root=root),
              "step2": kernels.resolve(PATCHED, root=root)}
    pf = preflight.check(series, "kexec", root)
    assert refusals(pf) == []
    found = "\n".join(pf.found)
    for pair in ("6.12.0 (base) and 6.12.0-v9 (step1)", "6.12.0 (base) and 6.12.0-nt (step2)",
                 "6.12.0-v9 (step1) and 6.12.0-nt (step2)"):
        assert f"two distinct kernels: {pair}" in found
    assert pf.config_diffs == {"step1": ['CONFIG_LOCALVERSION: base="" step1="-v9"'],
                               "step2": ['CONFIG_LOCALVERSION: step1="-v9" step2="-nt"']}
    series["step1"] = series["step2"]                      # one kernel twice in the series
    assert any("step1 and step2 are the same image" in r for r in refusals(preflight.check(series, "kexec", root)))
    cfg = debian_grub(root, default="gnulinux-advanced-1234>gnulinux-6.12.0-v9-advanced-1234")
    cfg.write_text(cfg.read_text().replace(
        "\tmenuentry 'Debian GNU/Linux, with Linux 6.12.0' ",
        "\tmenuentry 'Debian GNU/Linux, with Linux 6.12.0-v9' --class debian $menuentry_id_option "
        "'gnulinux-6.12.0-v9-advanced-1234' {\n\t\tlinux\t/boot/vmlinuz-6.12.0-v9 root=UUID=1234 ro quiet\n\t}\n"
        "\tmenuentry 'Debian GNU/Linux, with Linux 6.12.0' "))
    series["step1"] = kernels.resolve("6.12.0-v9", root=root)
    assert any(r.startswith("ab start: the bootloader's default entry boots the step1 kernel 6.12.0-v9")
               for r in refusals(preflight.check(series, "kexec", root)))


def lock(root: Path, mode: str) -> None:
    (root / "sys/kernel/security").mkdir(parents=True, exist_ok=True)
    modes = ["none", "integrity", "confidentiality"]
    (root / "sys/kernel/security/lockdown").write_text(" ".join(f"[{m}]" if m == mode else m for m in modes) + "\n")


def test_lockdown_blocks_kexec_of_an_unsigned_kernel_and_says_what_to_do(tmp_path):
    root = machine(tmp_path)
    lock(root, "none")
    assert refusals(preflight.check(ks(root), "kexec", root), CapabilityError) == []
    lock(root, "integrity")
    pe_image(root / "boot" / f"vmlinuz-{BASE}", signed=True)
    pe_image(root / "boot" / f"vmlinuz-{PATCHED}", signed=False)
    pf = preflight.check(ks(root), "kexec", root)
    said = refusals(pf, CapabilityError)
    assert len(said) == 1 and all(e.exit_code == 3 for e in pf.refusals)
    assert "lockdown is integrity" in said[0] and "the patched kernel" in said[0] and "not signed" in said[0]
    assert "sbsign" in said[0] and "--via reboot" in said[0]
    assert any("the base kernel is signed; kexec -s loads it" in f for f in pf.found)
    # a loop kernel that, locked down in turn, could not kexec_file_load the next one
    pe_image(root / "boot" / f"vmlinuz-{PATCHED}", signed=True)
    cfg = root / "boot" / f"config-{PATCHED}"
    cfg.write_text(cfg.read_text().replace("CONFIG_KEXEC_SIG=y\n", ""))
    pf = preflight.check(ks(root), "kexec", root)
    assert refusals(pf, CapabilityError) == []
    said = refusals(pf)
    assert len(said) == 1 and "the patched kernel 6.12.0-nt is built without CONFIG_KEXEC_SIG" in said[0]


def test_secure_boot_with_lockdown_unreadable_still_names_the_unsigned_kernel(tmp_path):
    root = machine(tmp_path)
    efivar(root, "SecureBoot", bootloader.GLOBAL_GUID, b"\x01")
    said = refusals(preflight.check(ks(root), "kexec", root), CapabilityError)
    assert len(said) == 2 and all("Secure Boot is on" in s and "not an EFI image" in s for s in said)


def test_secure_boot_refuses_a_reboot_into_an_unsigned_kernel(tmp_path, monkeypatch):
    root = machine(tmp_path)
    monkeypatch.setattr(bootloader.shutil, "which", lambda name: f"/usr/sbin/{name}" if name == "grub-reboot" else None)
    for side, release in (("base", BASE), ("patched", PATCHED)):
        pe_image(root / "boot" / f"vmlinuz-{release}", signed=True)
    efivar(root, "SecureBoot", bootloader.GLOBAL_GUID, b"\x01")
    assert refusals(preflight.check(ks(root), "reboot", root), CapabilityError) == []
    pe_image(root / "boot" / f"vmlinuz-{PATCHED}", signed=False)
    said = refusals(preflight.check(ks(root), "reboot", root), CapabilityError)
    assert len(said) == 1 and "firmware and shim boot only signed kernels" in said[0] and "mokutil" in said[0]
    efivar(root, "SecureBoot", bootloader.GLOBAL_GUID, b"\x00")
    assert refusals(preflight.check(ks(root), "reboot", root), CapabilityError) == []


def virtio_disk(root: Path) -> None:
    """A virtio disk as sysfs shows it: vda's device is virtio1 (driver
    virtio_blk) on PCI function 0000:00:04.0 (driver virtio-pci, module
    virtio_pci); the root filesystem ext4 on the whole disk."""
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/mounts").write_text("/dev/vda / ext4 rw,relatime 0 0\n")
    (root / "proc/cmdline").write_text("root=/dev/vda ro console=ttyS0\n")
    sys = root / "sys"
    pci = sys / "devices/pci0000:00/0000:00:04.0"
    (pci / "virtio1/block/vda").mkdir(parents=True)
    os.symlink("../../../virtio1", pci / "virtio1/block/vda/device")
    for drv, mod, bus, dev in (("virtio_blk", "virtio_blk", "virtio", pci / "virtio1"),
                               ("virtio-pci", "virtio_pci", "pci", pci)):
        d = sys / "bus" / bus / "drivers" / drv
        d.mkdir(parents=True)
        (sys / "module" / mod).mkdir(parents=True)
        os.symlink(os.path.relpath(sys / "module" / mod, d), d / "module")
        os.symlink(os.path.relpath(d, dev), dev / "driver")
    (sys / "class/block").mkdir(parents=True)
    os.symlink(os.path.relpath(pci / "virtio1/block/vda", sys / "class/block"), sys / "class/block/vda")


@pytest.mark.parametrize("builtin, refused", [(("ext4", "virtio_blk", "virtio_pci"), None),
                                              (("ext4",), "needs virtio_blk, virtio_pci")])
def test_a_virtio_root_disk_without_an_initrd(tmp_path, builtin, refused):
    root = tmp_path / "root"
    install(root, BASE)
    install(root, PATCHED, initrd=False, builtin=builtin,
            loadable=tuple(m for m in ("virtio_blk", "virtio_pci") if m not in builtin))
    virtio_disk(root)
    debian_grub(root)
    assert preflight.disk_drivers(root, "/dev/vda") == ["virtio_blk", "virtio_pci"]
    said = refusals(preflight.check(ks(root), "kexec", root))
    assert said == [] if refused is None else (len(said) == 1 and refused in said[0])
