# SPDX-License-Identifier: Apache-2.0
"""The loop's state directory and its files, each written whole.

`$NTTRACE_AB_DIR` or /var/lib/nttrace/ab holds one directory per loop NAME,
root-only (0700). Every file in it is written to a temporary name in the same
directory, flushed to disk (fsync), renamed into place and the directory
flushed: a power cut leaves the old file or the new one, never half of one.
The state keeps its previous copy beside it (state.json.prev, a hard link to
the old file renamed into place before the new one is): where a filesystem
without a journal loses the rename, one of the two still reads. The events
are also appended, a line each, to events.jsonl (fsync'd), so a state that
neither copy holds can be rebuilt. A run is kept only when its file parses
whole and says it is complete; a temporary left by a cut is removed and the
run redone.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from nttrace.errors import UsageError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TMP_SUFFIX = ".tmp"
PREV_SUFFIX = ".prev"


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
    """Create path (and its parents) root-only; an existing one is made 0700.
    A directory it creates has its name flushed to disk in its parent (the
    files later written in it are only as durable as that name)."""
    new = not path.is_dir()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    if new:
        _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def previous(path: Path) -> Path:
    return path.with_name(path.name + PREV_SUFFIX)


def write_atomic(path: Path, text: str, keep_previous: bool = False) -> None:
    """Write text to path whole: tmp + fsync + rename + fsync of the directory.
    On any error (disk full) the tmp is removed and the old file is left.
    keep_previous: the old file (where there is one) becomes path.prev first,
    by a hard link renamed into place, so either name always holds a whole
    copy."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        tmp.unlink()          # a cut's leftover, or a link someone planted: never written through
    except FileNotFoundError:
        pass
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            _write_all(fd, text.encode())
        finally:
            os.close(fd)
        if keep_previous:
            _keep_previous(path)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of data to fd (os.write may write less), then to the disk."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def _keep_previous(path: Path) -> None:
    prev = previous(path)
    link = prev.with_name(prev.name + TMP_SUFFIX)
    try:
        link.unlink()
    except FileNotFoundError:
        pass
    try:
        os.link(path, link, follow_symlinks=False)
    except FileNotFoundError:
        return                  # no old file: nothing to keep
    os.replace(link, prev)


def write_json(path: Path, obj, keep_previous: bool = False) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n", keep_previous)


def append_line(path: Path, line: str) -> None:
    """Append one line to path and flush it to disk (a cut loses at most the
    line being written; the reader skips a line that does not parse)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        new = os.fstat(fd).st_size == 0
        _write_all(fd, ("\n" + line + "\n").encode() if _ends_cut(fd) else (line + "\n").encode())
    finally:
        os.close(fd)
    if new:
        _fsync_dir(path.parent)     # the new file's name, too


def _ends_cut(fd: int) -> bool:
    """The file does not end with a newline (a line cut by a power cut)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read_lines(path: Path) -> list:
    """Each line of path that parses as JSON (a cut line is skipped)."""
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


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
