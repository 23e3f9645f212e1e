"""One loop's files: NAME/schedule.json (written once by `ab start`),
NAME/state.json (rewritten whole at every change), NAME/runs/<slot>-<side>.json
(one per successful boot), NAME/report/, and NAME/lock: whoever changes the
state holds it (`ab step` all through a boot but while validate runs, `ab
stop`), so a stop and a step never write over each other. And what each run and the schedule
record of nttrace itself (version, a hash of the installed package, the
commit of the tree it was installed from), so a loop whose nttrace changed
mid-way says so.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from nttrace import __version__
from nttrace.ab import schedule, store
from nttrace.errors import UsageError

STATES = ("running", "complete", "stopped", "failed")
PACKAGE = Path(__file__).resolve().parents[1]


def nttrace_exe() -> str:
    """The absolute path of the nttrace entry point this process runs as."""
    for cand in (Path(sys.argv[0]) if sys.argv and sys.argv[0] else None, Path(sys.executable).with_name("nttrace")):
        if cand is not None and cand.name == "nttrace" and cand.exists():
            return str(cand.resolve())
    found = shutil.which("nttrace")
    if not found:
        raise UsageError("ab: cannot find this installation's nttrace entry point")
    return str(Path(found).resolve())


def changeable_by_others(exe: str, package: Path = PACKAGE) -> list[str]:
    """The files the loop's unit runs as root at every boot (the entry point,
    the package) that a user other than root could change, a line each."""
    out = []
    for p in (Path(exe), package, *sorted(package.rglob("*.py"))):
        try:
            st = p.stat()
        except OSError:
            continue
        if st.st_uid != 0 or st.st_mode & 0o022:
            out.append(f"{p} (uid {st.st_uid}, mode {st.st_mode & 0o777:o})")
    return out


def package_sha256(package: Path = PACKAGE) -> str:
    """A hash of the installed package's source files: changes when nttrace does."""
    h = hashlib.sha256()
    for p in sorted(package.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".c", ".h") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(package)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def source_commit() -> str | None:
    """The commit of the tree nttrace was installed from (pip's direct_url),
    as that tree stands now, '+' where it has changes; None where unknown."""
    src = None
    try:
        from importlib import metadata
        url = json.loads(metadata.distribution("nttrace").read_text("direct_url.json") or "{}").get("url", "")
        if url.startswith("file://"):
            src = url[len("file://"):]
    except Exception:
        src = None
    if src is None and (PACKAGE.parent / ".git").exists():
        src = str(PACKAGE.parent)
    if not src:
        return None
    try:
        git = ["git", "-C", src]
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def nttrace_identity() -> dict:
    return {"version": __version__, "commit": source_commit(), "package_sha256": package_sha256()}


@dataclass
class Loop:
    """The directory of one loop and its files."""
    dir: Path

    @classmethod
    def named(cls, name: str) -> "Loop":
        return cls(store.loop_dir(name))

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def schedule_path(self) -> Path:
        return self.dir / "schedule.json"

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    @property
    def runs_dir(self) -> Path:
        return self.dir / "runs"

    @property
    def report_dir(self) -> Path:
        return self.dir / "report"

    def lock(self) -> "Lock":
        return Lock(self.dir / "lock")

    def schedule(self) -> dict:
        s = store.read_json(self.schedule_path)
        if not isinstance(s, dict) or "slots" not in s:
            if self.dir.exists():
                raise UsageError(f"ab: {self.schedule_path} is missing or damaged")
            raise UsageError(f"ab: no loop named {self.name} (under {self.dir.parent})")
        return s

    def slots(self) -> list[schedule.Slot]:
        return schedule.from_json(self.schedule()["slots"])

    def state(self) -> dict:
        s = store.read_json(self.state_path)
        return s if isinstance(s, dict) and s.get("state") in STATES else new_state()

    def save_state(self, state: dict) -> None:
        store.write_json(self.state_path, state)

    def run_path(self, slot: schedule.Slot) -> Path:
        return self.runs_dir / f"{slot.key}.json"

    def runs(self) -> dict[int, dict]:
        """{slot: run} of every run kept whole (a file that does not parse, or
        lacks its completion record, is not a run)."""
        out = {}
        for slot in self.slots():
            r = store.read_json(self.run_path(slot))
            if isinstance(r, dict) and (r.get("ab_run") or {}).get("complete") is True \
                    and isinstance(r.get("checks"), list):
                out[slot.slot] = r
        return out

    def check_private(self) -> str | None:
        """Why the directory is not root-only (0700, owned by root), or None."""
        st = os.stat(self.dir)
        if st.st_uid != 0 and os.geteuid() == 0:
            return f"{self.dir} is owned by uid {st.st_uid}, not root"
        if st.st_mode & 0o077:
            return f"{self.dir} has mode {st.st_mode & 0o777:o}, not 700"
        return None


class Lock:
    """flock(2) on NAME/lock: one changer of the loop's state at a time.
    Released with the process, whatever ends it (kill -9 included)."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def new_state() -> dict:
    return {"state": "running", "why": None, "booting": None, "measuring": None, "slots": {},
            "consecutive_failures": 0, "handled_boot_id": None, "interrupted": [], "events": []}


def slot_state(state: dict, slot: int) -> dict:
    return state["slots"].setdefault(str(slot), {"attempts": 0, "failures": [], "outcome": None,
                                                 "booted_at": None, "stored_at": None})


def why_failed(failure: dict) -> str:
    """A failed boot's line: its own why, or the kernel expected and found."""
    return failure.get("why") or expected_found(failure["expected"], failure["found"])


def expected_found(expected: dict, found: dict) -> str:
    """"expected R, found R'", with each kernel's build string where the
    releases alone do not tell them apart (two builds of one release)."""
    if expected["release"] != found["release"]:
        return f"expected {expected['release']}, found {found['release']}"
    return (f"expected {expected['release']} built {expected.get('build') or '?'}, "
            f"found {found['release']} built {found.get('build') or '?'}")
