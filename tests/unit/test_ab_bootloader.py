# SPDX-License-Identifier: Apache-2.0
"""Which bootloader boots the machine, its default entry and its one-shot
entry, read from the files each loader really keeps: a Debian grub.cfg with
its submenu, a Fedora grub.cfg running blscfg over /boot/loader/entries, a
systemd-boot ESP (loader.conf, entries), and the EFI variables under
/sys/firmware/efi/efivars with their 4-byte attribute prefix."""
import struct
import subprocess
from pathlib import Path

import pytest

from grub_cfg import DEBIAN_GRUB_CFG
from nttrace.ab import boot, bootloader
from nttrace.errors import CapabilityError, UsageError

# Fedora's grub.cfg: the entries are not in it, blscfg makes them from /boot/loader/entries
FEDORA_GRUB_CFG = """\
set pager=1
if [ -f ${config_directory}/grubenv ]; then
  load_env -f ${config_directory}/grubenv
elif [ -s $prefix/grubenv ]; then
  load_env
fi
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="${saved_entry}"
fi
insmod blscfg
blscfg
menuentry 'UEFI Firmware Settings' $menuentry_id_option 'uefi-firmware' {
	fwsetup
}
"""
MACHINE_ID = "0f5d2e6a1b8c4d7e9f0a1b2c3d4e5f60"


def bls(release: str, title: str, machine_id: str = MACHINE_ID, linux: str | None = None) -> str:
    return (f"title {title}\nversion {release}\nlinux {linux or f'/vmlinuz-{release}'}\n"
            f"initrd /initramfs-{release}.img\noptions root=UUID=1234 ro\ngrub_users $grub_users\n"
            f"grub_arg --unrestricted\ngrub_class fedora\n")


def efivar(root: Path, name: str, guid: str, value: bytes) -> None:
    d = root / "sys/firmware/efi/efivars"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}-{guid}").write_bytes(struct.pack("<I", 0x7) + value)     # NV, BS, RT attributes


def utf16(text: str) -> bytes:
    return (text + "\0").encode("utf-16-le")


def debian_grub(root: Path, default: str = "0", saved: str | None = None) -> Path:
    d = root / "boot/grub"
    d.mkdir(parents=True, exist_ok=True)
    (d / "grub.cfg").write_text(DEBIAN_GRUB_CFG % {"default": default})
    (d / "grubenv").write_text("# GRUB Environment Block\n" + (f"saved_entry={saved}\n" if saved else "")
                               + "#" * 900 + "\n")
    return d / "grub.cfg"


def fedora_grub(root: Path, saved: str | None, releases=("6.9.12-200.fc40.x86_64", "6.10.3-200.fc40.x86_64")) -> Path:
    d = root / "boot/grub2"
    d.mkdir(parents=True, exist_ok=True)
    (d / "grub.cfg").write_text(FEDORA_GRUB_CFG)
    (d / "grubenv").write_text("# GRUB Environment Block\n" + (f"saved_entry={saved}\n" if saved else "")
                               + "boot_success=1\n" + "#" * 900 + "\n")
    e = root / "boot/loader/entries"
    e.mkdir(parents=True, exist_ok=True)
    for r in releases:
        (e / f"{MACHINE_ID}-{r}.conf").write_text(bls(r, f"Fedora Linux ({r}) 40 (Workstation Edition)"))
    return d / "grub.cfg"


def sdboot(root: Path, default: str | None, releases=("6.1.0-57-amd64", "6.12.0-nt"), esp: str = "efi") -> Path:
    loader = root / esp / "loader"
    (loader / "entries").mkdir(parents=True, exist_ok=True)
    (loader / "loader.conf").write_text("timeout 3\n" + (f"default {default}\n" if default else "") + "editor no\n")
    for r in releases:
        (loader / "entries" / f"{MACHINE_ID}-{r}.conf").write_text(
            f"title Debian GNU/Linux 12 (bookworm)\nversion {r}\nmachine-id {MACHINE_ID}\nsort-key debian\n"
            f"options root=UUID=1234 ro\nlinux /{MACHINE_ID}/{r}/linux\ninitrd /{MACHINE_ID}/{r}/initrd.img-{r}\n")
    return loader


