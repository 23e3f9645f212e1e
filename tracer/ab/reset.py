# SPDX-License-Identifier: Apache-2.0
"""What brings the machine back when a loop kernel panics or hangs: the
loop's reset path, planned and checked by `ab start`, armed for the loop's
lifetime, observed at every boot of a loop kernel, and disarmed with its
unit.

A panic: the kernel's own settings, as a kernel tester sets them (panic=10:
reboot 10 s after a panic; oops=panic, softlockup_panic=1,
hung_task_panic=1, nmi_watchdog=panic (hard lockups) and
sysctl.kernel.panic_on_rcu_stall=1: an oops, a soft or hard lockup, a hung
task or an RCU stall on one CPU is a panic, not a machine that sits half
alive while PID 1 keeps the watchdog fed). They go on the command line of
every loop kernel's boot, unless that command line already sets them (the
user's value wins): with --via kexec on the kexec command line; with --via
reboot through grub, on every entry's command line (a drop-in
/etc/default/grub.d/nttrace-ab-NAME.cfg and update-grub), so a panic in the
initramfs, before any sysctl is applied, reboots too. A /etc/sysctl.d
drop-in sets the same for every boot while the loop lasts (the default
kernel's, and a loader nttrace cannot give a command line to).

A hang: the machine's hardware watchdog (/sys/class/watchdog/watchdogN,
/dev/watchdogN), armed through systemd with a drop-in
/etc/systemd/system.conf.d/nttrace-ab-NAME.conf: RuntimeWatchdogSec (systemd
pets it while the machine runs), KExecWatchdogSec (left running across a
kexec, so a kernel that hangs before its watchdog driver loads is reset; a
driver may stop the timer when it loads, and systemd arms it again),
RebootWatchdogSec (a reboot that hangs). systemd 252 re-reads these three on
`systemctl daemon-reload` (systemd-system.conf(5); the manager applies its
watchdog settings at each reload since v246); WatchdogDevice= is read only
when the manager starts, so a device other than /dev/watchdog0 is applied
with `systemctl daemon-reexec`. Each loop kernel must have the watchdog's
driver (built in or a module), or nothing in it pets the watchdog and every
boot of it ends in a reset. At every boot of a loop kernel the step
observes the watchdog (observe()): the device there, held open by PID 1
(systemd arms it by opening it), systemd's RuntimeWatchdogUSec the plan's,
and where sysfs shows them its state active and its timeout the plan's;
otherwise the loop stops (a kernel that boots without the driver would run
unprotected, and a KExecWatchdogSec timer left running would reset it later
as if it had hung). Where there is no watchdog the loop runs only with
--no-watchdog: a hang then needs a hand on the power button.

A boot that never reaches the loop's step (emergency or rescue mode, a
hang with PID 1 alive) is bounded by the boot deadline (nttrace.ab.unit).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from nttrace.ab import boot, bootloader, kernels, store
from nttrace.errors import CapabilityError, UsageError
from nttrace.kernel.sysfs import read as _read
from nttrace.kernel.sysfs import to_int as _int

PANIC_S = 10
# (command-line parameter, its value, the sysctl it sets, that sysctl's value);
# panic_on_rcu_stall has no parameter of its own: the kernel applies a
# sysctl.* parameter before it runs the initramfs
PANIC_SETTINGS = (("panic", str(PANIC_S), "kernel.panic", str(PANIC_S)),
                  ("oops", "panic", "kernel.panic_on_oops", "1"),
                  ("softlockup_panic", "1", "kernel.softlockup_panic", "1"),
                  ("hung_task_panic", "1", "kernel.hung_task_panic", "1"),
                  ("nmi_watchdog", "panic", "kernel.hardlockup_panic", "1"),
                  ("sysctl.kernel.panic_on_rcu_stall", "1", "kernel.panic_on_rcu_stall", "1"))
RUNTIME_S = 60        # systemd pets it every 30 s; a hung machine resets within a minute
KEXEC_S = 300         # from the kexec until the next kernel's systemd pets it: a boot's kernel, initrd, fsck
REBOOT_S = 600        # systemd's own default: a reboot whose last phase hangs
SOFTWARE_WATCHDOGS = ("softdog",)      # a kernel timer: gone at a kexec or a hard hang
NO_WATCHDOG_FLAG = "--no-watchdog"
MARK = "# nttrace-ab "
ROOT = Path("/")      # where the machine's /sys, /proc, /dev and /etc are (a laid-out tree in the tests)


def system_conf(name: str, root: Path | None = None) -> Path:
    return (root or ROOT) / "etc/systemd/system.conf.d" / f"nttrace-ab-{store.check_name(name)}.conf"


def sysctl_conf(name: str, root: Path | None = None) -> Path:
    return (root or ROOT) / "etc/sysctl.d" / f"90-nttrace-ab-{store.check_name(name)}.conf"


def grub_conf(name: str, root: Path | None = None) -> Path:
    """The grub defaults drop-in Debian's grub-mkconfig sources (/etc/default/grub.d/*.cfg)."""
    return (root or ROOT) / "etc/default/grub.d" / f"nttrace-ab-{store.check_name(name)}.cfg"


