# SPDX-License-Identifier: Apache-2.0
"""The systemd scenario, run inside a guest booted with systemd as PID 1
(guest-systemd.sh, started by the image's nttrace-lab-systemd.service):
nttrace's shipped unit (the file the Debian package installs; the package
itself is lab/guest_deb.py's) run from the wheel in /opt/venv, started,
reloaded, hung, restarted by the watchdog and stopped by systemd itself.
Writes RESULTS/systemd.json; the
host scrapes /metrics through the forwarded port while the service runs."""
from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

from guest_scenarios import NTTRACE, RESULTS, sh  # noqa: E402  (same directory, same argv)
from lab_checks import wait_until, write_result  # noqa: E402
import nttrace  # noqa: E402  (the wheel installed in the guest's venv)
from nttrace.probes.copy import CopyProbe  # noqa: E402
from nttrace.probes.migrate import MigrateProbe  # noqa: E402

CONFIG = Path("/etc/nttrace/nttrace.toml")
# The lab runs the wheel's entry point and shortens the watchdog so a hang is
# caught in seconds, not 30 s; everything else is the shipped unit.
DROPIN = f"[Service]\nExecStart=\nExecStart={NTTRACE} daemon --config {CONFIG}\nWatchdogSec=6s\nRestartSec=1s\n"


def prop(name: str) -> str:
    return sh("systemctl", "show", "-p", name, "--value", "nttrace").stdout.strip()


def healthz() -> dict | None:
    try:
        with urllib.request.urlopen("http://127.0.0.1:9435/healthz", timeout=10) as r:
            return json.loads(r.read())
    except OSError:
        return None   # not listening (yet, or any more)


def nttrace_programs() -> list[str]:
    progs = json.loads(sh("bpftool", "-j", "prog", "show").stdout or "[]")
    return sorted(p.get("name", "") for p in progs if p.get("name", "").startswith("nttrace"))


def caps_of(pid: str) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"^{k}:\s*(\w+)", status, re.M).group(1), 16) for k in ("CapEff", "CapBnd", "CapPrm")}


def journal() -> str:
    status = sh("systemctl", "status", "--no-pager", "nttrace", check=False).stdout
    return status + sh("journalctl", "-u", "nttrace", "--no-pager", "-o", "cat", check=False).stdout[-4000:]


def main() -> dict:
    out: dict = {"pid1": Path("/proc/1/comm").read_text().strip()}
    unit = Path(nttrace.__file__).parent / "data" / "nttrace.service"
    Path("/etc/systemd/system/nttrace.service").write_text(unit.read_text())
    out["unit_execstart"] = re.search(r"^ExecStart=(.*)$", unit.read_text(), re.M).group(1)
    CONFIG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG.write_text(f'listen = "0.0.0.0:9435"\nprobes = ["{MigrateProbe.name}"]\nperf = []\n')
    d = Path("/etc/systemd/system/nttrace.service.d")
    d.mkdir(parents=True, exist_ok=True)
    (d / "lab.conf").write_text(DROPIN)
    sh("systemctl", "daemon-reload")
    out["unit_verify"] = sh("systemd-analyze", "verify", "nttrace.service", check=False).stderr[-2000:]

    # Debian's kernel.perf_event_paranoid=3 refuses perf_event_open without
    # CAP_SYS_ADMIN: the service must fail at once, saying so, not hang
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    out["perf_event_paranoid"] = paranoid.read_text().strip()
    if int(out["perf_event_paranoid"]) > 2:
        t0 = time.monotonic()
        out["paranoid_start_rc"] = sh("systemctl", "start", "nttrace", check=False, timeout=300).returncode
        out["paranoid_start_s"] = time.monotonic() - t0
        wait_until(lambda: prop("ActiveState") != "activating", 60)
        out["paranoid_journal"] = journal()
        sh("systemctl", "stop", "nttrace", check=False)
        sh("systemctl", "reset-failed", "nttrace", check=False)
        paranoid.write_text("2\n")    # what the unit's comment and the README tell an admin to do

    # start: `systemctl start` returns when the unit is active, which for
    # Type=notify is READY=1; meanwhile it is "activating"
    states = []
    t0 = time.monotonic()
    starter = subprocess.Popen(["systemctl", "start", "nttrace"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    while starter.poll() is None and time.monotonic() - t0 < 300:
        states.append(prop("ActiveState"))
        time.sleep(0.2)
    out["start_s"] = time.monotonic() - t0
    out["start_rc"] = starter.wait(timeout=10)
    out["start_stderr"] = starter.stderr.read()[-2000:]
    out["states_while_starting"] = sorted(set(states))
    out["active_after_start"] = prop("ActiveState")
    pid = prop("MainPID")
    out["main_pid"] = pid
    if pid == "0":
        out["journal"] = journal()
        raise RuntimeError(f"nttrace.service is {out['active_after_start']} with no main process after start:\n"
                           + out["journal"])
    out["caps"] = caps_of(pid)
    out["health_after_start"] = healthz()
    out["programs_running"] = nttrace_programs()

    # the host scrapes /metrics now
    (RESULTS / "daemon-ready").write_text(f"{out['start_s']}\n")
    out["host_scraped"] = bool(wait_until(lambda: (RESULTS / "host-scraped").exists(), 300))

    # reload applies a probe change
    CONFIG.write_text(f'listen = "0.0.0.0:9435"\nprobes = ["{MigrateProbe.name}", "{CopyProbe.name}"]\nperf = []\n')
    t0 = time.monotonic()
    out["reload_rc"] = sh("systemctl", "reload", "nttrace", check=False).returncode
    out["reload_s"] = time.monotonic() - t0
    out["health_after_reload"] = wait_until(lambda: (h := healthz()) and CopyProbe.name in h["probes"] and h, 120)
    out["restarts_during_reload"] = int(prop("NRestarts") or 0)
    out["pid_after_reload"] = prop("MainPID")

    # a hung main loop: the watchdog kills it and systemd starts it again
    restarts = int(prop("NRestarts") or 0)
    sh("kill", "-STOP", pid)
    t0 = time.monotonic()
    new_pid = wait_until(lambda: (p := prop("MainPID")) not in ("0", pid) and prop("ActiveState") == "active" and p,
                         180, step=0.5)
    out["watchdog_restart_s"] = time.monotonic() - t0
    out["pid_after_watchdog"] = new_pid
    out["restarts"] = int(prop("NRestarts") or 0) - restarts
    out["result_after_watchdog"] = journal()
    out["health_after_watchdog"] = wait_until(lambda: healthz(), 60)

    # stop: quickly, and nothing left loaded
    t0 = time.monotonic()
    out["stop_rc"] = sh("systemctl", "stop", "nttrace", check=False).returncode
    out["stop_s"] = time.monotonic() - t0
    out["inactive_after_stop"] = prop("ActiveState")
    wait_until(lambda: not nttrace_programs(), 2)   # freed once the process's descriptors close
    out["programs_after_stop"] = nttrace_programs()
    return out


if __name__ == "__main__":
    write_result(RESULTS / "systemd.json", main)