LOADER = bootloader.LOADER_GUID


# -- which loader ---------------------------------------------------------------------
def test_a_debian_grub_is_grub_and_its_default_is_read_through_the_submenu(tmp_path):
    debian_grub(tmp_path)
    ld = bootloader.detect(tmp_path)
    assert ld.kind == "grub" and ld.cfg == tmp_path / "boot/grub/grub.cfg"
    d = ld.default()
    assert (d["loader"], d["entry"], d["release"]) == ("grub", "0", "6.1.0-57-amd64")
    assert "set default=\"0\"" in d["how"] and "'Debian GNU/Linux'" in d["how"]
    # an index path, an id path and a title path each name an entry inside the submenu
    for ref, release in (("1>0", "6.12.0-nt"), ("gnulinux-advanced-1234>gnulinux-6.12.0-advanced-1234", "6.12.0"),
                         ("Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.12.0-nt", "6.12.0-nt")):
        debian_grub(tmp_path, default=ref)
        assert bootloader.detect(tmp_path).default()["release"] == release, ref


def test_grubs_saved_entry_is_read_from_grubenv(tmp_path):
    debian_grub(tmp_path, default="${saved_entry}", saved="gnulinux-advanced-1234>gnulinux-6.12.0-nt-advanced-1234")
    d = bootloader.detect(tmp_path).default()
    assert d["release"] == "6.12.0-nt" and "grubenv has saved_entry=" in d["how"]
    debian_grub(tmp_path, default="${saved_entry}")          # nothing saved: grub boots entry 0
    d = bootloader.detect(tmp_path).default()
    assert d["release"] == "6.1.0-57-amd64" and "does not set" in d["how"]


def test_a_grub_default_naming_no_entry_is_said_not_guessed(tmp_path):
    debian_grub(tmp_path, default="gnulinux-7.0-advanced-1234")
    d = bootloader.detect(tmp_path).default()
    assert d["release"] is None and d["entry"] is None and "names no entry of its menu" in d["how"]
    debian_grub(tmp_path, default="2")                       # UEFI Firmware Settings: no kernel
    d = bootloader.detect(tmp_path).default()
    assert d["release"] is None and "boots no kernel" in d["how"]


def test_a_fedora_grub_runs_blscfg_over_the_loader_entries(tmp_path):
    fedora_grub(tmp_path, saved=f"{MACHINE_ID}-6.9.12-200.fc40.x86_64")
    ld = bootloader.detect(tmp_path)
    assert ld.kind == "grub-bls" and "runs blscfg" in ld.how
    d = ld.default()
    assert (d["entry"], d["release"]) == (f"{MACHINE_ID}-6.9.12-200.fc40.x86_64", "6.9.12-200.fc40.x86_64")
    # the one-shot id is the .conf file's stem, as grub2-reboot takes it
    assert ld.entry_for("6.10.3-200.fc40.x86_64") == f"{MACHINE_ID}-6.10.3-200.fc40.x86_64"
    with pytest.raises(UsageError, match="no boot entry for 6.11.0 in .*boot/loader/entries"):
        ld.entry_for("6.11.0")


def test_blscfg_lists_the_highest_version_first_so_entry_0_is_the_newest(tmp_path):
    # 6.10 sorts after 6.9 as versions (not as text): with no saved_entry grub boots entry 0, the 6.10 kernel
    fedora_grub(tmp_path, saved=None)
    d = bootloader.detect(tmp_path).default()
    assert d["release"] == "6.10.3-200.fc40.x86_64" and "grub boots entry 0" in d["how"]


def test_systemd_boot_named_by_loaderinfo_wins_over_grub_leftovers(tmp_path):
    debian_grub(tmp_path)                      # left from before the machine moved to systemd-boot
    sdboot(tmp_path, default=f"{MACHINE_ID}-6.1.0-57-amd64.conf")
    efivar(tmp_path, "LoaderInfo", LOADER, utf16("systemd-boot 252.39-1~deb12u1"))
    ld = bootloader.detect(tmp_path)
    assert ld.kind == "systemd-boot" and "LoaderInfo names systemd-boot 252" in ld.how
    assert any("grub is not driven" in n for n in ld.notes)
    assert ld.entry_for("6.12.0-nt") == f"{MACHINE_ID}-6.12.0-nt.conf"
    assert ld.oneshot_cmd("x.conf") == ["bootctl", "set-oneshot", "x.conf"]
    assert ld.clear_cmd() is None                  # no LoaderEntryOneShot: nothing pending
    efivar(tmp_path, "LoaderEntryOneShot", LOADER, utf16("x.conf"))
    assert ld.clear_cmd() == ["bootctl", "set-oneshot", ""]
    d = ld.default()
    assert (d["loader"], d["release"]) == ("systemd-boot", "6.1.0-57-amd64")


