# SPDX-License-Identifier: Apache-2.0
"""Booting the next kernel, and the machine's default one.

--via kexec: `kexec -l IMAGE --initrd=INITRD --command-line=CMDLINE`, then
`systemctl --no-block kexec` (services stop as for a reboot; no firmware).
Under lockdown (Secure Boot) the kernel refuses kexec_load, so the image is
loaded with `kexec -s` (kexec_file_load, which checks its signature).
--via reboot: the bootloader's one-shot entry (bootloader.py: grub-reboot or
grub2-reboot ENTRY for grub, `bootctl set-oneshot ID` for systemd-boot),
consumed by the next boot whatever happens, then `systemctl --no-block
reboot`: the firmware runs and initialises every device.

"Default" means nothing pending: no kexec kernel loaded, no one-shot entry;
the next boot, of any kind, is the machine's default kernel.

Every command goes through `run` (subprocess.run by default) so the checks
and the boot are the same code in the tests, with the commands recorded.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from nttrace.ab import bootloader
from nttrace.ab.kernels import under
from nttrace.errors import CapabilityError, UsageError

VIAS = ("kexec", "reboot")
KEXEC_LOADED = Path("/sys/kernel/kexec_loaded")
KEXEC_DISABLED = Path("/proc/sys/kernel/kexec_load_disabled")
NOT_CLEARED = "NOT CLEARED: "


def all_cleared(done: list[str]) -> bool:
    """Booter.clear()'s lines say nothing is left pending."""
    return not any(line.startswith(NOT_CLEARED) for line in done)


def default_cmdline(proc_cmdline: str) -> str:
    """The running kernel's command line less what the bootloader adds for
    itself (BOOT_IMAGE=, initrd=): what kexec passes unless --cmdline says."""
    return " ".join(w for w in proc_cmdline.split() if not w.startswith(("BOOT_IMAGE=", "initrd=")))


