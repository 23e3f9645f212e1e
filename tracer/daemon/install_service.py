"""`nttrace install-service`: put the daemon in place as a systemd service,
as a user would by hand: the shipped unit in /etc/systemd/system, the
example config and web config in /etc/nttrace (never over existing ones), and the entry
point this nttrace runs from at /usr/local/bin/nttrace, which the unit's
ExecStart names. Then `systemctl daemon-reload` where systemd runs.

`--root DIR` installs under DIR instead of / (a package build, a test)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from nttrace.errors import EXIT_OK, UsageError

DATA = Path(__file__).resolve().parents[1] / "data"
UNIT = "etc/systemd/system/nttrace.service"
# off until enabled: systemctl enable --now nttrace-validate.timer
VALIDATE_UNITS = ("etc/systemd/system/nttrace-validate.service", "etc/systemd/system/nttrace-validate.timer")
CONFIG = "etc/nttrace/nttrace.toml"
WEB_CONFIG = "etc/nttrace/web-config.yml"
ENTRY = "usr/local/bin/nttrace"


def entry_point() -> Path:
    """The nttrace console script of this installation (a venv's bin/)."""
    exe = Path(sys.executable).with_name("nttrace")
    if exe.exists():
        return exe
    found = shutil.which("nttrace")
    if found:
        return Path(found).resolve()
    raise UsageError("cannot find this installation's nttrace entry point next to "
                     f"{sys.executable} or on PATH")


def install(root: Path = Path("/"), reload: bool = True) -> list[str]:
    """Install; returns what it did, a line each."""
    done = []
    if not root.is_dir():
        raise UsageError(f"--root {root}: not a directory")
    unit = root / UNIT
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text((DATA / "nttrace.service").read_text())
    done.append(f"unit     {unit}")
    for rel in VALIDATE_UNITS:
        u = root / rel
        u.write_text((DATA / Path(rel).name).read_text())
        done.append(f"unit     {u} (off until: systemctl enable --now nttrace-validate.timer)")
    for rel, example, what in ((CONFIG, "nttrace.toml", "config  "), (WEB_CONFIG, "web-config.yml", "web     ")):
        cfg = root / rel
        cfg.parent.mkdir(parents=True, exist_ok=True)
        if cfg.exists():
            done.append(f"{what} {cfg} (kept: it exists)")
        else:
            cfg.write_text((DATA / example).read_text())
            cfg.chmod(0o600)   # it holds password hashes
            done.append(f"{what} {cfg} (the example: not in use until nttrace.toml names it)")
    link = root / ENTRY
    link.parent.mkdir(parents=True, exist_ok=True)
    target = entry_point()
    if link.is_symlink() or link.exists():
        if link.resolve() != target.resolve():
            link.unlink()
    if not link.exists():
        link.symlink_to(target)
    done.append(f"entry    {link} -> {target}")
    from nttrace.probes.capabilities import perf_paranoid_hint
    hint = perf_paranoid_hint()
    if hint and root == Path("/"):
        done.append(f"warning  {hint}")
    if reload and root == Path("/") and Path("/run/systemd/system").is_dir():
        p = subprocess.run(["systemctl", "daemon-reload"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise UsageError(f"systemctl daemon-reload failed: {p.stderr.strip()}")
        done.append("systemd  daemon-reload; start with: systemctl enable --now nttrace")
    else:
        done.append("systemd  not running here (or --root): run `systemctl daemon-reload` on the target")
    return done


def main(args) -> int:
    if os.geteuid() != 0 and Path(args.root) == Path("/"):
        from nttrace.errors import CapabilityError
        raise CapabilityError("nttrace install-service writes under /etc and /usr/local: run as root")
    for line in install(Path(args.root)):
        print(line)
    return EXIT_OK