def test_systemd_boots_default_the_efi_variable_then_loader_conf_then_saved(tmp_path):
    sdboot(tmp_path, default=f"{MACHINE_ID}-*")            # a glob: the highest version of those matching
    ld = bootloader.detect(tmp_path)
    assert ld.kind == "systemd-boot" and "no LoaderInfo" in ld.how
    d = ld.default()
    assert d["release"] == "6.12.0-nt" and "of 2 matching" in d["how"]
    efivar(tmp_path, "LoaderEntryDefault", LOADER, utf16(f"{MACHINE_ID}-6.1.0-57-amd64.conf"))
    d = bootloader.detect(tmp_path).default()
    assert d["release"] == "6.1.0-57-amd64" and "LoaderEntryDefault" in d["how"]
    (tmp_path / "sys/firmware/efi/efivars" / f"LoaderEntryDefault-{LOADER}").unlink()
    sdboot(tmp_path, default="@saved")
    assert bootloader.detect(tmp_path).default()["release"] is None          # nothing saved yet: not guessed
    efivar(tmp_path, "LoaderEntryLastBooted", LOADER, utf16(f"{MACHINE_ID}-6.12.0-nt.conf"))
    assert bootloader.detect(tmp_path).default()["release"] == "6.12.0-nt"
    sdboot(tmp_path, default=None)
    d = bootloader.detect(tmp_path).default()
    assert d["release"] is None and "cannot tell what a reset boots" in d["how"]


@pytest.mark.parametrize("layout, said", [
    ("both", "no LoaderInfo EFI variable says which boots"),
    ("refind", "LoaderInfo names 'rEFInd 0.14'"),
    ("none", "no grub.cfg"),
])
def test_a_loader_that_cannot_be_told_or_driven_is_refused_for_reboot(tmp_path, layout, said):
    if layout == "both":
        debian_grub(tmp_path)
        sdboot(tmp_path, default=None, esp="boot/efi")
    elif layout == "refind":
        efivar(tmp_path, "LoaderInfo", LOADER, utf16("rEFInd 0.14"))
    ld = bootloader.detect(tmp_path)
    assert ld.kind == "unknown" and said in ld.how
    assert ld.default()["release"] is None
    with pytest.raises(CapabilityError) as e:
        bootloader.check_reboot(ld, {"base": "6.1.0-57-amd64"}, run=None)
    assert e.value.exit_code == 3 and said in str(e.value) and "\n" not in str(e.value)


def test_reboot_readiness_per_loader(tmp_path, monkeypatch):
    fedora_grub(tmp_path, saved=None)
    have = {"grub2-reboot"}
    monkeypatch.setattr(bootloader.shutil, "which", lambda name: f"/usr/sbin/{name}" if name in have else None)
    found, entries = bootloader.check_reboot(bootloader.detect(tmp_path),
                                             {"base": "6.9.12-200.fc40.x86_64", "patched": "6.10.3-200.fc40.x86_64"},
                                             run=None)
    assert entries == {"base": f"{MACHINE_ID}-6.9.12-200.fc40.x86_64",
                       "patched": f"{MACHINE_ID}-6.10.3-200.fc40.x86_64"}
    assert any("grub2-reboot" in line for line in found)
    have.clear()
    with pytest.raises(CapabilityError, match="no grub-reboot or grub2-reboot"):
        bootloader.check_reboot(bootloader.detect(tmp_path), {"base": "6.9.12-200.fc40.x86_64"}, run=None)
    sd = tmp_path / "sd"
    sdboot(sd, default=None)
    efivar(sd, "LoaderInfo", LOADER, utf16("systemd-boot 252"))
    with pytest.raises(CapabilityError, match="no bootctl"):
        bootloader.check_reboot(bootloader.detect(sd), {"base": "6.12.0-nt"}, run=None)
    have.add("bootctl")
    found, entries = bootloader.check_reboot(bootloader.detect(sd), {"patched": "6.12.0-nt"}, run=None)
    assert entries == {"patched": f"{MACHINE_ID}-6.12.0-nt.conf"}
    with pytest.raises(UsageError, match="no boot entry for 6.13.0"):
        bootloader.check_reboot(bootloader.detect(sd), {"patched": "6.13.0"}, run=None)


