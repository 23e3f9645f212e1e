"""The loop's one-shot systemd unit, nttrace-ab-NAME.service: at each boot it
runs the schedule's own command, `/abs/path/nttrace ab step NAME`, and
nothing else. Enabled by `ab start`, disabled and removed by `ab stop`, at
completion and whenever the loop stops on a fault.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from nttrace.ab import store

UNIT_DIR = Path("/etc/systemd/system")
SYSTEMD_RUNNING = Path("/run/systemd/system")     # sd_booted(3)'s test


def unit_name(name: str) -> str:
    return f"nttrace-ab-{store.check_name(name)}.service"


def command(exe: str, name: str) -> list[str]:
    return [exe, "ab", "step", store.check_name(name)]


def text(name: str, exe: str, state_root: Path) -> str:
    env = ""
    if os.environ.get("NTTRACE_AB_DIR"):
        env = f"Environment={shlex.quote('NTTRACE_AB_DIR=' + str(state_root))}\n"
    return (f"# written by `nttrace ab start {name}`; removed by `nttrace ab stop {name}` and when the loop ends\n"
            "[Unit]\n"
            f"Description=nttrace ab {name}: one boot of the base/patched A/B (docs/ab-loop.md)\n"
            "After=local-fs.target network.target\n"
            f"ConditionPathExists={state_root / name / 'schedule.json'}\n"
            "\n[Service]\n"
            "Type=oneshot\n"
            f"ExecStart={shlex.join(command(exe, name))}\n"
            f"{env}"
            "TimeoutStartSec=infinity\n"
            "\n[Install]\n"
            "WantedBy=multi-user.target\n")


def systemd_running() -> bool:
    return SYSTEMD_RUNNING.is_dir()


def _systemctl(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120)


def install(name: str, exe: str, state_root: Path, unit_dir: Path = UNIT_DIR, systemctl=_systemctl) -> Path:
    path = unit_dir / unit_name(name)
    store.write_atomic(path, text(name, exe, state_root))
    os.chmod(path, 0o644)
    for args in (["daemon-reload"], ["enable", unit_name(name)]):
        p = systemctl(args)
        if p.returncode != 0:
            remove(name, unit_dir, systemctl)
            raise RuntimeError(f"systemctl {' '.join(args)}: {(p.stderr or '').strip()[-200:]}")
    return path


def remove(name: str, unit_dir: Path = UNIT_DIR, systemctl=_systemctl) -> list[str]:
    """Disable and delete the unit (whatever is there); returns what it did."""
    done = []
    path = unit_dir / unit_name(name)
    if path.exists():
        systemctl(["disable", unit_name(name)])
        path.unlink()
        systemctl(["daemon-reload"])
        done.append(f"disabled and removed {path}")
    return done


def installed(name: str, unit_dir: Path = UNIT_DIR) -> bool:
    return (unit_dir / unit_name(name)).exists()
