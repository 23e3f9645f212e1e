# SPDX-License-Identifier: Apache-2.0
"""The A/B loop guest's driver (guest-loop.sh runs it in the disk's
nttrace-lab-loop.service, after the loop's own unit): `nttrace ab` run as a
user runs it on their server, and the lab's reading of its end.

The run is a list of scenarios (/nttrace/ab-loop/config.json, the host's,
ab_loop.py), taken in order; where the run names none, one loop. A
scenario is either

- a loop: `nttrace ab start NAME` with the releases the packages installed
  (`--base 7.2.13-nttrace-base --patched 7.2.13-nttrace-nt-v3`, or a
  `--series LABEL=RELEASE,...`), the boots, seed, --via and checks of the
  scenario and nothing else: no command line, no reset of the lab's.
  nttrace then boots the schedule's kernels. The faults the lab injects
  into it are written before the start: /var/lib/nttrace-lab/inject for the
  early unit (guest-loop-boot.sh), /var/lib/nttrace-lab/initramfs-faults
  for the initramfs (guest-loop-initramfs.sh); a scenario that drops a boot
  to emergency mode adds the fstab line that boot cannot mount (a pmem
  namespace, as an admin mounts one) and takes it out at its end;
- a refusal: `nttrace ab start` of a pair, or on a machine, that start must
  refuse (the same kernel twice; grub's default entry set to Debian's own
  choice, the highest version: the patched kernel), its exit code and
  output recorded, then the machine put back as it was.

At the boot a loop ends on (complete: back on the default kernel; stopped
or failed: wherever the loop left the machine), its state directory is
copied to RESULTS/ab/<name>, what the loop left on the machine to
RESULTS/ab-end-<name>.json (the last scenario's also to ab-end.json), the
journal of its unit to RESULTS/ab-journal-<name>.txt (ab-journal.txt: the
last's); what a fault changed is put back, and the next scenario starts,
from the default kernel (a reboot first where the loop stopped on one of
its own). After the last, the guest powers off.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(sys.argv[1])
LOOP = Path("/nttrace/ab-loop")
CONFIG = json.loads((LOOP / "config.json").read_text())
SCENARIOS = CONFIG["scenarios"]
AB_DIR = Path(os.environ.get("NTTRACE_AB_DIR", "/var/lib/nttrace/ab"))
LAB = Path("/var/lib/nttrace-lab")
PROGRESS = LAB / "scenario"          # the index of the scenario under way
SAVED = LAB / "saved"                # what a fault changes, as it was before
NTTRACE = "/opt/venv/bin/nttrace"
POLL_S = 10
# How long a queued kexec or reboot may take to come before this boot ends
# the run instead (the loop's own unit queues them with --no-block).
REBOOT_GRACE_S = 300


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] guest_loop: {line}", flush=True)
    try:
        with open("/dev/console", "w") as c:
            c.write(f"nttrace-lab: {line}\n")
    except OSError:
        pass


def running_kernel() -> str | None:
    """The loop's variant running now (by its release), or None: the default (stock) kernel."""
    return next((v for v, r in CONFIG["releases"].items() if r == os.uname().release), None)


def booted_by() -> str:
    """'firmware': grub booted this kernel (it puts BOOT_IMAGE= on the command line); 'kexec': nttrace's."""
    return "firmware" if "BOOT_IMAGE=" in Path("/proc/cmdline").read_text() else "kexec"


def status(name: str) -> dict:
    p = subprocess.run([NTTRACE, "ab", "status", name, "--json"], capture_output=True, text=True, timeout=300)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"state": None, "rc": p.returncode, "stderr": p.stderr[-2000:], "stdout": p.stdout[-2000:]}


