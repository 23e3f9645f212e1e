"""The loop's state directory and its files, each written whole.

`$NTTRACE_AB_DIR` or /var/lib/nttrace/ab holds one directory per loop NAME,
root-only (0700). Every file in it is written to a temporary name in the same
directory, flushed to disk (fsync), renamed into place and the directory
flushed: a power cut leaves the old file or the new one, never half of one.
A run is kept only when its file parses whole and says it is complete; a
temporary left by a cut is removed and the run redone.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from nttrace.errors import UsageError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TMP_SUFFIX = ".tmp"


def root() -> Path:
    """Absolute: the unit's Environment= and ConditionPathExists= name it from /."""
    return Path(os.environ.get("NTTRACE_AB_DIR", "/var/lib/nttrace/ab")).absolute()


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or ""):
        raise UsageError(f"ab: NAME {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter "
                         "or digit")
    return name


def loop_dir(name: str) -> Path:
    return root() / check_name(name)


def make_root() -> Path:
    """The directory of all loops: made root-only where `start` creates it; one
    that exists (a $NTTRACE_AB_DIR the user chose, /tmp even) keeps its mode,
    each loop's own directory inside it being 0700."""
    path = root()
    if not path.is_dir():
        make_private_dir(path)
    return path


def make_private_dir(path: Path) -> None:
    """Create path (and its parents) root-only; an existing one is made 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write text to path whole: tmp + fsync + rename + fsync of the directory.
    On any error (disk full) the tmp is removed and the old file is left."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        tmp.unlink()          # a cut's leftover, or a link someone planted: never written through
    except FileNotFoundError:
        pass
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            data = text.encode()
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def read_json(path: Path):
    """The file's JSON, or None where it is missing or does not parse whole."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def remove_partial(directory: Path) -> list[str]:
    """Remove the temporaries a cut left in directory; returns their names."""
    gone = []
    if directory.is_dir():
        for p in directory.iterdir():
            if p.name.endswith(TMP_SUFFIX):
                try:
                    p.unlink()
                    gone.append(p.name)
                except OSError:
                    pass
    return gone
