"""The A/B loop's guest, at every boot (guest-ab.sh starts it as a unit of
its own): `nttrace ab` run by the lab as a user runs it on their machine.

First boot (no loop yet; the default kernel, QEMU's -kernel): the namespace
the checks rebind, then `nttrace ab start` with the loop's kernels from
their shares, the checks and boots of /nttrace/ab-loop/config.json (the
host's, ab_loop.py) and the command line every kexec'd boot gets: this
one's, with nttrace.boot=kexec (and nttrace.inject=panic-once for the fault
case). nttrace then kexecs into the schedule's first kernel.

Every boot (after the loop's own unit, whose step kexecs on while the loop
runs, so this runs only at the boots after which no kexec came): a line in
RESULTS/ab-boots.jsonl (guest-ab-boot.sh writes each boot's first). Once it is over and the guest is
back on its default kernel (the loop's last reboot), the loop's state
directory is copied to RESULTS/ab/<name>, what the loop left installed
to RESULTS/ab-end.json, and the guest powers off. A loop that stops or
fails, or completes without rebooting, ends the run too, saying so.
"""
from __future__ import annotations

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
    print(f"[{time.strftime('%H:%M:%S')}] guest_ab: {line}", flush=True)
    try:
        with open("/dev/console", "w") as c:
            c.write(f"nttrace-lab: {line}\n")
    except OSError:
        pass


def running_kernel() -> str | None:
    """The loop's variant running now (by its build string), or None."""
    build = os.uname().version
    for f in LOOP.glob("*.build"):
        if f.read_text().strip() == build:
            return f.stem
    return None


def booted_by() -> str:
    """'firmware': QEMU's -kernel (the first boot, or a reset); 'kexec': the loop's."""
    args = Path("/proc/cmdline").read_text().split()
    return "kexec" if "nttrace.boot=kexec" in args else "firmware"


def status() -> dict:
    p = subprocess.run([NTTRACE, "ab", "status", NAME, "--json"], capture_output=True, text=True, timeout=300)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"state": None, "rc": p.returncode, "stderr": p.stderr[-2000:], "stdout": p.stdout[-2000:]}


def record(event: str, **fields) -> None:
    line = {"event": event, "at": time.time(), "kernel": running_kernel(), "build": os.uname().version,
            "booted_by": booted_by(), **fields}
    with open(RESULTS / "ab-boots.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def kexec_cmdline() -> str:
    args = [a for a in Path("/proc/cmdline").read_text().split() if not a.startswith(("nttrace.boot=", "BOOT_IMAGE="))]
    args.append("nttrace.boot=kexec")
    if CONFIG.get("inject_panic"):
        args.append("nttrace.inject=panic-once")
    if CONFIG.get("no_udev"):
        args.append("nttrace.udev=off")
    return " ".join(args)


def setup() -> None:
    """What the checks need before the loop's first boot: the namespace they rebind."""
    for cmd in CONFIG.get("setup", []):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        say(f"setup: {' '.join(cmd)}: exit {p.returncode}")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")


def start() -> int:
    setup()
    kernel = CONFIG["kernels"]   # side -> the image in its share (guest-ab-boot.sh mounts them)
    cmd = [NTTRACE, "ab", "start", NAME, "--base", kernel["base"], "--patched", kernel["patched"],
           "--boots", str(CONFIG["boots"]), "--via", "kexec", "--cmdline", kexec_cmdline(),
           "--seed", str(CONFIG["seed"]), *CONFIG["check_args"]]
    say("starting the loop: " + " ".join(cmd))
    record("start", command=cmd)
    # its output straight to the share: a start that kexecs at once never returns here
    with open(RESULTS / "ab-start.log", "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=900)
    say(f"nttrace ab start exited {p.returncode}")
    return p.returncode


def finish(rc: int, why: str, st: dict) -> None:
    """Copy the loop's state out, record what it left behind, power off."""
    say(f"the loop is over ({why}): copying its state, powering off")
    out = RESULTS / "ab" / NAME
    shutil.rmtree(out, ignore_errors=True)
    if STATE.exists():
        shutil.copytree(STATE, out)
    units = subprocess.run(["systemctl", "list-unit-files", "--no-legend", "--plain", "nttrace-ab*"],
                           capture_output=True, text=True).stdout
    enabled = subprocess.run(["sh", "-c", "ls /etc/systemd/system/*.wants/ | grep '^nttrace-ab' || true"],
                             capture_output=True, text=True).stdout.split()
    kexec_loaded = Path("/sys/kernel/kexec_loaded")
    end = {"why": why, "status": st, "kernel": running_kernel(), "release": os.uname().release,
           "build": os.uname().version, "booted_by": booted_by(), "cmdline": Path("/proc/cmdline").read_text().strip(),
           "unit_files": units.splitlines(), "enabled": enabled,
           "kexec_loaded": kexec_loaded.read_text().strip() if kexec_loaded.exists() else None,
           "panicked_marker": Path("/var/lib/nttrace-lab/panicked").exists()}
    (RESULTS / "ab-end.json").write_text(json.dumps(end, indent=1))
    # the loop's unit and the lab's early one at every boot (the journal is on the disk)
    journal = subprocess.run(["journalctl", "--no-pager", "-o", "short-monotonic", "-u", f"nttrace-ab-{NAME}.service",
                              "-u", "nttrace-lab-ab-boot.service"], capture_output=True, text=True, timeout=300)
    (RESULTS / "ab-journal.txt").write_text(journal.stdout + journal.stderr)
    record("end", why=why, rc=rc)
    (RESULTS / "guest-run.rc").write_text(f"{rc}\n")
    os.sync()
    subprocess.run(["systemctl", "--no-block", "poweroff"])


def main() -> None:
    if not STATE.exists():
        rc = start()
        if rc != 0:
            return finish(rc, f"nttrace ab start exited {rc}", status())
        # start queued the kexec into the schedule's first kernel: this boot ends
        return wait_for_the_next_boot(status(), "nttrace ab start returned and no kexec followed")
    # this unit is ordered after the loop's (guest-ab.sh): its step has run,
    # and when it booted the next kernel this process never gets here
    st = status()
    record("after the step", state=st.get("state"), status=st)
    state = st.get("state")
    if state == "complete" and booted_by() == "firmware":
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