def record(event: str, **fields) -> None:
    line = {"event": event, "at": time.time(), "kernel": running_kernel(), "release": os.uname().release,
            "build": os.uname().version, "booted_by": booted_by(), **fields}
    with open(RESULTS / "ab-boots.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def setup() -> None:
    """What the checks need before the loop's first boot: the namespace they rebind."""
    if (LAB / "setup-done").exists():
        return
    for cmd in CONFIG.get("setup", []):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        say(f"setup: {' '.join(cmd)}: exit {p.returncode}")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    (LAB / "setup-done").write_text("1\n")


def start_command(sc: dict) -> list[str]:
    kernels = (["--series", ",".join(f"{label}={release}" for label, release in sc["series"])] if sc.get("series")
               else ["--base", sc["base"], "--patched", sc["patched"]])
    return [NTTRACE, "ab", "start", sc["name"], *kernels, "--boots", str(sc["boots"]), "--via", sc["via"],
            "--seed", str(CONFIG["seed"]), "--yes", *sc["check_args"], *sc.get("start_args", [])]


FSTAB = Path("/etc/fstab")
PMEM_MOUNT = "/mnt/lab-pmem"
# the device timeout an admin gives a data mount, so a missing device fails the
# boot in a minute, not 90 s; not less: nd_pmem's probe of the 2 GiB namespace
# (its struct pages initialised under TCG) took over 20 s of a host that
# shared its two cores with a kernel build and two other guests, and every
# kernel, the default one too, then dropped to emergency mode
PMEM_FSTAB = f"/dev/pmem0 {PMEM_MOUNT} ext4 defaults,x-systemd.device-timeout=60s 0 2"


def mount_pmem() -> None:
    """The emergency scenario's data mount: an ext4 file system on the fsdax
    namespace, in fstab without nofail (its boots need it)."""
    p = subprocess.run(["mkfs.ext4", "-q", "-F", "/dev/pmem0"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"mkfs.ext4 /dev/pmem0 exited {p.returncode}: {p.stderr[-2000:]}")
    Path(PMEM_MOUNT).mkdir(parents=True, exist_ok=True)
    FSTAB.write_text(FSTAB.read_text() + PMEM_FSTAB + "\n")
    subprocess.run(["systemctl", "daemon-reload"], timeout=120)
    m = subprocess.run(["mount", PMEM_MOUNT], capture_output=True, text=True, timeout=120)
    say(f"fstab: {PMEM_FSTAB} (mount: exit {m.returncode})")


def unmount_pmem() -> None:
    lines = FSTAB.read_text().splitlines()
    if PMEM_FSTAB in lines:
        subprocess.run(["umount", PMEM_MOUNT], capture_output=True, timeout=120)
        FSTAB.write_text("\n".join(ln for ln in lines if ln != PMEM_FSTAB) + "\n")
        subprocess.run(["systemctl", "daemon-reload"], timeout=120)


def start(sc: dict) -> int:
    setup()
    # the faults of this loop, for the early unit and the initramfs of the boots that follow
    (LAB / "inject").write_text(" ".join(sc.get("inject", [])) + "\n")
    (LAB / "initramfs-faults").write_text("".join(f"{fault} {CONFIG['releases'][variant]}\n"
                                                  for fault, variant in sc.get("initramfs", [])))
    (LAB / "loop-name").write_text(sc["name"] + "\n")
    if sc.get("pmem_fstab"):
        mount_pmem()
    save(sc)
    cmd = start_command(sc)
    # --yes: the lab answers start's question for the user who typed the command
    say("starting the loop: " + " ".join(cmd))
    record("start", scenario=sc["name"], command=cmd)
    os.sync()
    # its output straight to the share: a start that boots at once never returns here
    with open(RESULTS / f"ab-start-{sc['name']}.log", "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=900)
    say(f"nttrace ab start exited {p.returncode}")
    return p.returncode


# -- what a fault changes, kept before the loop starts and put back after it ----------------
def fault_paths(sc: dict) -> list[Path]:
    """The files the scenario's faults change (guest-loop-boot.sh): one of a
    kernel's modules."""
    out = []
    for word in sc.get("inject", []):
        fault, _, variant = word.partition(":")
        if fault == "modules":
            out.append(module_to_change(CONFIG["releases"][variant]))
    return out


def module_to_change(release: str) -> Path:
    """The module a "modules" fault rewrites, as a rebuild and `make
    modules_install` would: the tree's first (the lab's kernels build one
    module, test_hmm; the rest is built in)."""
    found = sorted(Path(f"/lib/modules/{release}/kernel").rglob("*.ko*"))
    if not found:
        raise RuntimeError(f"no module in /lib/modules/{release}/kernel")
    return found[0]


def save(sc: dict) -> None:
    shutil.rmtree(SAVED, ignore_errors=True)
    SAVED.mkdir(parents=True)
    kept = {}
    for i, path in enumerate(fault_paths(sc)):
        shutil.copy2(path, SAVED / str(i))
        kept[str(i)] = str(path)
    (SAVED / "paths.json").write_text(json.dumps(kept))


def restore() -> list[str]:
    if not (SAVED / "paths.json").exists():
        return []
    put_back = []
    for i, path in json.loads((SAVED / "paths.json").read_text()).items():
        shutil.copy2(SAVED / i, path)
        put_back.append(path)
    shutil.rmtree(SAVED, ignore_errors=True)
    return put_back


# -- a refusal -------------------------------------------------------------------------------
GRUB_DEFAULTS = Path("/etc/default/grub")


def refuse(sc: dict) -> None:
    """`nttrace ab start` that must refuse, recorded; the machine put back."""
    before = GRUB_DEFAULTS.read_text()
    (LAB / "grub-defaults").write_text(before)      # put back by not_refused() where start boots instead
    grub = None
    try:
        if sc.get("grub_default") is not None:
            # grub's own default where nobody chose one: the first entry, the highest version
            lines = [ln for ln in before.splitlines() if not ln.startswith("GRUB_DEFAULT=")]
            GRUB_DEFAULTS.write_text("\n".join([f"GRUB_DEFAULT={sc['grub_default']}", *lines]) + "\n")
            grub = subprocess.run(["update-grub"], capture_output=True, text=True, timeout=600)
        cmd = start_command(sc)
        say(f"refusal {sc['name']}: " + " ".join(cmd))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        out = {"name": sc["name"], "command": cmd, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr,
               "grub_default": sc.get("grub_default"), "update_grub_rc": grub.returncode if grub else None,
               "grub_cfg_default": grub_cfg_default(),
               "state_dir": (AB_DIR / sc["name"]).exists(), **left_behind()}
    finally:
        if GRUB_DEFAULTS.read_text() != before:
            GRUB_DEFAULTS.write_text(before)
            subprocess.run(["update-grub"], capture_output=True, text=True, timeout=600)
    say(f"refusal {sc['name']}: exit {p.returncode}")
    (RESULTS / f"refuse-{sc['name']}.json").write_text(json.dumps(out, indent=1))
    os.sync()


def not_refused(sc: dict) -> None:
    """The start that had to refuse began its loop and booted: recorded as
    such (the test fails on it), and the loop stopped as a user stops it,
    so the scenarios after it run on a machine without it."""
    stop = subprocess.run([NTTRACE, "ab", "stop", sc["name"]], capture_output=True, text=True, timeout=300)
    saved = LAB / "grub-defaults"
    if saved.exists() and saved.read_text() != GRUB_DEFAULTS.read_text():
        GRUB_DEFAULTS.write_text(saved.read_text())
        subprocess.run(["update-grub"], capture_output=True, text=True, timeout=600)
    say(f"refusal {sc['name']}: start did not refuse, it booted; nttrace ab stop: exit {stop.returncode}")
    (RESULTS / f"refuse-{sc['name']}.json").write_text(json.dumps({
        "name": sc["name"], "command": start_command(sc), "rc": None, "booted": True,
        "stdout": "", "stderr": "", "stop": {"rc": stop.returncode, "output": (stop.stdout + stop.stderr)[-2000:]},
        "state_dir": (AB_DIR / sc["name"]).exists(), **left_behind()}, indent=1))
    os.sync()


def grub_cfg_default() -> str | None:
    """grub.cfg's default where no one-shot entry is set (`set default="..."`)."""
    m = re.search(r'set default="([^$"][^"]*)"', Path("/boot/grub/grub.cfg").read_text())
    return m[1] if m else None


def _out(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    return (p.stdout + p.stderr).strip()


def left_behind() -> dict:
    """What of the loop is on the machine now: its units (files and drop-ins,
    enabled), a kexec kernel loaded, its systemd, sysctl and grub drop-ins
    (and the panic settings grub.cfg gave its entries), the watchdog systemd
    is feeding, a one-shot entry in grubenv."""
    units = _out(["systemctl", "list-unit-files", "--no-legend", "--plain", "nttrace-ab*"])
    enabled = [os.path.basename(p) for p in glob.glob("/etc/systemd/system/*.wants/nttrace-ab*")]
    kexec_loaded = Path("/sys/kernel/kexec_loaded")
    grub_cfg = Path("/boot/grub/grub.cfg").read_text() if Path("/boot/grub/grub.cfg").exists() else ""
    return {"unit_files": units.splitlines(), "enabled": enabled,
            "unit_dropins": sorted(glob.glob("/etc/systemd/system/nttrace-ab*.d")),
            "kexec_loaded": kexec_loaded.read_text().strip() if kexec_loaded.exists() else None,
            "dropins": sorted(glob.glob("/etc/systemd/system.conf.d/nttrace-ab*")
                              + glob.glob("/etc/sysctl.d/*nttrace-ab*") + glob.glob("/etc/default/grub.d/*nttrace-ab*")),
            "grub_cfg_panic": "softlockup_panic=1" in grub_cfg,
            "watchdog": _out(["systemctl", "show", "-p", "RuntimeWatchdogUSec", "-p", "RebootWatchdogUSec",
                              "-p", "KExecWatchdogUSec"]).splitlines(),
            "grubenv": _out(["grub-editenv", "/boot/grub/grubenv", "list"]).splitlines(),
            "sysctl": {k: Path(f"/proc/sys/kernel/{k}").read_text().strip()
                       for k in ("panic", "panic_on_oops", "softlockup_panic") if Path(f"/proc/sys/kernel/{k}").exists()}}


def loop_ended(sc: dict, rc: int, why: str, st: dict) -> None:
    """Copy the loop's state out, record what it left behind, put back
    what its faults changed."""
    name = sc["name"]
    unit_gone(name)
    say(f"loop {name} is over ({why}): copying its state")
    out = RESULTS / "ab" / name
    shutil.rmtree(out, ignore_errors=True)
    if (AB_DIR / name).exists():
        shutil.copytree(AB_DIR / name, out)
    end = {"scenario": name, "why": why, "rc": rc, "status": st, "kernel": running_kernel(),
           "release": os.uname().release, "build": os.uname().version, "booted_by": booted_by(),
           "cmdline": Path("/proc/cmdline").read_text().strip(),
           "injected": sorted(p.name.removeprefix("injected-") for p in LAB.glob("injected-*")),
           "initramfs_injected": [line.split() for line in (LAB / "initramfs-injected").read_text().splitlines()]
           if (LAB / "initramfs-injected").exists() else [],
           **left_behind()}
    end["put_back"] = restore()
    if sc.get("pmem_fstab"):
        unmount_pmem()
    for planned in ("inject", "initramfs-faults", "initramfs-injected"):
        (LAB / planned).unlink(missing_ok=True)
    for marker in LAB.glob("injected-*"):
        marker.unlink()
    text = json.dumps(end, indent=1)
    (RESULTS / f"ab-end-{name}.json").write_text(text)
    # the journal is on the disk: the loop's unit and the lab's, across every boot
    journal = subprocess.run(["journalctl", "--no-pager", "-o", "short-monotonic", "-u", f"nttrace-ab@{name}.service",
                              "-u", f"nttrace-ab-deadline@{name}.service", "-u", "nttrace-lab-boot.service",
                              "-u", "nttrace-lab-loop.service"],
                             capture_output=True, text=True, timeout=300)
    (RESULTS / f"ab-journal-{name}.txt").write_text(journal.stdout + journal.stderr)
    if sc is SCENARIOS[-1]:
        (RESULTS / "ab-end.json").write_text(text)
        (RESULTS / "ab-journal.txt").write_text(journal.stdout + journal.stderr)
    record("end", scenario=name, why=why, rc=rc)
    os.sync()


def scenarios_rc() -> int:
    """0 where every scenario ended as it had to, from what each left in
    RESULTS (so across every boot of the run): a refusal refused (start's
    exit code, not 0 and not a boot), a loop ended in its expected state."""
    for sc in SCENARIOS:
        if sc["kind"] == "refuse":
            f = RESULTS / f"refuse-{sc['name']}.json"
            if not f.exists() or json.loads(f.read_text())["rc"] in (None, 0):
                return 1
        else:
            f = RESULTS / f"ab-end-{sc['name']}.json"
            if not f.exists() or json.loads(f.read_text())["status"].get("state") != sc["expect"]:
                return 1
    return 0


def power_off(rc: int) -> None:
    boots = subprocess.run(["journalctl", "--no-pager", "--list-boots"], capture_output=True, text=True, timeout=120)
    (RESULTS / "ab-journal-boots.txt").write_text(boots.stdout + boots.stderr)
    (RESULTS / "guest-run.rc").write_text(f"{rc}\n")
    os.sync()
    subprocess.run(["systemctl", "--no-block", "poweroff"])


UNIT_GONE_S = 120


def unit_gone(name: str) -> None:
    """Wait (UNIT_GONE_S at most: what is left then is the step's, and is
    recorded) until the loop's step has removed its unit: this driver runs
    beside the step when the loop is not the one its unit is ordered after
    (nttrace-ab@lab.service), and a step killed by the reboot it asked for
    removes the unit at the next boot."""
    deadline = time.monotonic() + UNIT_GONE_S
    while Path(f"/etc/systemd/system/nttrace-ab@{name}.service.d").exists() and time.monotonic() < deadline:
        time.sleep(2)


def rebooting(name: str) -> bool:
    """Whether the loop that ended at this boot asked for a reboot (into the
    default kernel) on its way out: once its unit is gone (unit_gone()),
    systemd's queued jobs say."""
    if running_kernel() is None:
        return False
    unit_gone(name)
    jobs = _out(["systemctl", "list-jobs", "--no-legend", "--plain"])
    return any(t in jobs for t in ("reboot.target", "kexec.target", "poweroff.target", "shutdown.target"))


def index() -> int:
    return int(PROGRESS.read_text()) if PROGRESS.exists() else 0


def advance(i: int) -> None:
    PROGRESS.write_text(f"{i + 1}\n")
    os.sync()


def main() -> None:
    LAB.mkdir(parents=True, exist_ok=True)
    while index() < len(SCENARIOS):
        i = index()
        sc = SCENARIOS[i]
        if sc["kind"] == "refuse":
            tried = LAB / f"refusing-{sc['name']}"
            if tried.exists():
                not_refused(sc)        # start booted instead of refusing: this is the boot after it
            else:
                tried.write_text("1\n")
                os.sync()
                refuse(sc)
            advance(i)
            continue
        if not (AB_DIR / sc["name"]).exists():
            started = start(sc)
            if started != 0:
                loop_ended(sc, started, f"nttrace ab start exited {started}", status(sc["name"]))
                advance(i)
                continue
            # start queued the boot into the schedule's first kernel: this boot ends
            return wait_for_the_next_boot(sc, status(sc["name"]), "nttrace ab start returned and no boot followed")
        st = status(sc["name"])
        record("after the step", scenario=sc["name"], state=st.get("state"), status=st)
        state = st.get("state")
        if state == "complete" and running_kernel() is None:
            loop_ended(sc, 0, "complete, back on the default kernel", st)
        elif state in ("stopped", "failed") and not rebooting(sc["name"]):
            # a loop stopped by a fault leaves the machine where it is; one that
            # ends incomplete reboots into the default kernel first (rebooting())
            loop_ended(sc, 1, f"the loop {state}: {st.get('why')}", st)
        else:
            return wait_for_the_next_boot(sc, st, f"{state}, and no reboot into the default kernel followed"
                                          if state in ("complete", "failed") else
                                          f"the loop's step ran, state {state}, and no boot followed")
        advance(i)
        if index() < len(SCENARIOS) and running_kernel() is not None:
            # a loop that stopped left the machine on a loop kernel: the next
            # starts, as a user would start it, from the machine's default kernel
            say("back to the default kernel before the next scenario: systemctl reboot")
            record("reboot to the default kernel", scenario=sc["name"])
            os.sync()
            subprocess.run(["systemctl", "--no-block", "reboot"])
            return
    say("every scenario is over: powering off")
    power_off(scenarios_rc())


def wait_for_the_next_boot(sc: dict, st: dict, why: str) -> None:
    """A kexec or reboot is queued: it ends this process. Past REBOOT_GRACE_S
    it did not come: the run ends, saying so."""
    deadline = time.monotonic() + REBOOT_GRACE_S
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        st = status(sc["name"])
        if st.get("state") in ("stopped", "failed") and not rebooting(sc["name"]):
            # the loop stopped with this boot, where it is: main() takes it from here, as at a boot
            return main()
    loop_ended(sc, 1, f"{why} within {REBOOT_GRACE_S} s", st)
    power_off(1)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - the host reads the error
        import traceback
        (RESULTS / "ab-error.txt").write_text(traceback.format_exc())
        say(f"error: {exc.__class__.__name__}: {exc}")
        (RESULTS / "guest-run.rc").write_text("4\n")
        os.sync()
        subprocess.run(["systemctl", "--no-block", "poweroff"])
