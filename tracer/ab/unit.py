# SPDX-License-Identifier: Apache-2.0
"""The loop's one-shot systemd unit, nttrace-ab-NAME.service: at each boot it
runs the schedule's own command, `/abs/path/nttrace ab step NAME`, and
nothing else. Enabled by `ab start`, disabled and removed by `ab stop`, at
completion and whenever the loop stops on a fault.

It is ordered After=multi-user.target: the checks run on a system whose
services have started, and the boot does not wait for them (a target does
not order itself after a unit it wants that is ordered after it), so a
desktop or graphical.target comes up while validate runs. TimeoutStartSec
bounds a step that hangs past its own bounds; ExecStopPost, the same
command with --ended, runs after every step and stops the loop when systemd
ended the step (that timeout, a signal), which the step itself cannot record.
Removing the unit also disarms the loop's reset path (nttrace.ab.reset: the
watchdog's and the panic settings' drop-ins), so no way of ending a loop
leaves them behind.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from nttrace.ab import reset, store
from nttrace.errors import UsageError

UNIT_DIR = Path("/etc/systemd/system")
SYSTEMD_RUNNING = Path("/run/systemd/system")     # sd_booted(3)'s test
STEP_MARGIN_S = 1800      # beyond the wait and validate: kexec -l, systemctl, the report at the end


def unit_name(name: str) -> str:
    return f"nttrace-ab-{store.check_name(name)}.service"


def command(exe: str, name: str) -> list[str]:
    return [exe, "ab", "step", store.check_name(name)]


def timeout_s(sched: dict) -> int:
    """TimeoutStartSec: the longest a step may take (the quiet-host wait,
    validate's own timeout, then the boot commands or the report), so a step
    that hangs past its own bounds is ended by systemd."""
    return int(sched["wait_quiet_s"]) + int(sched["validate_timeout_s"]) + STEP_MARGIN_S


def _plain(path) -> str:
    """A path as the unit writes it: no % (systemd's specifiers), $ (its
    variables), quote, backslash or control character, which systemd would
    expand or split; UsageError (exit 2) otherwise."""
    text = str(path)
    if re.search(r"[%$'\"\\\x00-\x1f\x7f]", text):
        raise UsageError(f"ab start: {text!r}: a path with %, $, quotes or control characters cannot be written "
                         "into a systemd unit as it is; use another")
    return text


def text(name: str, exe: str, state_root: Path, timeout: int) -> str:
    exe, state_root = _plain(exe), Path(_plain(state_root))
    env = ""
    if os.environ.get("NTTRACE_AB_DIR"):
        env = f"Environment={shlex.quote('NTTRACE_AB_DIR=' + str(state_root))}\n"
    return (f"# written by `nttrace ab start {name}`; removed by `nttrace ab stop {name}` and when the loop ends\n"
            "[Unit]\n"
            f"Description=nttrace ab {name}: one boot of the base/patched A/B (docs/ab-loop.md)\n"
            "After=multi-user.target\n"
            f"ConditionPathExists={state_root / name / 'schedule.json'}\n"
            "\n[Service]\n"
            "Type=oneshot\n"
            f"ExecStart={shlex.join(command(exe, name))}\n"
            f"ExecStopPost={shlex.join(command(exe, name) + ['--ended'])}\n"
            f"{env}"
            f"TimeoutStartSec={timeout}\n"
            "\n[Install]\n"
            "WantedBy=multi-user.target\n")


def systemd_running() -> bool:
    return SYSTEMD_RUNNING.is_dir()


def _systemctl(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120)


def install(name: str, unit_text: str, unit_dir: Path = UNIT_DIR, systemctl=_systemctl) -> Path:
    path = unit_dir / unit_name(name)
    store.write_atomic(path, unit_text)
    os.chmod(path, 0o644)
    for args in (["daemon-reload"], ["enable", unit_name(name)]):
        p = systemctl(args)
        if p.returncode != 0:
            remove(name, unit_dir, systemctl)
            raise RuntimeError(f"systemctl {' '.join(args)}: {(p.stderr or '').strip()[-200:]}")
    return path


def remove(name: str, unit_dir: Path = UNIT_DIR, systemctl=_systemctl, root: Path | None = None) -> list[str]:
    """Disarm the loop's reset path (its watchdog and sysctl drop-ins,
    nttrace.ab.reset), then disable and delete the unit (whatever is
    there): every way a loop ends goes through here. In that order because
    the last step runs it with a reboot under way, which may kill it at any
    point: while the unit is there, the next boot's step finds the loop over
    and runs this again; once it is gone, nothing of the loop is left.
    Returns what it did."""
    done = reset.disarm(name, root, systemctl)
    path = unit_dir / unit_name(name)
    if path.exists():
        systemctl(["disable", unit_name(name)])
        path.unlink()
        systemctl(["daemon-reload"])
        done.append(f"disabled and removed {path}")
    return done


def installed(name: str, unit_dir: Path = UNIT_DIR) -> bool:
    return (unit_dir / unit_name(name)).exists()