# -- the panic settings --------------------------------------------------------
def set_on(cmdline: str) -> dict[str, str]:
    """{parameter: value} of the panic settings a command line already sets,
    as the parameter or as its sysctl.kernel.* form."""
    words = {}
    for w in cmdline.split():
        key, _, value = w.partition("=")
        words[key] = value
    out = {}
    for param, _v, sysctl, _sv in PANIC_SETTINGS:
        for key in (param, f"sysctl.{sysctl}"):
            if key in words:
                out[param] = f"{key}={words[key]}"
    return out


def _panic_text(kept: dict[str, str], via: str, grub: bool = False) -> str:
    """How a panic ends, in words."""
    if "panic" in kept:
        value = kept["panic"].partition("=")[2]
        try:
            n = int(value)
        except ValueError:
            return f"a panic does what the command line's {kept['panic']} says"
        if n == 0:
            return f"a panic does not reboot ({kept['panic']}, the command line's)"
        if n < 0:
            return f"a panic reboots at once ({kept['panic']}, the command line's)"
        return f"a panic reboots after {n} s ({kept['panic']}, the command line's)"
    how = f"panic={PANIC_S}" if via == "kexec" or grub else f"kernel.panic={PANIC_S} once sysctl has run"
    return f"a panic reboots after {PANIC_S} s ({how})"


# -- the watchdog --------------------------------------------------------------
def watchdogs(root: Path | None = None) -> list[dict]:
    """The machine's watchdogs, watchdog0 first: each one's sysfs facts (its
    driver and the module that provides it, through the device's links)."""
    root = root or ROOT
    cls = root / "sys/class/watchdog"
    out = []
    entries = sorted(cls.glob("watchdog*"), key=lambda p: _int(p.name[len("watchdog"):]) or 0) if cls.is_dir() else []
    for d in entries:
        if _int(d.name[len("watchdog"):]) is None:
            continue
        drv = d / "device" / "driver"
        if drv.exists():
            driver = drv.resolve().name
            module_link = drv / "module"
            module = module_link.resolve().name if module_link.exists() else driver
        else:
            driver, module = driver_by_identity(root, _read(d / "identity"))
        out.append({"device": f"/dev/{d.name}", "present": (root / "dev" / d.name).exists(),
                    "exposed": (d / "identity").exists(),       # CONFIG_WATCHDOG_SYSFS
                    "identity": _read(d / "identity") or d.name, "driver": driver, "module": module,
                    "timeout_s": _int(_read(d / "timeout")), "max_timeout_s": _int(_read(d / "max_timeout")),
                    "nowayout": _read(d / "nowayout") == "1"})
    return out


def driver_by_identity(root: Path, identity: str | None) -> tuple[str | None, str | None]:
    """(driver, module) of a watchdog registered without a parent device,
    so sysfs links it to no driver (i6300esb is one): the loaded module
    whose driver bears the watchdog's identity, as /sys/module/M/drivers/
    BUS:NAME lists each module's drivers. (None, None) where none does."""
    if not identity:
        return None, None
    for link in sorted((root / "sys/module").glob("*/drivers/*")):
        if link.name.partition(":")[2] == identity:
            return identity, link.parent.parent.name
    return None, None


