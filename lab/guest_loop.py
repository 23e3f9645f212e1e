# SPDX-License-Identifier: Apache-2.0
"""The A/B loop guest's driver (guest-loop.sh runs it in the disk's
nttrace-lab-loop.service, after the loop's own unit): `nttrace ab` run as a
user runs it on their server, and the lab's reading of its end.

First boot (no loop yet; grub's default entry, Debian's stock kernel): the
namespace the checks rebind, then `nttrace ab start` with the releases the
packages installed (`--base 7.2.13-nttrace-base --patched
7.2.13-nttrace-nt-v3`), the boots, seed, --via and checks of
/nttrace/ab-loop/config.json (the host's, ab_loop.py) and nothing else:
no command line, no reset of the lab's. nttrace then boots the schedule's
first kernel.

Every later boot that gets here (the loop's unit kexecs or reboots on
while the loop runs, so only the boots after which nothing came): once the
loop is over and the machine is back on its default kernel (the stock one:
the loop's last reboot, through the firmware and grub), the loop's state
directory is copied to RESULTS/ab/<name>, what the loop left on the
machine to RESULTS/ab-end.json, the journal of its unit to
RESULTS/ab-journal.txt, and the guest powers off. A loop that stops or
fails, or ends without its reboot, ends the run too, saying so.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(sys.argv[1])
LOOP = Path("/nttrace/ab-loop")
CONFIG = json.loads((LOOP / "config.json").read_text())
NAME = CONFIG["name"]
STATE = Path(os.environ.get("NTTRACE_AB_DIR", "/var/lib/nttrace/ab")) / NAME
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


def status() -> dict:
    p = subprocess.run([NTTRACE, "ab", "status", NAME, "--json"], capture_output=True, text=True, timeout=300)
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
    for cmd in CONFIG.get("setup", []):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        say(f"setup: {' '.join(cmd)}: exit {p.returncode}")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")


def start() -> int:
    setup()
    cmd = [NTTRACE, "ab", "start", NAME, "--base", CONFIG["kernels"]["base"], "--patched",
           CONFIG["kernels"]["patched"], "--boots", str(CONFIG["boots"]), "--via", CONFIG["via"],
           "--seed", str(CONFIG["seed"]), "--yes", *CONFIG["check_args"]]
    # --yes: the lab answers start's question for the user who typed the command
    say("starting the loop: " + " ".join(cmd))
    record("start", command=cmd)
    # its output straight to the share: a start that boots at once never returns here
    with open(RESULTS / "ab-start.log", "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=900)
    say(f"nttrace ab start exited {p.returncode}")
    return p.returncode


def _out(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    return (p.stdout + p.stderr).strip()


def left_behind() -> dict:
    """What of the loop is on the machine now: its unit (file, enabled),
    a kexec kernel loaded, its systemd and sysctl drop-ins, the watchdog
    systemd is feeding, a one-shot entry in grubenv."""
    units = _out(["systemctl", "list-unit-files", "--no-legend", "--plain", "nttrace-ab*"])
    enabled = [os.path.basename(p) for p in glob.glob("/etc/systemd/system/*.wants/nttrace-ab*")]
    kexec_loaded = Path("/sys/kernel/kexec_loaded")
    return {"unit_files": units.splitlines(), "enabled": enabled,
            "kexec_loaded": kexec_loaded.read_text().strip() if kexec_loaded.exists() else None,
            "dropins": sorted(glob.glob("/etc/systemd/system.conf.d/nttrace-ab*")
                              + glob.glob("/etc/sysctl.d/*nttrace-ab*")),
            "watchdog": _out(["systemctl", "show", "-p", "RuntimeWatchdogUSec", "-p", "RebootWatchdogUSec",
                              "-p", "KExecWatchdogUSec"]).splitlines(),
            "grubenv": _out(["grub-editenv", "/boot/grub/grubenv", "list"]).splitlines(),
            "sysctl": {k: Path(f"/proc/sys/kernel/{k}").read_text().strip()
                       for k in ("panic", "panic_on_oops", "softlockup_panic") if Path(f"/proc/sys/kernel/{k}").exists()}}


def finish(rc: int, why: str, st: dict) -> None:
    """Copy the loop's state out, record what it left behind, power off."""
    say(f"the loop is over ({why}): copying its state, powering off")
    out = RESULTS / "ab" / NAME
    shutil.rmtree(out, ignore_errors=True)
    if STATE.exists():
        shutil.copytree(STATE, out)
    end = {"why": why, "status": st, "kernel": running_kernel(), "release": os.uname().release,
           "build": os.uname().version, "booted_by": booted_by(), "cmdline": Path("/proc/cmdline").read_text().strip(),
           "injected": sorted(p.name.removeprefix("injected-") for p in Path("/var/lib/nttrace-lab").glob("injected-*")),
           **left_behind()}
    (RESULTS / "ab-end.json").write_text(json.dumps(end, indent=1))
    # the journal is on the disk: the loop's unit and the lab's, across every boot
    journal = subprocess.run(["journalctl", "--no-pager", "-o", "short-monotonic", "-u", f"nttrace-ab-{NAME}.service",
                              "-u", "nttrace-lab-boot.service", "-u", "nttrace-lab-loop.service"],
                             capture_output=True, text=True, timeout=300)
    (RESULTS / "ab-journal.txt").write_text(journal.stdout + journal.stderr)
    boots = subprocess.run(["journalctl", "--no-pager", "--list-boots"], capture_output=True, text=True, timeout=120)
    (RESULTS / "ab-journal-boots.txt").write_text(boots.stdout + boots.stderr)
    record("end", why=why, rc=rc)
    (RESULTS / "guest-run.rc").write_text(f"{rc}\n")
    os.sync()
    subprocess.run(["systemctl", "--no-block", "poweroff"])


def main() -> None:
    if not STATE.exists():
        rc = start()
        if rc != 0:
            return finish(rc, f"nttrace ab start exited {rc}", status())
        # start queued the boot into the schedule's first kernel: this boot ends
        return wait_for_the_next_boot(status(), "nttrace ab start returned and no boot followed")
    st = status()
    record("after the step", state=st.get("state"), status=st)
    state = st.get("state")
    if state == "complete" and running_kernel() is None:
        return finish(0, "complete, back on the default kernel", st)
    if state in ("stopped", "failed"):
        return finish(1, f"the loop {state}: {st.get('why')}", st)
    wait_for_the_next_boot(st, "complete, and no reboot into the default kernel followed" if state == "complete"
                           else f"the loop's step ran, state {state}, and no boot followed")


def wait_for_the_next_boot(st: dict, why: str) -> None:
    """A kexec or reboot is queued: it ends this process. Past REBOOT_GRACE_S
    it did not come: the run ends, saying so."""
    deadline = time.monotonic() + REBOOT_GRACE_S
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        st = status()
        if st.get("state") in ("stopped", "failed"):
            return finish(1, f"the loop {st['state']}: {st.get('why')}", st)
    finish(1, f"{why} within {REBOOT_GRACE_S} s", st)


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
