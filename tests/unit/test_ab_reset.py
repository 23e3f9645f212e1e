# SPDX-License-Identifier: Apache-2.0
"""The loop's reset path (nttrace.ab.reset) on laid-out machines: a
/sys/class/watchdog tree with the device's driver and module links, /dev
nodes, /proc/cmdline texts, /proc/sys values; the drop-ins written under a
tmp root and removed again with the values from before put back."""
import argparse
import subprocess

import pytest

from nttrace.ab import kernels, reset, unit
from nttrace.errors import CapabilityError, UsageError


def args(**kw):
    base = dict(cmdline=None, no_watchdog=False)
    base.update(kw)
    return argparse.Namespace(**base)


def machine(root, cmdline="BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1 ro quiet", watchdogs=(), sysctls=None):
    """A root with /proc/cmdline, /proc/sys/kernel values and watchdogs laid
    out as the kernel shows them: /sys/class/watchdog/watchdogN with
    identity, timeout, max_timeout and nowayout, `device` linking to the
    device, whose `driver` links to the driver, whose `module` links to
    /sys/module/NAME (a PCI watchdog), and /dev/watchdogN."""
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/cmdline").write_text(cmdline + "\n")
    sysctls = {"panic": "0", "panic_on_oops": "0", "softlockup_panic": "0", "hung_task_panic": "0"} \
        if sysctls is None else sysctls
    (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    for k, v in sysctls.items():
        (root / "proc/sys/kernel" / k).write_text(v + "\n")
    (root / "dev").mkdir(exist_ok=True)
    for n, w in enumerate(watchdogs):
        n = w.get("n", n)
        dev = root / f"sys/devices/pci0000:00/0000:00:0{n + 4}.0"
        # a driver that registers its watchdog without a parent (i6300esb):
        # a virtual device, no `device` link; its module lists the driver
        d = (dev / "watchdog" if w.get("parent", True) else root / "sys/devices/virtual/watchdog") / f"watchdog{n}"
        d.mkdir(parents=True)
        if w.get("sysfs", True):     # CONFIG_WATCHDOG_SYSFS: the attributes
            (d / "identity").write_text(w["identity"] + "\n")
            (d / "timeout").write_text("30\n")
            if "max_timeout" in w:
                (d / "max_timeout").write_text(f"{w['max_timeout']}\n")
            (d / "nowayout").write_text("1\n" if w.get("nowayout") else "0\n")
        drv = root / "sys/bus/pci/drivers" / w["driver"]
        drv.mkdir(parents=True, exist_ok=True)
        if w.get("parent", True):
            (d / "device").symlink_to(dev)
            dev.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(drv)
        if w.get("module"):
            mod = root / "sys/module" / w["module"]
            mod.mkdir(parents=True, exist_ok=True)
            if not (drv / "module").exists():
                (drv / "module").symlink_to(mod)
            (mod / "drivers").mkdir(exist_ok=True)
            if not (mod / "drivers" / f"pci:{w['driver']}").exists():
                (mod / "drivers" / f"pci:{w['driver']}").symlink_to(drv)
        (root / "sys/class/watchdog").mkdir(parents=True, exist_ok=True)
        (root / "sys/class/watchdog" / f"watchdog{n}").symlink_to(d)
        if w.get("node", True):
            (root / "dev" / f"watchdog{n}").write_text("")
    return root


ESB = {"identity": "i6300ESB timer", "driver": "i6300ESB", "module": "i6300esb"}
ITCO = {"identity": "iTCO_wdt", "driver": "iTCO_wdt", "module": "iTCO_wdt", "max_timeout": 613}
SOFTDOG = {"identity": "Software Watchdog", "driver": "softdog", "module": "softdog"}


def test_the_panic_settings_are_added_unless_the_users_command_line_sets_them(tmp_path):
    root = machine(tmp_path, watchdogs=[ESB])
    r = reset.plan_reset(args(), {}, "kexec", root)
    assert r["cmdline_added"] == ["panic=10", "oops=panic", "softlockup_panic=1", "hung_task_panic=1",
                                  "nmi_watchdog=panic", "sysctl.kernel.panic_on_rcu_stall=1"]
    assert r["sysctl"] == {"kernel.panic": "10", "kernel.panic_on_oops": "1", "kernel.softlockup_panic": "1",
                           "kernel.hung_task_panic": "1", "kernel.hardlockup_panic": "1",
                           "kernel.panic_on_rcu_stall": "1"}
    assert r["text"].startswith("a panic reboots after 10 s (panic=10); ")
    # the user's own values win, as the parameter or in its sysctl.kernel.* form, and the sysctl drop-in
    # leaves them alone too
    r = reset.plan_reset(args(cmdline="root=/dev/vda panic=-1 sysctl.kernel.hung_task_panic=0 nmi_watchdog=0"), {},
                         "kexec", root)
    assert r["cmdline_added"] == ["oops=panic", "softlockup_panic=1", "sysctl.kernel.panic_on_rcu_stall=1"]
    assert set(r["sysctl"]) == {"kernel.panic_on_oops", "kernel.softlockup_panic", "kernel.panic_on_rcu_stall"}
    assert r["kept"] == ["nmi_watchdog=0", "panic=-1", "sysctl.kernel.hung_task_panic=0"]
    assert r["text"].startswith("a panic reboots at once (panic=-1, the command line's); ")
    r = reset.plan_reset(args(cmdline="root=/dev/vda panic=0"), {}, "kexec", root)
    assert r["text"].startswith("a panic does not reboot (panic=0, the command line's)")


def test_via_reboot_without_grub_adds_nothing_and_says_what_sysctl_cannot_cover(tmp_path):
    root = machine(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro oops=panic", watchdogs=[ESB])
    r = reset.plan_reset(args(), {}, "reboot", root)
    assert r["cmdline_added"] == [] and r["grub_cmdline_added"] == []
    assert set(r["sysctl"]) == {"kernel.panic", "kernel.softlockup_panic", "kernel.hung_task_panic",
                                "kernel.hardlockup_panic", "kernel.panic_on_rcu_stall"}
    assert r["text"].startswith("a panic reboots after 10 s (kernel.panic=10 once sysctl has run); ")
    assert any("a panic before systemd-sysctl runs at a --via reboot boot reboots only where the boot entry's own "
               "command line says panic=" in line for line in r["not_covered"])


DEBIAN_GRUB_CFG = """### BEGIN /etc/grub.d/10_linux ###
set default="0"
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
fi
menuentry 'Debian GNU/Linux' --class debian $menuentry_id_option 'gnulinux-simple-x' {
	linux	/boot/vmlinuz-6.1.0 root=UUID=x ro quiet
}
"""


def test_via_reboot_through_debian_grub_puts_the_panic_settings_on_every_entry(tmp_path):
    """A kernel that panics in its initramfs, before any sysctl, reboots only
    if panic= is on its own command line: with --via reboot that is grub's
    entry's. The loop gives every entry the settings through Debian's
    /etc/default/grub.d and grub-mkconfig, and takes them away at its end
    (fails if a --via reboot loop relies on the sysctl drop-in alone)."""
    root = machine(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro oops=panic", watchdogs=[ESB])
    (root / "boot/grub").mkdir(parents=True)
    (root / "boot/grub/grub.cfg").write_text(DEBIAN_GRUB_CFG)
    r = reset.plan_reset(args(), {}, "reboot", root)
    assert r["cmdline_added"] == []            # no kexec command line: grub's entries carry them
    assert r["grub_cmdline_added"] == ["panic=10", "softlockup_panic=1", "hung_task_panic=1", "nmi_watchdog=panic",
                                       "sysctl.kernel.panic_on_rcu_stall=1"]
    assert r["text"].startswith("a panic reboots after 10 s (panic=10); ")
    assert not any("before systemd-sysctl" in line for line in r["not_covered"])
    assert any(line.startswith("/etc/default/grub.d/nttrace-ab-mine.cfg: every grub entry's command line gains "
                               "panic=10 ") for line in reset.changes("mine", r)), reset.changes("mine", r)
    ran = []

    def run(cmd):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    reset.arm("mine", r, root, Systemctl(), run)
    drop = root / "etc/default/grub.d/nttrace-ab-mine.cfg"
    assert ('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX panic=10 softlockup_panic=1 hung_task_panic=1 '
            'nmi_watchdog=panic sysctl.kernel.panic_on_rcu_stall=1"') in drop.read_text().splitlines()
    assert ran == [["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]]
    done = reset.disarm("mine", root, Systemctl(), run)
    assert not drop.exists() and ran[-1] == ["grub-mkconfig", "-o", "/boot/grub/grub.cfg"] and len(ran) == 2
    assert done[0] == f"removed {drop} (grub-mkconfig -o /boot/grub/grub.cfg)"


def test_the_watchdog_is_found_through_sysfs_its_module_through_the_drivers_link(tmp_path):
    root = machine(tmp_path, watchdogs=[ESB])
    r = reset.plan_reset(args(), {}, "kexec", root)
    assert r["watchdog"] == {"device": "/dev/watchdog0", "identity": "i6300ESB timer", "driver": "i6300ESB",
                             "module": "i6300esb", "nowayout": False, "runtime_s": 60, "reboot_s": 600,
                             "kexec_s": 300}
    assert r["text"] == ("a panic reboots after 10 s (panic=10); a hang is reset by i6300ESB timer (/dev/watchdog0) "
                         "after 60 s (300 s from a kexec until the next kernel's systemd pets it)")
    assert r["not_covered"][0] == ("a hang after the next kernel's watchdog driver has loaded and before its systemd "
                                   "arms the watchdog again (a driver may stop the timer when it loads, as i6300esb "
                                   "does)")
    assert reset.system_conf_text("mine", r["watchdog"]).splitlines()[1:] == \
        ["[Manager]", "RuntimeWatchdogSec=60", "RebootWatchdogSec=600", "KExecWatchdogSec=300"]


def test_a_watchdog_registered_without_a_parent_is_found_by_its_drivers_identity(tmp_path):
    """i6300esb registers its watchdog with no parent device: sysfs gives
    /sys/devices/virtual/watchdog/watchdog0, no `device` link, and the
    module is found through /sys/module/i6300esb/drivers/pci:i6300ESB timer."""
    esb = dict(ESB, driver="i6300ESB timer", parent=False)
    w = reset.plan_reset(args(), {}, "kexec", machine(tmp_path, watchdogs=[esb]))["watchdog"]
    assert (w["device"], w["driver"], w["module"]) == ("/dev/watchdog0", "i6300ESB timer", "i6300esb")
    other = dict(esb, identity="another timer")     # no loaded module's driver bears its identity
    r = reset.plan_reset(args(), {}, "kexec", machine(tmp_path / "other", watchdogs=[other]))
    assert r["watchdog"] is None and any("no driver named in sysfs" in line for line in r["passed_over"])


def test_a_kernel_without_watchdog_attributes_says_so_and_what_to_do(tmp_path):
    """A kernel built without CONFIG_WATCHDOG_SYSFS (the lab's loop kernels):
    /sys/class/watchdog/watchdog0 has no identity, and i6300esb has no
    parent device, so nothing names its driver: start says why, and where
    to start from instead."""
    esb = dict(ESB, driver="i6300ESB timer", parent=False, sysfs=False)
    r = reset.plan_reset(args(), {}, "kexec", machine(tmp_path, watchdogs=[esb]))
    assert r["watchdog"] is None
    assert r["passed_over"] == ["/dev/watchdog0: this kernel exposes no watchdog attributes (no identity, timeout: "
                                "CONFIG_WATCHDOG_SYSFS is not set), so its driver cannot be named; start the loop "
                                "from a kernel that sets it (distribution kernels do)"]
    _found, refusals = reset.check(r, {})
    assert [type(e) for e in refusals] == [CapabilityError] and "CONFIG_WATCHDOG_SYSFS" in str(refusals[0])


def test_timeouts_are_bounded_by_the_hardware_and_a_second_device_is_named(tmp_path):
    root = machine(tmp_path, watchdogs=[dict(ITCO, n=1)])
    w = reset.plan_reset(args(), {}, "kexec", root)["watchdog"]
    assert (w["device"], w["runtime_s"], w["kexec_s"], w["reboot_s"]) == ("/dev/watchdog1", 60, 300, 600)
    assert "WatchdogDevice=/dev/watchdog1" in reset.system_conf_text("mine", w)
    root2 = machine(tmp_path / "small", watchdogs=[dict(ESB, max_timeout=120)])
    w = reset.plan_reset(args(), {}, "kexec", root2)["watchdog"]
    assert (w["runtime_s"], w["kexec_s"], w["reboot_s"]) == (60, 120, 120)


def test_softdog_and_a_watchdog_without_a_device_node_are_not_a_reset(tmp_path):
    root = machine(tmp_path, watchdogs=[SOFTDOG, dict(ESB, node=False)])
    r = reset.plan_reset(args(), {}, "kexec", root)
    assert r["watchdog"] is None and r["watchdogs_found"] == ["/dev/watchdog0", "/dev/watchdog1"]
    assert "NO WATCHDOG" in r["text"]
    found, refusals = reset.check(r, {})
    assert any("softdog" in line and "not a reset" in line for line in found)
    assert any("/dev/watchdog1 (i6300ESB timer) is in sysfs but has no device node" in line for line in found)
    assert [type(e) for e in refusals] == [CapabilityError]


def test_no_watchdog_is_refused_exit_3_unless_acknowledged(tmp_path):
    root = machine(tmp_path)
    r = reset.plan_reset(args(), {}, "kexec", root)
    found, refusals = reset.check(r, {})
    assert len(refusals) == 1 and refusals[0].exit_code == 3
    assert "no hardware watchdog" in str(refusals[0]) and "--no-watchdog" in str(refusals[0])
    r = reset.plan_reset(args(no_watchdog=True), {}, "kexec", root)
    assert reset.check(r, {}) == ([], [])
    assert r["acknowledged_no_watchdog"] is True
    assert r["text"] == ("a panic reboots after 10 s (panic=10); NO WATCHDOG: a hang needs a hand on the power "
                         "button (--no-watchdog)")
    # --no-watchdog where there is one: it is left alone, and the line says so
    r = reset.plan_reset(args(no_watchdog=True), {}, "kexec", machine(tmp_path / "wd", watchdogs=[ESB]))
    assert r["watchdog"] is None and "NO WATCHDOG (--no-watchdog: /dev/watchdog0 left alone)" in r["text"]


def _kernel(root, release, builtin=(), modules=()):
    """A kernel as kernels.Kernel.as_json() gives it, with its module tree
    /lib/modules/R: modules.builtin and modules.dep as depmod writes them,
    the .ko files present."""
    tree = root / "lib/modules" / release
    tree.mkdir(parents=True)
    (tree / "modules.builtin").write_text("".join(f"kernel/drivers/watchdog/{m}.ko\n" for m in builtin))
    dep = ""
    for m in modules:
        ko = tree / f"kernel/drivers/watchdog/{m}.ko.xz"
        ko.parent.mkdir(parents=True, exist_ok=True)
        ko.write_bytes(b"\xfd7zXZ")
        dep += f"kernel/drivers/watchdog/{m}.ko.xz:\n"
    (tree / "modules.dep").write_text(dep)
    return {"spec": release, "image": f"/boot/vmlinuz-{release}", "initrd": None, "release": release,
            "build": f"{release} (b@h) #1", "sha256": "0" * 64, "modules_dir": str(tree)}


@pytest.mark.skipif(not hasattr(kernels, "has_module"),
                    reason="kernels.has_module (issue 51's preflight, nttrace.ab.kernels) is not in this tree")
def test_a_loop_kernel_without_the_watchdogs_driver_is_refused_exit_2(tmp_path):
    root = machine(tmp_path / "m", watchdogs=[ESB])
    r = reset.plan_reset(args(), {}, "kexec", root)
    ks = {"base": _kernel(tmp_path, "6.12.0-base", modules=["i6300esb"]),
          "patched": _kernel(tmp_path, "6.12.0-nt", builtin=["i6300esb"])}
    found, refusals = reset.check(r, ks)
    assert refusals == []
    assert "the base kernel 6.12.0-base has the watchdog's driver i6300esb" in found
    assert "the patched kernel 6.12.0-nt has the watchdog's driver i6300esb" in found
    ks["patched"] = _kernel(tmp_path, "6.12.0-nt2", modules=["iTCO_wdt"])
    found, refusals = reset.check(r, ks)
    assert len(refusals) == 1 and isinstance(refusals[0], UsageError) and refusals[0].exit_code == 2
    assert str(refusals[0]).startswith("ab start: the patched kernel 6.12.0-nt2 has no i6300esb (the driver of "
                                       "i6300ESB timer, /dev/watchdog0), built in or as a module")


class Systemctl:
    """systemctl's answers: the commands asked and a return code."""

    def __init__(self, rc=0):
        self.calls, self.rc = [], rc

    def __call__(self, a):
        self.calls.append(a)
        return subprocess.CompletedProcess(["systemctl", *a], self.rc, "", "Failed to reload" if self.rc else "")


def test_arm_writes_both_drop_ins_and_disarm_removes_them_and_puts_the_values_back(tmp_path):
    root = machine(tmp_path, watchdogs=[ESB], sysctls={"panic": "0", "panic_on_oops": "0", "softlockup_panic": "0"})
    r = reset.plan_reset(args(), {}, "kexec", root)
    sc = Systemctl()
    done = reset.arm("mine", r, root, sc)
    conf = root / "etc/systemd/system.conf.d/nttrace-ab-mine.conf"
    drop = root / "etc/sysctl.d/90-nttrace-ab-mine.conf"
    assert "RuntimeWatchdogSec=60" in conf.read_text().splitlines() and oct(conf.stat().st_mode & 0o777) == "0o644"
    assert [ln for ln in drop.read_text().splitlines() if not ln.startswith("#")] == \
        ["kernel.panic = 10", "kernel.panic_on_oops = 1", "kernel.softlockup_panic = 1", "kernel.hung_task_panic = 1",
         "kernel.hardlockup_panic = 1", "kernel.panic_on_rcu_stall = 1"]
    assert (root / "proc/sys/kernel/panic").read_text() == "10\n"
    assert (root / "proc/sys/kernel/softlockup_panic").read_text() == "1\n"
    assert not (root / "proc/sys/kernel/hung_task_panic").exists()      # not in this kernel: said, not made
    assert any("no /proc/sys/kernel/hung_task_panic in this kernel" in line for line in done)
    assert sc.calls == [["daemon-reload"]]
    done = reset.disarm("mine", root, sc)
    assert not conf.exists() and not drop.exists()
    assert (root / "proc/sys/kernel/panic").read_text() == "0\n"
    assert (root / "proc/sys/kernel/panic_on_oops").read_text() == "0\n"
    assert sc.calls == [["daemon-reload"], ["daemon-reload"]]
    assert any("put back kernel.panic=0 kernel.panic_on_oops=0 kernel.softlockup_panic=0" in line for line in done)
    assert reset.disarm("mine", root, sc) == [] and len(sc.calls) == 2       # nothing there: nothing done


def test_a_second_device_is_applied_by_reexec_and_a_failed_reload_is_an_error(tmp_path):
    root = machine(tmp_path, watchdogs=[dict(ITCO, n=1)])
    r = reset.plan_reset(args(), {}, "kexec", root)
    sc = Systemctl()
    reset.arm("mine", r, root, sc)
    reset.disarm("mine", root, sc)
    assert sc.calls == [["daemon-reexec"], ["daemon-reexec"]]
    with pytest.raises(RuntimeError, match="systemctl daemon-reexec after writing"):
        reset.arm("mine", r, root, Systemctl(rc=1))
    done = reset.disarm("mine", root, Systemctl(rc=1))
    assert any("the watchdog stays armed until the next boot" in line for line in done)


def test_a_nowayout_watchdog_stays_petted_until_the_next_boot(tmp_path):
    root = machine(tmp_path, watchdogs=[dict(ESB, nowayout=True)])
    r = reset.plan_reset(args(), {}, "kexec", root)
    found, refusals = reset.check(r, {})
    assert refusals == [] and any("nowayout set: once armed it cannot be stopped" in line for line in found)
    sc = Systemctl()
    reset.arm("mine", r, root, sc)
    done = reset.disarm("mine", root, sc)
    assert sc.calls == [["daemon-reload"]]          # no reload after: systemd keeps petting it
    assert any("stays petted by systemd until the next boot" in line for line in done)


def _installed(name, unit_dir, base, sc):
    return unit.install(name, unit.dropins(name, "/usr/bin/nttrace", base / "ab", 9000, 900, ["7.2.13-nt"]),
                        unit_dir, sc, unit_dirs=())


def test_removing_the_unit_disarms_the_reset_path(tmp_path):
    root = machine(tmp_path / "root", watchdogs=[ESB])
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    sc = Systemctl()
    r = reset.plan_reset(args(), {}, "kexec", root)
    done = _installed("mine", unit_dir, tmp_path, sc)
    assert done[0].startswith("wrote the templates nttrace-ab@.service, ")      # no package installed them here
    assert sc.calls == [["daemon-reload"], ["enable", "nttrace-ab@mine.service", "nttrace-ab-deadline@mine.timer",
                                          "nttrace-ab-deadline@mine.service"]]
    reset.arm("mine", r, root, sc)
    done = unit.remove("mine", unit_dir, sc, root)
    assert not unit.installed("mine", unit_dir) and sorted(p.name for p in unit_dir.iterdir()) == []
    assert not list((root / "etc").rglob("*nttrace-ab-mine*"))
    assert done[-2].startswith("disabled nttrace-ab@mine.service") and len(done) == 4
    assert done[-1] == f"removed the templates start wrote in {unit_dir}"
    assert (root / "proc/sys/kernel/panic").read_text() == "0\n"


def test_the_templates_start_wrote_stay_while_another_loop_has_an_instance(tmp_path):
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    _installed("one", unit_dir, tmp_path, Systemctl())
    _installed("two", unit_dir, tmp_path, Systemctl())
    unit.remove("one", unit_dir, Systemctl(), tmp_path / "root")
    assert (unit_dir / "nttrace-ab@.service").exists() and unit.installed("two", unit_dir)
    unit.remove("two", unit_dir, Systemctl(), tmp_path / "root")
    assert list(unit_dir.iterdir()) == []
    # a template a package installed is the package's: never written, never removed
    pkg = tmp_path / "usr-lib"
    pkg.mkdir()
    for t in unit.TEMPLATES:
        (pkg / t).write_text("[Unit]\n")
    unit.install("three", unit.dropins("three", "/usr/bin/nttrace", tmp_path / "ab", 9000, 900, ["r"]), unit_dir,
                 Systemctl(), unit_dirs=(pkg,))
    assert sorted(p.name for p in unit_dir.iterdir()) == sorted(f"{u}.d" for u in (
        "nttrace-ab@three.service", "nttrace-ab-deadline@three.timer", "nttrace-ab-deadline@three.service"))


def test_a_removal_killed_at_any_point_leaves_the_unit_or_nothing(tmp_path):
    """The last step removes the unit with a reboot under way, which may
    kill it at any systemctl call: until the drop-ins are gone the unit
    stays (the next boot's step runs the removal again); after, nothing of
    the loop is left."""
    for killed_at in range(1, 4):      # its three calls: the watchdog reload, disable, reload
        base = tmp_path / str(killed_at)
        root = machine(base / "root", watchdogs=[ESB])
        unit_dir = base / "units"
        unit_dir.mkdir()
        r = reset.plan_reset(args(), {}, "kexec", root)
        _installed("mine", unit_dir, base, Systemctl())
        reset.arm("mine", r, root, Systemctl())
        calls = []

        def dying(argv):
            calls.append(argv)
            if len(calls) == killed_at:
                raise SystemExit(143)          # SIGTERM from the shutdown
            return subprocess.CompletedProcess(argv, 0, "", "")
        with pytest.raises(SystemExit):
            unit.remove("mine", unit_dir, dying, root)
        left = list((root / "etc").rglob("*nttrace-ab-mine*"))
        assert unit.installed("mine", unit_dir) or not left, (killed_at, calls, left)


@pytest.mark.needs("systemd-analyze")
def test_systemd_reads_the_drop_ins_where_they_are_written(tmp_path):
    """systemd's own view of the tmp root (systemd-analyze --root cat-config):
    the watchdog's drop-in is among system.conf's, the panic settings among
    sysctl.d's; after disarm neither is."""
    root = machine(tmp_path, watchdogs=[ESB])
    reset.arm("mine", reset.plan_reset(args(), {}, "kexec", root), root, Systemctl())

    def cat(what):
        p = subprocess.run(["systemd-analyze", f"--root={root}", "cat-config", what], capture_output=True, text=True)
        return p.stdout
    manager = cat("systemd/system.conf")
    assert f"# {root}/etc/systemd/system.conf.d/nttrace-ab-mine.conf" in manager
    assert "KExecWatchdogSec=300" in manager.splitlines()
    sysctl = cat("sysctl.d")
    assert f"# {root}/etc/sysctl.d/90-nttrace-ab-mine.conf" in sysctl and "kernel.panic = 10" in sysctl.splitlines()
    reset.disarm("mine", root, Systemctl())
    assert "nttrace-ab-mine" not in cat("systemd/system.conf") + cat("sysctl.d")


PLANNED = {"device": "/dev/watchdog0", "identity": "i6300ESB timer", "module": "i6300esb", "runtime_s": 60}


def test_the_watchdog_is_observed_as_this_boot_has_it(tmp_path):
    """At each boot of a loop kernel: the device there, PID 1 holding it
    open, its state and timeout where sysfs shows them, systemd's runtime
    timeout (fails if a kernel that booted without the watchdog's driver, or
    a systemd that did not arm it, passes: the kernel would run unprotected,
    and a KExecWatchdogSec timer left running would reset it as if hung)."""
    root = machine(tmp_path, watchdogs=[ESB])
    (root / "proc/1/fd").mkdir(parents=True)
    (root / "proc/1/fd/3").symlink_to("/dev/watchdog0")
    (root / "sys/class/watchdog/watchdog0/state").write_text("active\n")
    (root / "sys/class/watchdog/watchdog0/timeout").write_text("60\n")
    seen = reset.observed("/dev/watchdog0", root, runtime_usec=lambda: 60_000_000)
    assert seen == {"device": "/dev/watchdog0", "present": True, "held_by_pid1": True, "state": "active",
                    "timeout_s": 60, "systemd_runtime_s": 60.0}
    assert reset.watchdog_fault(PLANNED, seen) is None
    assert reset.watchdog_fault(None, {}) is None                           # --no-watchdog: nothing to observe
    cases = {"present": (False, "/dev/watchdog0 does not exist at this boot: its driver (i6300esb) did not load"),
             "held_by_pid1": (False, "systemd does not hold /dev/watchdog0 open at this boot"),
             "state": ("inactive", "/dev/watchdog0 is inactive at this boot, not active"),
             "systemd_runtime_s": (0.0, "systemd's RuntimeWatchdogSec is 0 s at this boot, not the loop's 60 s"),
             "timeout_s": (300, "/dev/watchdog0's timeout is 300 s at this boot, not the loop's 60 s")}
    for key, (value, why) in cases.items():
        assert reset.watchdog_fault(PLANNED, dict(seen, **{key: value})).startswith(why), key
    # a kernel without CONFIG_WATCHDOG_SYSFS: no state or timeout to read, the rest still observed
    assert reset.watchdog_fault(PLANNED, dict(seen, state=None, timeout_s=None)) is None
    (root / "proc/1/fd/3").unlink()
    assert reset.observed("/dev/watchdog0", root, runtime_usec=lambda: None)["held_by_pid1"] is False