def pick_watchdog(found: list[dict]) -> tuple[dict | None, list[str]]:
    """The hardware watchdog the loop arms (/dev/watchdog0, systemd's own
    default, where it is one) and why any other was passed over."""
    notes, usable = [], []
    for w in found:
        if not w["present"]:
            notes.append(f"{w['device']} ({w['identity']}) is in sysfs but has no device node")
        elif (w["module"] or "") in SOFTWARE_WATCHDOGS or (w["driver"] or "") in SOFTWARE_WATCHDOGS:
            notes.append(f"{w['device']} is {w['identity']}, a kernel timer (softdog): it does not last through "
                         "a kexec or a hard hang; not a reset")
        elif not w["module"] and not w["exposed"]:
            notes.append(f"{w['device']}: this kernel exposes no watchdog attributes (no identity, timeout: "
                         "CONFIG_WATCHDOG_SYSFS is not set), so its driver cannot be named; start the loop from a "
                         "kernel that sets it (distribution kernels do)")
        elif not w["module"]:
            notes.append(f"{w['device']} ({w['identity']}): no driver named in sysfs")
        else:
            usable.append(w)
    return (usable[0] if usable else None), notes


def _bounded(want: int, w: dict) -> int:
    """A timeout the hardware can take (its max_timeout where sysfs says)."""
    return min(want, w["max_timeout_s"]) if w.get("max_timeout_s") else want


# -- the plan ------------------------------------------------------------------
def plan_reset(args, ks: dict, via: str, root: Path | None = None) -> dict:
    """sched["reset"]: the command-line additions, the sysctl drop-in's
    settings, the watchdog and the one line saying what resets the machine."""
    root = root or ROOT
    if via == "kexec":
        user = args.cmdline if getattr(args, "cmdline", None) is not None \
            else boot.default_cmdline(_read(root / "proc/cmdline") or "")
    else:       # the grub entries' command line: this boot's is the best knowledge of it
        user = _read(root / "proc/cmdline") or ""
    # --via reboot: the settings go on grub's entries where grub-mkconfig builds them from /etc/default/grub
    grub = via == "reboot" and bootloader.detect(root).kind == "grub"
    kept = set_on(user)
    added = [f"{p}={v}" for p, v, _s, _sv in PANIC_SETTINGS if p not in kept]
    cmdline_added = added if via == "kexec" else []
    sysctl = {s: sv for p, _v, s, sv in PANIC_SETTINGS if p not in kept}
    no_watchdog = bool(getattr(args, "no_watchdog", False))
    found = watchdogs(root)
    chosen, passed_over = pick_watchdog(found)
    watchdog = None
    if chosen and not no_watchdog:
        watchdog = {"device": chosen["device"], "identity": chosen["identity"], "driver": chosen["driver"],
                    "module": chosen["module"], "nowayout": chosen["nowayout"],
                    "runtime_s": _bounded(RUNTIME_S, chosen), "reboot_s": _bounded(REBOOT_S, chosen),
                    "kexec_s": _bounded(KEXEC_S, chosen)}
    text = _panic_text(kept, via, grub)
    if watchdog:
        text += (f"; a hang is reset by {watchdog['identity']} ({watchdog['device']}) after {watchdog['runtime_s']} s"
                 + (f" ({watchdog['kexec_s']} s from a kexec until the next kernel's systemd pets it)"
                    if via == "kexec" else ""))
    elif chosen:
        text += f"; NO WATCHDOG ({NO_WATCHDOG_FLAG}: {chosen['device']} left alone): a hang needs a hand on the power button"
    else:
        text += f"; NO WATCHDOG: a hang needs a hand on the power button ({NO_WATCHDOG_FLAG})"
    not_covered = []
    if via == "kexec" and watchdog:
        not_covered.append("a hang after the next kernel's watchdog driver has loaded and before its systemd arms the "
                           "watchdog again (a driver may stop the timer when it loads, as i6300esb does)")
    if via == "reboot" and not grub:
        not_covered.append("a panic before systemd-sysctl runs at a --via reboot boot reboots only where the boot "
                           "entry's own command line says panic= (nttrace gives grub's Debian entries the panic "
                           "settings; not this loader's)"
                           + (", else the watchdog where the firmware leaves it running" if watchdog else ""))
        if watchdog:
            not_covered.append("a hang between the firmware and systemd's start at a --via reboot boot: the "
                               "firmware's reset usually stops the watchdog")
    not_covered.append("an RCU stall in a driver built into the kernel, before it applies sysctl.* parameters "
                       "(a driver that is a module probes later, and is covered)")
    return {"cmdline_added": cmdline_added, "grub_cmdline_added": added if grub else [],
            "kept": sorted(kept.values()), "sysctl": sysctl, "watchdog": watchdog,
            "acknowledged_no_watchdog": no_watchdog, "passed_over": passed_over,
            "watchdogs_found": [w["device"] for w in found], "not_covered": not_covered, "text": text}