# -- Booter on these layouts ---------------------------------------------------------
class Recorder:
    def __init__(self, fail=False):
        self.cmds, self.fail = [], fail

    def __call__(self, cmd, timeout=120):
        self.cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 1 if self.fail else 0, "", "Failed to set one-shot\n" if self.fail else "")


def test_a_reboot_boot_uses_the_loader_in_charge(tmp_path, monkeypatch):
    monkeypatch.setattr(bootloader.shutil, "which", lambda name: f"/usr/sbin/{name}" if name != "grub-reboot" else None)
    fedora_grub(tmp_path / "fedora", saved=None)
    env = tmp_path / "fedora/boot/grub2/grubenv"

    class Grub2Reboot(Recorder):      # grub2-reboot's write, as grub2-editenv makes it
        def __call__(self, cmd, timeout=120):
            if cmd[0].endswith("grub2-reboot"):
                env.write_text(f"# GRUB Environment Block\nnext_entry={cmd[1]}\n")
            return super().__call__(cmd, timeout)
    r = Grub2Reboot()
    boot.Booter("reboot", run=r, root=tmp_path / "fedora").boot({"image": "/boot/vmlinuz-6.10"}, "", "id-6.10")
    assert r.cmds == [["/usr/sbin/grub2-reboot", "id-6.10"], ["systemctl", "--no-block", "reboot"]]
    sd = tmp_path / "sd"
    sdboot(sd, default=None)
    efivar(sd, "LoaderInfo", LOADER, utf16("systemd-boot 252"))
    debian_grub(sd)                                         # leftovers: not driven
    r = Recorder()
    b = boot.Booter("reboot", run=r, root=sd)
    b.boot({"image": "/x"}, "", f"{MACHINE_ID}-6.12.0-nt.conf")
    assert r.cmds == [["bootctl", "set-oneshot", f"{MACHINE_ID}-6.12.0-nt.conf"], ["systemctl", "--no-block", "reboot"]]
    r.cmds.clear()
    assert b.clear() == [] and r.cmds == []          # no one-shot entry pending (LoaderEntryOneShot unset)
    efivar(sd, "LoaderEntryOneShot", LOADER, utf16(f"{MACHINE_ID}-6.12.0-nt.conf"))
    assert b.clear() == ['bootctl set-oneshot ""'] and r.cmds == [["bootctl", "set-oneshot", ""]]
    bad = boot.Booter("reboot", run=Recorder(fail=True), root=sd).clear()
    assert len(bad) == 1 and bad[0].startswith(boot.NOT_CLEARED) and "Failed to set one-shot" in bad[0]


def test_a_reboot_where_no_loader_can_be_driven_runs_nothing(tmp_path):
    r = Recorder()
    with pytest.raises(RuntimeError, match="cannot set a one-shot boot entry: no grub.cfg"):
        boot.Booter("reboot", run=r, root=tmp_path).boot({"image": "/x"}, "", "some-entry")
    assert r.cmds == [] and boot.Booter("reboot", run=r, root=tmp_path).clear() == []


# -- Secure Boot, lockdown, signatures ------------------------------------------------
def pe_image(path: Path, signed: bool, pe32plus: bool = True) -> Path:
    """An EFI-stub kernel's PE header as a bzImage carries it (MZ at 0, the PE
    header at 0x40), with or without a certificate table (data directory 4)."""
    data = bytearray(path.read_bytes() if path.exists() else bytes(0x400))
    data[0:2] = b"MZ"
    struct.pack_into("<I", data, 0x3C, 0x40)
    data[0x40:0x44] = b"PE\0\0"
    opt = 0x40 + 24
    struct.pack_into("<H", data, opt, 0x20B if pe32plus else 0x10B)
    count_at, dirs_at = (opt + 108, opt + 112) if pe32plus else (opt + 92, opt + 96)
    struct.pack_into("<I", data, count_at, 16)
    struct.pack_into("<II", data, dirs_at + 4 * 8, 0x9000 if signed else 0, 0x5A8 if signed else 0)
    path.write_bytes(bytes(data))
    return path


