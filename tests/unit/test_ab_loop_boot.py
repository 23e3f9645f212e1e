# SPDX-License-Identifier: Apache-2.0
"""The boot actions' commands and checks: the command line kexec passes,
grub's one-shot entry for a release, kexec -l then -u for each kernel."""
import subprocess

import pytest

from grub_cfg import DEBIAN_GRUB_CFG
from nttrace.ab import boot, bootloader
from nttrace.errors import CapabilityError, UsageError

GRUB_CFG = DEBIAN_GRUB_CFG % {"default": "0"}


def test_the_default_command_line_drops_what_the_bootloader_adds():
    assert boot.default_cmdline("BOOT_IMAGE=/boot/vmlinuz-6.1 root=UUID=1 ro initrd=/x quiet\n") == \
        "root=UUID=1 ro quiet"


def test_grubs_entry_for_a_release_is_its_normal_one_inside_its_submenu():
    assert bootloader.grub_entry_id(GRUB_CFG, "6.12.0") == "gnulinux-advanced-1234>gnulinux-6.12.0-advanced-1234"
    assert bootloader.grub_entry_id(GRUB_CFG, "6.12.0-nt") == "gnulinux-advanced-1234>gnulinux-6.12.0-nt-advanced-1234"
    with pytest.raises(UsageError, match="no entry for Linux 6.13"):
        bootloader.grub_entry_id(GRUB_CFG, "6.13")


class Recorder:
    def __init__(self, fail_on=None):
        self.cmds = []
        self.fail_on = fail_on

    def __call__(self, cmd, timeout=120):
        self.cmds.append(cmd)
        bad = self.fail_on and self.fail_on in " ".join(cmd)
        return subprocess.CompletedProcess(cmd, 1 if bad else 0, "", "Cannot load image\n" if bad else "")


def test_each_kernel_is_loaded_then_unloaded(monkeypatch):
    monkeypatch.setattr(boot, "kexec_loaded", lambda: False)
    r = Recorder()
    ks = [{"image": "/b/base", "initrd": "/b/base.initrd"}, {"image": "/b/nt", "initrd": None}]
    boot.check_kexec(ks, "root=/dev/sda1 ro", run=r)
    assert r.cmds == [["kexec", "-l", "/b/base", "--initrd=/b/base.initrd", "--command-line=root=/dev/sda1 ro"],
                      ["kexec", "-u"], ["kexec", "-l", "/b/nt", "--command-line=root=/dev/sda1 ro"], ["kexec", "-u"]]


def test_a_kernel_kexec_cannot_load_is_refused_and_nothing_left_loaded(monkeypatch):
    monkeypatch.setattr(boot, "kexec_loaded", lambda: False)
    r = Recorder(fail_on="/b/nt")
    with pytest.raises(CapabilityError, match="kexec cannot load /b/nt: Cannot load image"):
        boot.check_kexec([{"image": "/b/base"}, {"image": "/b/nt"}], "root=x", run=r)
    assert r.cmds[-1] == ["kexec", "-u"]


def test_a_kernel_someone_else_loaded_is_left_alone(monkeypatch):
    monkeypatch.setattr(boot, "kexec_loaded", lambda: True)
    r = Recorder()
    with pytest.raises(UsageError, match="already loaded"):
        boot.check_kexec([{"image": "/b/base"}], "root=x", run=r)
    assert r.cmds == []


def test_a_boot_by_kexec_loads_then_asks_systemd(monkeypatch):
    r = Recorder()
    boot.Booter("kexec", run=r).boot({"image": "/b/nt", "initrd": "/b/i"}, "root=x ro")
    assert r.cmds == [["kexec", "-l", "/b/nt", "--initrd=/b/i", "--command-line=root=x ro"],
                      ["systemctl", "--no-block", "kexec"]]


def grub_root(tmp_path):
    """A machine whose /boot/grub/grub.cfg is GRUB_CFG (Debian's grub)."""
    (tmp_path / "boot/grub").mkdir(parents=True)
    (tmp_path / "boot/grub/grub.cfg").write_text(GRUB_CFG)
    return tmp_path


class GrubReboot(Recorder):
    """Runs nothing; grub-reboot ENTRY writes next_entry=ENTRY into the
    machine's grubenv, as grub-editenv does (unless `writes` is False: a
    read-only /boot, where grub-reboot still exits 0)."""

    def __init__(self, env, writes=True):
        super().__init__()
        self.env, self.writes = env, writes

    def __call__(self, cmd, timeout=120):
        if cmd[0] == "grub-reboot" and self.writes:
            self.env.write_text(f"# GRUB Environment Block\nnext_entry={cmd[1]}\n")
        return super().__call__(cmd, timeout)


def test_a_boot_by_reboot_sets_grubs_one_shot_entry(monkeypatch, tmp_path):
    monkeypatch.setattr(boot.bootloader, "grub_reboot_binary", lambda: "grub-reboot")
    root = grub_root(tmp_path)
    r = GrubReboot(root / "boot/grub/grubenv")
    boot.Booter("reboot", run=r, root=root).boot({"image": "/boot/vmlinuz-6.12.0"}, "",
                                                 "gnulinux-advanced-1>gnulinux-6.12.0-x")
    assert r.cmds == [["grub-reboot", "gnulinux-advanced-1>gnulinux-6.12.0-x"], ["systemctl", "--no-block", "reboot"]]