def check(reset: dict, ks: dict) -> tuple[list[str], list[Exception]]:
    """What start found of the reset path (a line each) and its refusals:
    no watchdog and no --no-watchdog (exit 3), a loop kernel without the
    watchdog's driver (exit 2)."""
    found, refusals = [], []
    for line in reset.get("passed_over", []):
        found.append(f"watchdog passed over: {line}")
    w = reset["watchdog"]
    if w is None:
        if not reset["acknowledged_no_watchdog"]:
            over = reset.get("passed_over") or []
            refusals.append(CapabilityError(
                "ab start: this machine has no hardware watchdog (/sys/class/watchdog"
                + (f": {'; '.join(over)}" if over else "") + "): a kernel that hangs at a "
                f"boot stays hung until someone power-cycles it; pass {NO_WATCHDOG_FLAG} to run the loop so"))
        return found, refusals
    for side, k in ks.items():
        kd = k if isinstance(k, dict) else k.as_json()
        if kernels.has_module(kd, w["module"]):
            found.append(f"the {side} kernel {kd['release']} has the watchdog's driver {w['module']}")
        else:
            refusals.append(UsageError(
                f"ab start: the {side} kernel {kd['release']} has no {w['module']} (the driver of {w['identity']}, "
                f"{w['device']}), built in or as a module: nothing in it would pet the watchdog, so every boot of it "
                f"would end in a reset; build it with that driver, or pass {NO_WATCHDOG_FLAG}"))
    if w["nowayout"]:
        found.append(f"{w['device']} has nowayout set: once armed it cannot be stopped; when the loop ends systemd "
                     "keeps petting it until the next boot")
    return found, refusals


def system_conf_text(name: str, w: dict) -> str:
    return (f"# written by `nttrace ab start {name}`; removed when the loop ends (docs/ab-loop.md)\n"
            + (f"{MARK}nowayout\n" if w.get("nowayout") else "")
            + "[Manager]\n"
            f"RuntimeWatchdogSec={w['runtime_s']}\n"
            f"RebootWatchdogSec={w['reboot_s']}\n"
            f"KExecWatchdogSec={w['kexec_s']}\n"
            + (f"WatchdogDevice={w['device']}\n" if w["device"] != "/dev/watchdog0" else ""))


def sysctl_path(root: Path, key: str) -> Path:
    return root / "proc/sys" / key.replace(".", "/")


def changes(name: str, reset: dict) -> list[str]:
    """What arm() changes on the machine, a line each (the plan's)."""
    out = []
    w = reset["watchdog"]
    if w:
        out.append(f"{system_conf(name)}: RuntimeWatchdogSec={w['runtime_s']} RebootWatchdogSec={w['reboot_s']} "
                   f"KExecWatchdogSec={w['kexec_s']}"
                   + (f" WatchdogDevice={w['device']} (systemctl daemon-reexec)" if w["device"] != "/dev/watchdog0"
                      else " (systemctl daemon-reload)"))
    if reset["sysctl"]:
        out.append(f"{sysctl_conf(name)}: " + " ".join(f"{k}={v}" for k, v in reset["sysctl"].items())
                   + " (set now; the values before are put back when the loop ends)")
    if reset.get("grub_cmdline_added"):
        out.append(f"{grub_conf(name)}: every grub entry's command line gains "
                   f"{' '.join(reset['grub_cmdline_added'])} (grub-mkconfig now and when the loop ends)")
    return out