def test_a_certificate_table_is_what_makes_an_image_signed(tmp_path):
    assert bootloader.pe_signed(pe_image(tmp_path / "s", signed=True)) is True
    assert bootloader.pe_signed(pe_image(tmp_path / "u", signed=False)) is False
    assert bootloader.pe_signed(pe_image(tmp_path / "s32", signed=True, pe32plus=False)) is True
    (tmp_path / "raw").write_bytes(b"\0" * 0x400)
    assert bootloader.pe_signed(tmp_path / "raw") is None


def test_secure_boot_and_lockdown_are_read_from_efivars_and_securityfs(tmp_path):
    assert bootloader.secure_boot(tmp_path) is None and bootloader.lockdown(tmp_path) is None
    efivar(tmp_path, "SecureBoot", bootloader.GLOBAL_GUID, b"\x01")
    assert bootloader.secure_boot(tmp_path) is True
    efivar(tmp_path, "SecureBoot", bootloader.GLOBAL_GUID, b"\x00")
    assert bootloader.secure_boot(tmp_path) is False
    (tmp_path / "sys/kernel/security").mkdir(parents=True)
    (tmp_path / "sys/kernel/security/lockdown").write_text("none [integrity] confidentiality\n")
    assert bootloader.lockdown(tmp_path) == "integrity"


def test_kexec_loads_with_kexec_file_load_under_lockdown(tmp_path):
    (tmp_path / "sys/kernel/security").mkdir(parents=True)
    (tmp_path / "sys/kernel/security/lockdown").write_text("[none] integrity confidentiality\n")
    r = Recorder()
    boot.Booter("kexec", run=r, root=tmp_path).boot({"image": "/b/nt"}, "root=x")
    assert r.cmds[0] == ["kexec", "-l", "/b/nt", "--command-line=root=x"]
    (tmp_path / "sys/kernel/security/lockdown").write_text("none [integrity] confidentiality\n")
    r = Recorder()
    boot.Booter("kexec", run=r, root=tmp_path).boot({"image": "/b/nt"}, "root=x")
    assert r.cmds[0] == ["kexec", "-l", "-s", "/b/nt", "--command-line=root=x"]


def test_a_grub_entry_is_found_by_its_linux_line_where_its_title_does_not_name_the_release():
    cfg = """\
menuentry 'Lab kernel (patched)' --class gnu-linux --id 'lab-nt' {
	linux	/boot/vmlinuz-7.2.13-nt root=/dev/vda ro
}
menuentry 'Lab kernel (patched, recovery)' --id 'lab-nt-recovery' {
	linux	/boot/vmlinuz-7.2.13-nt root=/dev/vda ro single
}
"""
    assert bootloader.grub_entry_id(cfg, "7.2.13-nt") == "lab-nt"
    assert bootloader.grub_entry_id(DEBIAN_GRUB_CFG, "6.1.0-57-amd64") == "gnulinux-simple-1234"
    with pytest.raises(UsageError, match="no entry for Linux 7.2.13 "):
        bootloader.grub_entry_id(cfg, "7.2.13")


def test_systemd_boots_entry_id_is_the_file_name_in_lower_case_less_its_boot_counter(tmp_path):
    # systemd-boot lower-cases each entry's id and drops the boot-counting suffix (+LEFT-DONE) from it
    loader = sdboot(tmp_path, default="Debian-6.12.0-NT.conf", releases=())
    (loader / "entries" / "Debian-6.12.0-NT+3-0.conf").write_text("title Debian\nversion 6.12.0-nt\n"
                                                                   "linux /debian/6.12.0-nt/linux\n")
    ld = bootloader.detect(tmp_path)
    assert ld.entry_for("6.12.0-nt") == "debian-6.12.0-nt.conf"
    assert ld.default()["release"] == "6.12.0-nt"
