# SPDX-License-Identifier: Apache-2.0
"""nttrace run as `nobody`, from a clone `nobody` cannot reach.

The privilege tests drop to uid 65534 and run `nttrace validate`. A clone
under a 0700 directory (root's home is one) keeps `nobody` from the venv's
interpreter and site-packages, and the command then fails with "Permission
denied" before nttrace runs. So the command is staged: nttrace as installed
in the venv, and the distributions it requires that the venv holds, are
copied into a world-readable temporary directory and run by the interpreter
the venv was made from (whose own site-packages hold Debian's bcc and perf
modules, as --system-site-packages gave them to the venv). Nothing of the
clone is opened up; the copy is removed afterwards.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

NOBODY = 65534
# setpriv to nobody, no groups, no capabilities (inheritable or bounding)
DROP = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
MAIN = "import sys; sys.argv[0] = 'nttrace'; from nttrace.cli import main; sys.exit(main())"


@dataclass
class Staged:
    argv: list[str]     # the command: this, then nttrace's arguments
    env: dict[str, str]
    cwd: Path           # a directory nobody can enter (the clone may not be one)


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    return [re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0] for req in dist.requires or () if "extra ==" not in req]


def distributions_in(site: Path, name: str = "nttrace") -> list[metadata.Distribution]:
    """`name`'s distribution and those it requires, transitively, that are installed in `site`."""
    found: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        want = todo.pop()
        key = want.lower().replace("_", "-")
        if key in found:
            continue
        dist = next((d for d in metadata.distributions(path=[str(site)])
                     if d.metadata["Name"].lower().replace("_", "-") == key), None)
        if dist is None:
            continue        # not in this site-packages: the base interpreter's (Debian's python3-yaml, ...)
        found[key] = dist
        todo += _requirement_names(dist)
    return list(found.values())


def copy_installed(site: Path, into: Path) -> None:
    """The files of nttrace's distributions in `site` (their RECORD), copied into `into`."""
    for dist in distributions_in(site):
        for f in dist.files or ():
            src = site / f
            if ".." in f.parts or not src.is_file():
                continue    # a console script in bin/, or a .pyc not written
            dst = into / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def _world_readable(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | (0o555 if p.is_dir() else 0o444))


@contextmanager
def staged_nttrace(site: Path | None = None):
    """Yields a Staged command that runs the nttrace installed in `site`
    (default: this interpreter's, the venv's) as nobody can run it."""
    import nttrace
    site = site or Path(nttrace.__file__).resolve().parents[1]
    stage = Path(tempfile.mkdtemp(prefix="nttrace-as-nobody-"))
    try:
        copy_installed(site, stage / "site-packages")
        _world_readable(stage)
        base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(stage / "site-packages"),
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(stage), "LANG": os.environ.get("LANG", "C.UTF-8")}
        yield Staged([base, "-c", MAIN], env, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