def grub_conf_text(name: str, added: list[str]) -> str:
    return (f"# written by `nttrace ab start {name}`; removed when the loop ends (docs/ab-loop.md): the loop's\n"
            "# panic settings on every entry, so a kernel that panics before sysctl is applied reboots\n"
            f'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX {" ".join(added)}"\n')


def _grub_mkconfig(root: Path, run) -> str:
    """grub-mkconfig into the grub.cfg grub reads; what it did, or RuntimeError."""
    loader = bootloader.detect(root)
    if loader.kind != "grub" or loader.cfg is None:
        raise RuntimeError(f"grub-mkconfig: grub does not boot this machine ({loader.how})")
    exe = "grub-mkconfig"
    target = Path("/") / loader.cfg.relative_to(root)
    p = run([exe, "-o", str(target)])
    if p.returncode != 0:
        raise RuntimeError(f"{exe} -o {target}: {(p.stderr or p.stdout or '').strip()[-200:]}")
    return f"{exe} -o {target}"


# -- arm and disarm ------------------------------------------------------------
def _systemctl(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120)


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def arm(name: str, reset: dict, root: Path | None = None, systemctl=_systemctl, run=_run) -> list[str]:
    """Write the drop-ins and apply them; returns what it did. RuntimeError
    where systemd does not take the watchdog's settings or grub-mkconfig
    fails (the caller then disarms). A setting this kernel has no sysctl for
    (hung_task_panic without CONFIG_DETECT_HUNG_TASK) is said and left out."""
    root = root or ROOT
    done = []
    if reset.get("grub_cmdline_added"):
        path = grub_conf(name, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_atomic(path, grub_conf_text(name, reset["grub_cmdline_added"]))
        path.chmod(0o644)
        done.append(f"wrote {path} ({_grub_mkconfig(root, run)})")
    if reset["sysctl"]:
        before = {k: _read(sysctl_path(root, k)) for k in reset["sysctl"]}
        path = sysctl_conf(name, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_atomic(path, f"# written by `nttrace ab start {name}`; removed when the loop ends "
                                 "(docs/ab-loop.md)\n"
                           + "".join(f"{MARK}before {k}={v}\n" for k, v in before.items() if v is not None)
                           + "".join(f"{k} = {v}\n" for k, v in reset["sysctl"].items()))
        path.chmod(0o644)
        for k, v in reset["sysctl"].items():
            if before[k] is not None:
                sysctl_path(root, k).write_text(v + "\n")
        done.append(f"wrote {path} and set " + " ".join(f"{k}={v}" for k, v in reset["sysctl"].items()
                                                         if before[k] is not None)
                    + "".join(f"; no {sysctl_path(Path('/'), k)} in this kernel" for k in reset["sysctl"]
                              if before[k] is None))
    w = reset["watchdog"]
    if w:
        path = system_conf(name, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_atomic(path, system_conf_text(name, w))
        path.chmod(0o644)
        how = "daemon-reload" if w["device"] == "/dev/watchdog0" else "daemon-reexec"
        p = systemctl([how])
        if p.returncode != 0:
            raise RuntimeError(f"systemctl {how} after writing {path}: {(p.stderr or '').strip()[-200:]}")
        done.append(f"wrote {path} (systemctl {how}): {w['device']} armed, {w['runtime_s']} s")
    return done


def disarm(name: str, root: Path | None = None, systemctl=_systemctl, run=_run) -> list[str]:
    """Remove the drop-ins (whatever is there) and undo them: the sysctl
    values from before the loop put back, grub's entries made again without
    the panic settings, systemd told its watchdog settings are gone (but for
    a nowayout watchdog, which systemd keeps petting until the next boot
    rather than let it reset the machine). Returns what it did."""
    root = root or ROOT
    done = []
    path = grub_conf(name, root)
    if path.exists():
        path.unlink()
        try:
            done.append(f"removed {path} ({_grub_mkconfig(root, run)})")
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            done.append(f"removed {path}; grub.cfg keeps the loop's panic settings until update-grub ({exc})")
    path = sysctl_conf(name, root)
    text = _read(path)
    if text is not None:
        restored = []
        for line in text.splitlines():
            m = re.fullmatch(re.escape(MARK) + r"before ([\w.]+)=(.*)", line)
            if m:
                try:
                    sysctl_path(root, m.group(1)).write_text(m.group(2) + "\n")
                    restored.append(f"{m.group(1)}={m.group(2)}")
                except OSError as exc:
                    done.append(f"could not put back {m.group(1)}={m.group(2)} ({exc.strerror})")
        path.unlink(missing_ok=True)
        done.append(f"removed {path}" + (f" and put back {' '.join(restored)}" if restored else ""))
    path = system_conf(name, root)
    text = _read(path)
    if text is not None:
        path.unlink(missing_ok=True)
        if f"{MARK}nowayout" in text.splitlines():
            done.append(f"removed {path}; the watchdog (nowayout) stays petted by systemd until the next boot")
        else:
            how = "daemon-reexec" if "WatchdogDevice=" in text else "daemon-reload"
            try:
                p = systemctl([how])
                ok = p.returncode == 0
                why = (p.stderr or "").strip()[-200:]
            except (OSError, subprocess.SubprocessError) as exc:
                ok, why = False, str(exc)
            done.append(f"removed {path} (systemctl {how}: the watchdog is systemd's own again)" if ok else
                        f"removed {path}; systemctl {how} failed ({why}): the watchdog stays armed until the next boot")
    return done


# -- observed at each boot ------------------------------------------------------------
def _busctl_runtime_usec(run=subprocess.run) -> int | None:
    """systemd's RuntimeWatchdogUSec, as the manager holds it (microseconds)."""
    try:
        p = run(["busctl", "get-property", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                 "org.freedesktop.systemd1.Manager", "RuntimeWatchdogUSec"], capture_output=True, text=True,
                timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    parts = (p.stdout or "").split()
    return int(parts[1]) if p.returncode == 0 and len(parts) == 2 and parts[1].isdigit() else None


def observed(device: str, root: Path | None = None, runtime_usec=_busctl_runtime_usec) -> dict:
    """The watchdog `device` as this boot has it: its node, whether PID 1
    (systemd) holds it open (opening it is what arms it), its sysfs state and
    timeout where the kernel exposes them (CONFIG_WATCHDOG_SYSFS), and
    systemd's RuntimeWatchdogUSec."""
    root = root or ROOT
    dev = Path(device)
    held = False
    try:
        for fd in (root / "proc/1/fd").iterdir():
            try:
                if fd.readlink() == dev:
                    held = True
                    break
            except OSError:
                continue
    except OSError:
        held = None
    attrs = root / "sys/class/watchdog" / dev.name
    usec = runtime_usec()
    return {"device": device, "present": (root / dev.relative_to("/")).exists(), "held_by_pid1": held,
            "state": _read(attrs / "state"), "timeout_s": _int(_read(attrs / "timeout")),
            "systemd_runtime_s": usec / 1e6 if usec is not None else None}


def watchdog_fault(planned: dict | None, seen: dict) -> str | None:
    """Why the watchdog this boot has is not the one the loop armed, or None.
    `planned`: the schedule's reset["watchdog"] (None: the loop runs without one)."""
    if not planned:
        return None
    dev = planned["device"]
    if not seen.get("present"):
        return (f"{dev} does not exist at this boot: its driver ({planned['module']}) did not load or bind, so "
                "nothing resets a hang")
    if seen.get("held_by_pid1") is False:
        return f"systemd does not hold {dev} open at this boot: the watchdog is not armed"
    if seen.get("state") is not None and seen["state"] != "active":
        return f"{dev} is {seen['state']} at this boot, not active"
    want = planned["runtime_s"]
    if seen.get("systemd_runtime_s") is not None and abs(seen["systemd_runtime_s"] - want) > 0.5:
        return f"systemd's RuntimeWatchdogSec is {seen['systemd_runtime_s']:g} s at this boot, not the loop's {want} s"
    if seen.get("timeout_s") is not None and abs(seen["timeout_s"] - want) > max(1, want * 0.05):
        return f"{dev}'s timeout is {seen['timeout_s']} s at this boot, not the loop's {want} s"
    return None
