# SPDX-License-Identifier: Apache-2.0
"""The loop's systemd units: instances of three templates nttrace ships
(tracer/data; the Debian package installs them in systemd's unit directory):

  nttrace-ab@NAME.service           at each boot, once the machine is up, the
                                    schedule's own command, `/abs/path/nttrace
                                    ab step NAME`, and nothing else
  nttrace-ab-deadline@NAME.timer    the boot deadline: started with the first
                                    units of every boot, it fires unless the
                                    step stopped it in time
  nttrace-ab-deadline@NAME.service  what it fires, and what emergency.target
                                    and rescue.target want: `nttrace ab step
                                    NAME --deadline` records the boot that
                                    never reached the step and resets the
                                    machine; only at the boots of the loop's
                                    kernels

`ab start` enables the three and writes each instance's
drop-in (NAME.service.d/loop.conf and the like under /etc/systemd/system):
the absolute path of the nttrace that started the loop, the state
directory, the step's TimeoutStartSec, the deadline and the loop's kernels'
releases. Where the templates are not installed (nttrace run from a venv or
a checkout), `start` writes them under /etc/systemd/system too, marked as
its own, and the last loop to end removes them. Every way a loop ends
(complete, `ab stop`, a fault) disables the instances and removes the
drop-ins; removing the units also disarms the loop's reset path
(nttrace.ab.reset: the watchdog's, the panic settings' and grub's drop-ins),
so no way of ending a loop leaves them behind.

The step is ordered After=multi-user.target: the checks run on a system
whose services have started, and the boot does not wait for them.
TimeoutStartSec bounds a step that hangs past its own bounds; ExecStopPost,
the same command with --ended, runs after every step and stops the loop
when systemd ended the step (that timeout, a signal), which the step itself
cannot record.

The deadline bounds the time from the kernel's start to the step's: a boot
that drops to emergency.target or rescue.target (a mount in fstab the
kernel cannot bring up), or hangs with PID 1 alive (which keeps feeding
the watchdog), never starts the step. Both units are kept when systemd
isolates emergency or rescue mode (IgnoreOnIsolate), and the service runs
only where the running kernel is one of the loop's (ConditionKernelVersion),
so the default kernel a reset brings up is never reset by it.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from nttrace.ab import reset, store
from nttrace.errors import UsageError

UNIT_DIR = Path("/etc/systemd/system")
SYSTEMD_RUNNING = Path("/run/systemd/system")     # sd_booted(3)'s test
# where a package installs the templates (systemd's unit directories, /usr first)
PACKAGE_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
DATA = Path(__file__).resolve().parents[1] / "data"
TEMPLATES = ("nttrace-ab@.service", "nttrace-ab-deadline@.timer", "nttrace-ab-deadline@.service")
OWN_MARK = "# installed by `nttrace ab start`"    # a template copy start wrote, not the package's
STEP_MARGIN_S = 1800      # beyond the wait and validate: kexec -l, systemctl, the report at the end
DEADLINE_MIN_S = 600      # the boot deadline's floor, whatever the measured boot
DEADLINE_BOOTS = 4        # and its default: this many times the measured boot, where that is more
# the per-loop unit a loop started before the templates has (removed with the loop)
PLAIN_UNIT = "nttrace-ab-{name}.service"


def unit_name(name: str) -> str:
    return f"nttrace-ab@{store.check_name(name)}.service"


def timer_name(name: str) -> str:
    return f"nttrace-ab-deadline@{store.check_name(name)}.timer"


def deadline_name(name: str) -> str:
    return f"nttrace-ab-deadline@{store.check_name(name)}.service"


def command(exe: str, name: str) -> list[str]:
    return [exe, "ab", "step", store.check_name(name)]


def timeout_s(sched: dict) -> int:
    """TimeoutStartSec: the longest a step may take (the quiet-host wait,
    validate's own timeout, then the boot commands or the report), so a step
    that hangs past its own bounds is ended by systemd."""
    return int(sched["wait_quiet_s"]) + int(sched["validate_timeout_s"]) + STEP_MARGIN_S


def default_deadline_s(boot_s: float | None) -> int:
    """The boot deadline when the user gives none: DEADLINE_BOOTS times this
    machine's measured boot, at least DEADLINE_MIN_S, in whole minutes."""
    want = max(DEADLINE_MIN_S, DEADLINE_BOOTS * (boot_s or 0))
    return int(-(-want // 60) * 60)


def _plain(path) -> str:
    """A path as a unit writes it: no % (systemd's specifiers), $ (its
    variables), quote, backslash, space or control character, which systemd
    would expand or split; UsageError (exit 2) otherwise."""
    text = str(path)
    if re.search(r"[%$'\"\\\s\x00-\x1f\x7f]", text):
        raise UsageError(f"ab start: {text!r}: a path with %, $, quotes, spaces or control characters cannot be "
                         "written into a systemd unit as it is; use another")
    return text


def dropins(name: str, exe: str, state_root: Path, timeout: int, deadline_s: int, releases: list[str]) -> dict:
    """{unit: its drop-in's text} for the loop's three instances."""
    exe, state_root = _plain(exe), Path(_plain(state_root))
    head = f"# written by `nttrace ab start {name}`; removed when the loop ends (docs/ab-loop.md)\n"
    env = (f"Environment={shlex.quote('NTTRACE_AB_DIR=' + str(state_root))}\n"
           if os.environ.get("NTTRACE_AB_DIR") else "")
    rw = "" if state_root == Path("/var/lib/nttrace/ab") else f"ReadWritePaths={state_root}\n"
    for r in releases:
        if not re.fullmatch(r"[\w.+~-]+", r):
            raise UsageError(f"ab start: release {r!r} cannot be named in a unit's ConditionKernelVersion")
    return {
        unit_name(name): head + "[Unit]\n"
        "ConditionPathExists=\n"
        f"ConditionPathExists={state_root / name / 'schedule.json'}\n"
        "\n[Service]\n"
        "ExecStart=\n"
        f"ExecStart={shlex.join(command(exe, name))}\n"
        "ExecStopPost=\n"
        f"ExecStopPost={shlex.join(command(exe, name) + ['--ended'])}\n"
        f"{env}{rw}"
        f"TimeoutStartSec={timeout}\n",
        timer_name(name): head + "[Timer]\n"
        "OnBootSec=\n"
        f"OnBootSec={deadline_s}\n",
        deadline_name(name): head + "[Unit]\n"
        # only at the boots of the loop's kernels: the default kernel is never reset
        + "".join(f"ConditionKernelVersion=|{r}\n" for r in releases)
        + "\n[Service]\n"
        "ExecStart=\n"
        f"ExecStart={shlex.join(command(exe, name) + ['--deadline'])}\n"
        f"{env}{rw}",
    }


def systemd_running() -> bool:
    return SYSTEMD_RUNNING.is_dir()


def _systemctl(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120)


def packaged(unit_dirs=PACKAGE_UNIT_DIRS) -> bool:
    """The templates are installed where a package puts them."""
    return all(any((d / t).is_file() for d in unit_dirs) for t in TEMPLATES)


def _dropin_dir(unit: str, unit_dir: Path) -> Path:
    return unit_dir / f"{unit}.d"


def install(name: str, texts: dict, unit_dir: Path | None = None, systemctl=_systemctl,
            unit_dirs=PACKAGE_UNIT_DIRS) -> list[str]:
    """The templates (where no package installed them), the instances'
    drop-ins, daemon-reload, and the step and the deadline enabled; returns
    what it did. RuntimeError where systemctl fails (the caller removes
    what was written)."""
    unit_dir = unit_dir or UNIT_DIR
    done = []
    if not packaged(unit_dirs):
        for t in TEMPLATES:
            path = unit_dir / t
            store.write_atomic(path, f"{OWN_MARK}: the package's template is not installed\n"
                               + (DATA / t).read_text())
            os.chmod(path, 0o644)
        done.append(f"wrote the templates {', '.join(TEMPLATES)} in {unit_dir} (no package installed them)")
    for unit, text in texts.items():
        d = _dropin_dir(unit, unit_dir)
        d.mkdir(mode=0o755, exist_ok=True)
        store.write_atomic(d / "loop.conf", text)
        os.chmod(d / "loop.conf", 0o644)
    for args in (["daemon-reload"], ["enable", unit_name(name), timer_name(name), deadline_name(name)]):
        p = systemctl(args)
        if p.returncode != 0:
            raise RuntimeError(f"systemctl {' '.join(args)}: {(p.stderr or '').strip()[-200:]}")
    done.append(f"enabled {unit_name(name)}, {timer_name(name)} and {deadline_name(name)} (wanted by "
                "emergency.target and rescue.target)")
    return done


def stop_deadline(name: str, systemctl=_systemctl) -> str | None:
    """Stop this boot's deadline (the step started in time); None where it
    stopped, else why not."""
    try:
        p = systemctl(["stop", "--no-block", timer_name(name)])
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if p.returncode == 0 else (p.stderr or "").strip()[-200:] or f"exit {p.returncode}"


def remove(name: str, unit_dir: Path | None = None, systemctl=_systemctl, root: Path | None = None) -> list[str]:
    """Disarm the loop's reset path (its watchdog, sysctl and grub drop-ins,
    nttrace.ab.reset), then disable the instances and delete their drop-ins
    (whatever is there), and the templates start wrote where no other loop
    has an instance: every way a loop ends goes through here. In that order
    because the last step runs it with a reboot under way, which may kill it
    at any point: while the step's instance is there, the next boot's step
    finds the loop over and runs this again; once it is gone, nothing of the
    loop is left. Returns what it did."""
    unit_dir = unit_dir or UNIT_DIR
    done = reset.disarm(name, root, systemctl)
    units = (unit_name(name), timer_name(name), deadline_name(name))
    plain = unit_dir / PLAIN_UNIT.format(name=store.check_name(name))
    if any(_dropin_dir(u, unit_dir).exists() for u in units) or plain.exists():
        systemctl(["disable", *units, *([plain.name] if plain.exists() else [])])
        for u in units:
            shutil.rmtree(_dropin_dir(u, unit_dir), ignore_errors=True)
        plain.unlink(missing_ok=True)
        done.append(f"disabled {', '.join(units)} and removed their drop-ins")
        others = [d for d in unit_dir.glob("nttrace-ab@*.service.d") if d.is_dir()]
        own = [unit_dir / t for t in TEMPLATES if _own(unit_dir / t)]
        if own and not others:
            for p in own:
                p.unlink(missing_ok=True)
            done.append(f"removed the templates start wrote in {unit_dir}")
        systemctl(["daemon-reload"])
    return done


def _own(path: Path) -> bool:
    try:
        return path.read_text().startswith(OWN_MARK)
    except OSError:
        return False


def installed(name: str, unit_dir: Path | None = None) -> bool:
    unit_dir = unit_dir or UNIT_DIR
    return _dropin_dir(unit_name(name), unit_dir).exists() \
        or (unit_dir / PLAIN_UNIT.format(name=store.check_name(name))).exists()


def unit_files(name: str, unit_dir: Path | None = None) -> list[Path]:
    """The files of the loop's units start writes (its drop-ins), for the plan."""
    return [_dropin_dir(u, unit_dir or UNIT_DIR) / "loop.conf"
            for u in (unit_name(name), timer_name(name), deadline_name(name))]