def _run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _last_line(p: subprocess.CompletedProcess) -> str:
    lines = (p.stderr or p.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {p.returncode}"


# -- kexec ---------------------------------------------------------------------
def kexec_supported(path: Path = KEXEC_LOADED) -> None:
    """The running kernel can kexec (CONFIG_KEXEC: /sys/kernel/kexec_loaded), or exit 3."""
    if not path.exists():
        raise CapabilityError(f"ab start --via kexec: this kernel cannot kexec (no {path}: built without "
                              "CONFIG_KEXEC); use --via reboot")


def kexec_binary() -> str:
    exe = shutil.which("kexec")
    if not exe:
        raise CapabilityError("ab start --via kexec: no kexec on PATH (install kexec-tools), or use --via reboot")
    return exe


def kexec_loaded(path: Path = KEXEC_LOADED) -> bool:
    try:
        return path.read_text().strip() == "1"
    except OSError:
        return False


def kexec_file_load(root: Path = Path("/")) -> bool:
    """Load with kexec_file_load (`kexec -s`): lockdown refuses kexec_load."""
    return bootloader.lockdown(root) in ("integrity", "confidentiality")


def kexec_load_cmd(kernel: dict, cmdline: str, file_load: bool = False) -> list[str]:
    return ["kexec", "-l", *(["-s"] if file_load else []), kernel["image"], *([f"--initrd={kernel['initrd']}"] if kernel.get("initrd") else []),
            f"--command-line={cmdline}"]


def check_kexec(kernels: list[dict], cmdline: str, run=_run, root: Path = Path("/")) -> list[str]:
    """Each kernel loads (kexec -l) and is unloaded again (kexec -u); returns
    what it did. A kernel already loaded by someone else is theirs: refused."""
    if kexec_loaded():
        raise UsageError("ab start: a kexec kernel is already loaded (/sys/kernel/kexec_loaded is 1); "
                         "unload it (kexec -u) first")
    try:
        if KEXEC_DISABLED.read_text().strip() == "1":
            raise CapabilityError("ab start --via kexec: kernel.kexec_load_disabled is 1 on this kernel; "
                                  "use --via reboot")
    except OSError:
        pass
    done = []
    file_load = kexec_file_load(root)
    for k in kernels:
        p = run(kexec_load_cmd(k, cmdline, file_load))
        if p.returncode != 0:
            run(["kexec", "-u"])
            why = (f" (lockdown {bootloader.lockdown(root)}: kexec_file_load takes only images signed by a key "
                   "the kernel trusts)" if file_load else "")
            raise CapabilityError(f"ab start: kexec cannot load {k['image']}: {_last_line(p)}{why}")
        u = run(["kexec", "-u"])
        if u.returncode != 0:
            raise CapabilityError(f"ab start: kexec -u failed after loading {k['image']}: {_last_line(u)}")
        done.append(f"kexec -l {'-s ' if file_load else ''}{k['image']}: loads (unloaded again)")
    return done


# -- the actions ---------------------------------------------------------------
class Booter:
    """Boots a kernel next, or clears everything pending (the default kernel
    next). `run` executes a command; the tests pass one that records, and a
    `root` laid out as a machine (/sys, /boot, the ESP)."""

    def __init__(self, via: str, run=_run, root: Path = Path("/")):
        if via not in VIAS:
            raise UsageError(f"--via {via}: kexec or reboot")
        self.via = via
        self.run = run
        self.root = root

    def _must(self, cmd: list[str]) -> None:
        p = self.run(cmd)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {_last_line(p)}")

    def boot(self, kernel: dict, cmdline: str, entry: str | None = None) -> None:
        """Boot `kernel` next: by kexec with `cmdline`, or by the bootloader's
        one-shot `entry` (start recorded it) and a reboot."""
        if self.via == "kexec":
            self._must(kexec_load_cmd(kernel, cmdline, kexec_file_load(self.root)))
            self._must(["systemctl", "--no-block", "kexec"])
        else:
            if not entry:
                raise RuntimeError(f"no boot entry recorded for {kernel.get('release') or kernel['image']}")
            loader = bootloader.detect(self.root)
            if loader.kind == "unknown":
                raise RuntimeError(f"cannot set a one-shot boot entry: {loader.how}")
            self._must(loader.oneshot_cmd(entry))
            wrong = loader.oneshot_set(entry)
            if wrong:           # rebooting now would boot the default kernel, not this one
                raise RuntimeError(f"the one-shot entry {entry} was not set: {wrong}")
            self._must(["systemctl", "--no-block", "reboot"])

    def _try(self, cmd: list[str]) -> str | None:
        """None where cmd succeeded, else why not."""
        try:
            p = self.run(cmd)
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        return None if p.returncode == 0 else _last_line(p)

    def clear(self) -> list[str]:
        """Nothing pending: unload kexec, remove the bootloader's one-shot
        entry. Returns what it did; a line starting NOT_CLEARED for what it
        could not do."""
        done = []
        if kexec_loaded(under(self.root, KEXEC_LOADED)):
            why = self._try(["kexec", "-u"]) if shutil.which("kexec") else "no kexec on PATH"
            done.append("kexec -u" if why is None else f"{NOT_CLEARED}a kexec kernel stays loaded (kexec -u: {why})")
        if self.via == "reboot":
            loader = bootloader.detect(self.root)
            cmd = loader.clear_cmd()
            if cmd is not None:
                what = "grub-editenv unset next_entry" if loader.kind != "systemd-boot" else 'bootctl set-oneshot ""'
                why = self._try(cmd)
                done.append(what if why is None else
                            f"{NOT_CLEARED}the {loader.kind} one-shot entry may stay set ({Path(cmd[0]).name}: {why})")
        return done

    def reboot_default(self) -> list[str]:
        """Clear what is pending, then reboot; returns what clear() did."""
        done = self.clear()
        if not all_cleared(done):        # a reboot now could boot what is still pending
            raise RuntimeError("; ".join(done))
        self._must(["systemctl", "--no-block", "reboot"])
        return done