def test_a_one_shot_entry_grub_did_not_take_is_an_error_not_a_reboot(monkeypatch, tmp_path):
    """grub-reboot exits 0 whatever grub-editenv did: under a sandbox that
    left /boot read-only the lab's series loop rebooted into the default
    kernel again and again. The entry is read back; where it is not there
    the boot is refused (the loop stops with why), nothing is rebooted. The
    mutation it catches: the read-back dropped (a reboot is issued)."""
    monkeypatch.setattr(boot.bootloader, "grub_reboot_binary", lambda: "grub-reboot")
    root = grub_root(tmp_path)
    (root / "boot/grub/grubenv").write_text("# GRUB Environment Block\nnext_entry=\n")
    r = GrubReboot(root / "boot/grub/grubenv", writes=False)
    with pytest.raises(RuntimeError, match=r"one-shot entry e-6.12 was not set: .*grubenv holds next_entry=$"):
        boot.Booter("reboot", run=r, root=root).boot({"image": "/boot/vmlinuz-6.12.0"}, "", "e-6.12")
    assert ["systemctl", "--no-block", "reboot"] not in r.cmds
    (root / "boot/grub/grubenv").unlink()
    with pytest.raises(RuntimeError, match="grubenv cannot be read"):
        boot.Booter("reboot", run=r, root=root).boot({"image": "/boot/vmlinuz-6.12.0"}, "", "e-6.12")


def test_a_failed_boot_command_raises_with_its_message():
    with pytest.raises(RuntimeError, match="kexec -l failed: Cannot load image"):
        boot.Booter("kexec", run=Recorder(fail_on="kexec -l")).boot({"image": "/b/nt"}, "root=x")


def test_a_grub_cfg_that_ignores_the_one_shot_entry_is_exit_3_in_one_line(tmp_path):
    cfg = tmp_path / "grub.cfg"
    cfg.write_text("menuentry 'x' { linux /vmlinuz }\n")
    with pytest.raises(CapabilityError) as e:
        bootloader.check_grub_oneshot(cfg, "/usr/sbin/grub-reboot", run=None)
    assert e.value.exit_code == 3 and "\n" not in str(e.value) and "does not read grub's next_entry" in str(e.value)
    cfg.write_text(GRUB_CFG)
    bootloader.check_grub_oneshot(cfg, "/usr/sbin/grub-reboot", run=lambda cmd, timeout=120:
                                  subprocess.CompletedProcess(cmd, 1, "", ""))     # grub-probe cannot tell: not refused


def test_a_kernel_without_kexec_is_exit_3(tmp_path):
    with pytest.raises(CapabilityError, match="built without CONFIG_KEXEC"):
        boot.kexec_supported(tmp_path / "kexec_loaded")
    (tmp_path / "kexec_loaded").write_text("0\n")
    boot.kexec_supported(tmp_path / "kexec_loaded")
    assert boot.kexec_loaded(tmp_path / "kexec_loaded") is False


def test_clearing_says_so_when_a_kexec_kernel_or_grubs_one_shot_entry_could_not_be_cleared(monkeypatch, tmp_path):
    monkeypatch.setattr(boot, "kexec_loaded", lambda *path: True)
    monkeypatch.setattr(boot.shutil, "which", lambda name: f"/sbin/{name}")
    root = grub_root(tmp_path)
    r = Recorder()
    ok = boot.Booter("reboot", run=r, root=root).clear()
    assert ok == ["kexec -u", "grub-editenv unset next_entry"]
    assert r.cmds[1] == ["/sbin/grub-editenv", str(root / "boot/grub/grubenv"), "unset", "next_entry"]
    bad = boot.Booter("reboot", run=Recorder(fail_on="-"), root=root).clear()
    assert len(bad) == 2 and all(line.startswith(boot.NOT_CLEARED) for line in bad)
    assert "Cannot load image" in bad[0] and boot.all_cleared(ok) and not boot.all_cleared(bad)


def test_a_reboot_without_a_grub_entry_is_refused_not_sent_to_grub_reboot(monkeypatch, tmp_path):
    monkeypatch.setattr(boot.bootloader, "grub_reboot_binary", lambda: "grub-reboot")
    r = Recorder()
    with pytest.raises(RuntimeError, match="no boot entry recorded for 6.12.0"):
        boot.Booter("reboot", run=r, root=grub_root(tmp_path)).boot({"image": "/boot/vmlinuz-6.12.0", "release": "6.12.0"}, "", None)
    assert r.cmds == []


@pytest.mark.parametrize("fs,abstraction,refused", [("ext2", "", None), ("btrfs", "", "btrfs"),
                                                    ("ext2", "lvm", "lvm"), ("ext2", "diskfilter mdraid1x", "diskfilter")])
def test_reboot_where_grub_cannot_clear_its_one_shot_entry_at_boot_is_exit_3(monkeypatch, tmp_path, fs, abstraction,
                                                                             refused):
    # grub's save_env cannot write grubenv on LVM, RAID or a checksumming filesystem: next_entry would stay
    # set, and a kernel that panics at boot would be booted again and again, never the default
    cfg = tmp_path / "grub.cfg"
    cfg.write_text(GRUB_CFG)
    monkeypatch.setattr(bootloader.shutil, "which", lambda name: f"/usr/sbin/{name}")

    def probe(cmd, timeout=120):
        out = fs if cmd[1] == "--target=fs" else abstraction
        return subprocess.CompletedProcess(cmd, 0, out + "\n", "")
    if refused is None:
        bootloader.check_grub_oneshot(cfg, "/usr/sbin/grub-reboot", run=probe)
        return
    with pytest.raises(CapabilityError) as e:
        bootloader.check_grub_oneshot(cfg, "/usr/sbin/grub-reboot", run=probe)
    assert e.value.exit_code == 3 and refused in str(e.value) and "\n" not in str(e.value)
    assert "grub cannot clear its one-shot entry" in str(e.value)
