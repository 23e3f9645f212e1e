"""Booting the next kernel, and the machine's default one.

--via kexec: `kexec -l IMAGE --initrd=INITRD --command-line=CMDLINE`, then
`systemctl --no-block kexec` (services stop as for a reboot; no firmware).
--via reboot: `grub-reboot ENTRY` (grub's one-shot next_entry, consumed by
the next boot whatever happens), then `systemctl --no-block reboot`: the
firmware runs and initialises every device.

"Default" means nothing pending: no kexec kernel loaded, no one-shot grub
entry; the next boot, of any kind, is the machine's default kernel.

Every command goes through `run` (subprocess.run by default) so the checks
and the boot are the same code in the tests, with the commands recorded.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from nttrace.errors import CapabilityError, UsageError

VIAS = ("kexec", "reboot")
KEXEC_LOADED = Path("/sys/kernel/kexec_loaded")
KEXEC_DISABLED = Path("/proc/sys/kernel/kexec_load_disabled")
GRUB_CFGS = (Path("/boot/grub/grub.cfg"), Path("/boot/grub2/grub.cfg"))
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


def kexec_load_cmd(kernel: dict, cmdline: str) -> list[str]:
    return ["kexec", "-l", kernel["image"], *([f"--initrd={kernel['initrd']}"] if kernel.get("initrd") else []),
            f"--command-line={cmdline}"]


def check_kexec(kernels: list[dict], cmdline: str, run=_run) -> list[str]:
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
    for k in kernels:
        p = run(kexec_load_cmd(k, cmdline))
        if p.returncode != 0:
            run(["kexec", "-u"])
            raise CapabilityError(f"ab start: kexec cannot load {k['image']}: {_last_line(p)}")
        u = run(["kexec", "-u"])
        if u.returncode != 0:
            raise CapabilityError(f"ab start: kexec -u failed after loading {k['image']}: {_last_line(u)}")
        done.append(f"kexec -l {k['image']}: loads (unloaded again)")
    return done


# -- grub ----------------------------------------------------------------------
def grub_cfg() -> Path | None:
    return next((p for p in GRUB_CFGS if p.is_file()), None)


def grub_reboot_binary() -> str | None:
    return shutil.which("grub-reboot") or shutil.which("grub2-reboot")


def grub_cannot_save_env(grub_dir: Path, run=_run) -> str | None:
    """Why grub itself cannot clear its one-shot entry at boot, or None (also
    where grub-probe cannot tell). Grub's save_env writes grubenv only on a
    plain disk or partition and a filesystem without checksums: not on LVM,
    RAID or encryption, not on btrfs or ZFS."""
    probe = shutil.which("grub-probe") or shutil.which("grub2-probe")
    if not probe:
        return None
    found = {}
    for target in ("fs", "abstraction"):
        try:
            p = run([probe, f"--target={target}", str(grub_dir)])
        except (OSError, subprocess.SubprocessError):
            return None
        if p.returncode != 0:
            return None
        found[target] = p.stdout.strip()
    if found["abstraction"]:
        return f"{grub_dir} is on {found['abstraction']}"
    if found["fs"] in ("btrfs", "zfs"):
        return f"{grub_dir} is on {found['fs']}"
    return None


def check_grub(run=_run) -> tuple[str, Path]:
    """grub-reboot and a grub.cfg that honours its one-shot entry, and a
    grubenv grub can clear at boot; or exit 3."""
    exe, cfg = grub_reboot_binary(), grub_cfg()
    if not exe or cfg is None:
        raise CapabilityError("ab start --via reboot: grub is not this machine's bootloader (no grub-reboot or "
                              "grub.cfg); --via reboot needs grub's one-shot entry, --via kexec does not")
    try:
        text = cfg.read_text(errors="replace")
    except OSError as exc:
        raise CapabilityError(f"ab start --via reboot: cannot read {cfg}: {exc.strerror}") from None
    if "next_entry" not in text:
        raise CapabilityError(f"ab start --via reboot: {cfg} does not read grub's next_entry, so grub-reboot "
                              "would not boot the entry once")
    why = grub_cannot_save_env(cfg.parent, run)
    if why:
        raise CapabilityError(f"ab start --via reboot: grub cannot clear its one-shot entry at boot ({why}): a "
                              "kernel that fails to boot would be booted again and again; use --via kexec")
    return exe, cfg


def grub_entry(cfg_text: str, release: str) -> str:
    """The grub-reboot argument ('submenu-id>entry-id') of the release's
    normal (not recovery) entry in a grub.cfg; UsageError where none."""
    stack: list[tuple[int, str]] = []       # (depth inside, submenu id)
    depth = 0
    id_re = re.compile(r"\$menuentry_id_option\s+'([^']+)'")
    for line in cfg_text.splitlines():
        s = line.strip()
        m = id_re.search(s)
        if s.startswith("submenu") and m:
            stack.append((depth + 1, m.group(1)))
        elif s.startswith("menuentry") and m:
            title = s.split("'")[1] if "'" in s else s
            if f"Linux {release}" in title and "recovery" not in title.lower() \
                    and re.search(rf"Linux {re.escape(release)}(?![\w.+-])", title):
                return ">".join([sid for _d, sid in stack] + [m.group(1)])
        depth += s.count("{") - s.count("}")
        while stack and stack[-1][0] > depth:
            stack.pop()
    raise UsageError(f"ab start --via reboot: grub.cfg has no entry for Linux {release} (run update-grub)")


# -- the actions ---------------------------------------------------------------
class Booter:
    """Boots a kernel next, or clears everything pending (the default kernel
    next). `run` executes a command; the tests pass one that records."""

    def __init__(self, via: str, run=_run):
        if via not in VIAS:
            raise UsageError(f"--via {via}: kexec or reboot")
        self.via = via
        self.run = run

    def _must(self, cmd: list[str]) -> None:
        p = self.run(cmd)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {_last_line(p)}")

    def boot(self, kernel: dict, cmdline: str, grub_entry_id: str | None = None) -> None:
        if self.via == "kexec":
            self._must(kexec_load_cmd(kernel, cmdline))
            self._must(["systemctl", "--no-block", "kexec"])
        else:
            if not grub_entry_id:
                raise RuntimeError(f"no grub entry recorded for {kernel.get('release') or kernel['image']}")
            self._must([grub_reboot_binary() or "grub-reboot", grub_entry_id])
            self._must(["systemctl", "--no-block", "reboot"])

    def _try(self, cmd: list[str]) -> str | None:
        """None where cmd succeeded, else why not."""
        try:
            p = self.run(cmd)
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        return None if p.returncode == 0 else _last_line(p)

    def clear(self) -> list[str]:
        """Nothing pending: unload kexec, remove grub's one-shot entry. Returns
        what it did; a line starting NOT_CLEARED for what it could not do."""
        done = []
        if kexec_loaded():
            why = self._try(["kexec", "-u"]) if shutil.which("kexec") else "no kexec on PATH"
            done.append("kexec -u" if why is None else f"{NOT_CLEARED}a kexec kernel stays loaded (kexec -u: {why})")
        if self.via == "reboot":
            cfg = grub_cfg()
            if cfg is not None:
                why = self._try(["grub-editenv", str(cfg.with_name("grubenv")), "unset", "next_entry"])
                done.append("grub-editenv unset next_entry" if why is None else
                            f"{NOT_CLEARED}grub's one-shot entry may stay set (grub-editenv: {why})")
        return done

    def reboot_default(self) -> None:
        done = self.clear()
        if not all_cleared(done):        # a reboot now could boot what is still pending
            raise RuntimeError("; ".join(done))
        self._must(["systemctl", "--no-block", "reboot"])
