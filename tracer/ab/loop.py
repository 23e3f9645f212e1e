# SPDX-License-Identifier: Apache-2.0
"""One loop's files: NAME/schedule.json (written once by `ab start`),
NAME/state.json (rewritten whole at every change, its previous copy kept as
state.json.prev), NAME/events.jsonl (each event of the state appended as it
happens, numbered: what rebuilds a state neither copy holds),
NAME/runs/<slot>-<side>.json
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
import time
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
    def events_path(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def unmeasured_dir(self) -> Path:
        """validate's reports of boots that measured nothing (kept to read, never runs)."""
        return self.dir / "unmeasured"

    @property
    def runs_dir(self) -> Path:
        return self.dir / "runs"

    @property
    def report_dir(self) -> Path:
        return self.dir / "report"

    def lock(self) -> "Lock":
        return Lock(self.dir / "lock")

    def hash_cache(self):
        """The hashes of the loop's kernels' files (nttrace.ab.kernels.HashCache),
        kept in NAME/hashes.json from one boot to the next."""
        from nttrace.ab.kernels import HashCache
        return HashCache(self.dir / "hashes.json")

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
        """The loop's state. One that does not read whole (a power cut on a
        filesystem that lost the rename, a disk error) is never taken for a
        fresh loop: it is recovered (`recover`), and says so in
        "recovered_now" until it is saved."""
        s = store.read_json(self.state_path)
        if _whole(s):
            return s
        return self.recover(f"{self.state_path.name} is missing" if not self.state_path.exists()
                            else f"{self.state_path.name} does not read whole")

    def recover(self, why: str) -> dict:
        """The state from its previous copy (state.json.prev), else rebuilt
        from the schedule; then every event events.jsonl holds beyond that
        copy's replayed on it, and every run kept whole counted as a run."""
        prev = store.read_json(store.previous(self.state_path))
        if _whole(prev):
            st, source = prev, store.previous(self.state_path).name
        else:
            st, source = new_state(), "the schedule"
        for k, v in new_state().items():
            st.setdefault(k, v)
        last = max((e.get("n") or 0 for e in st["events"] if isinstance(e, dict)), default=0)
        newer = [e for e in store.read_lines(self.events_path) if isinstance(e, dict) and (e.get("n") or 0) > last]
        for e in newer:
            replay(st, e)
            st["events"].append(e)
        added = 0
        for n, r in self.runs().items():
            ss = slot_state(st, n)
            if ss["outcome"] != "run":
                ss["outcome"] = "run"
                ss["stored_at"] = r["ab_run"].get("finished")
                added += 1
            m = st.get("measuring") or {}
            if m.get("slot") == n and m.get("boot_id") == r["ab_run"].get("boot_id"):
                st["measuring"] = None
        text = f"{why}: " + (f"recovered from {source}" if source != "the schedule" else "rebuilt from the schedule")
        text += f", {len(newer)} event record{'s' if len(newer) != 1 else ''} of events.jsonl"
        text += f" and {added} kept run{'s' if added != 1 else ''} it did not record" if added else ""
        st["recovered_now"] = {"why": why, "from": source, "events": len(newer), "runs_added": added, "text": text}
        return st

    def save_state(self, state: dict) -> None:
        state.pop("recovered_now", None)
        last = state["events"][-1] if state["events"] else {}
        if state["state"] != "running" and last.get("state") != state["state"]:
            # an end no event recorded (`ab stop`): recorded, so a rebuilt state ends too
            self.event(state, time.time(), "ended", state=state["state"], why=state.get("why"))
        store.write_json(self.state_path, state, keep_previous=True)

    def event(self, state: dict, at: float, what: str, /, **kw) -> dict:
        """Record an event in the state (saved with it) and, at once, in
        events.jsonl: numbered, so a recovery replays the ones a copy lacks."""
        n = max((e.get("n") or 0 for e in state["events"] if isinstance(e, dict)), default=0) + 1
        e = {"n": n, "at": round(at, 1), "what": what, **kw}
        state["events"].append(e)
        store.append_line(self.events_path, json.dumps(e, sort_keys=False))
        return e

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

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; False where someone does."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

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
            "consecutive_failures": 0, "handled_boot_id": None, "interrupted": [], "events": [],
            "recoveries": []}


def _whole(s) -> bool:
    return isinstance(s, dict) and s.get("state") in STATES and isinstance(s.get("slots"), dict) \
        and isinstance(s.get("events"), list)


def replay(st: dict, e: dict) -> None:
    """Apply one event of events.jsonl to a state being rebuilt. Each event
    carries what its change was, and applying one twice changes nothing more."""
    what, slot = e.get("what"), e.get("slot")
    ss = slot_state(st, slot) if isinstance(slot, int) else None
    if what == "boot" and ss is not None:
        ss["attempts"] = max(ss["attempts"], int(e.get("attempt") or 0))
        ss["booted_at"] = e.get("at")
        st["booting"] = {"slot": slot, "side": e.get("side"), "attempt": e.get("attempt"), "at": e.get("at"),
                         "from_boot": e.get("from_boot")}
        st["measuring"] = None
    elif what == "measuring":
        st["measuring"] = {"slot": slot, "boot_id": e.get("boot_id"), "at": e.get("at")}
        st["handled_boot_id"] = e.get("boot_id")
    elif what in ("failed boot", "failed measurement") and ss is not None:
        f = e.get("failure")
        if isinstance(f, dict) and not any(x.get("boot_id") == f.get("boot_id") and x.get("why") == f.get("why")
                                           for x in ss["failures"]):
            ss["failures"].append(f)
        st["consecutive_failures"] = int(e.get("consecutive") or st["consecutive_failures"])
        st["measuring"] = None
    elif what == "slot given up" and ss is not None:
        ss["outcome"] = "failed boot"
    elif what in ("run stored", "run found stored after a cut") and ss is not None:
        ss["outcome"] = "run"
        ss["stored_at"] = e.get("at")
        st["measuring"] = None
        st["consecutive_failures"] = 0
    elif what == "run cut short, redone":
        cut = e.get("cut")
        if isinstance(cut, dict) and cut not in st["interrupted"]:
            st["interrupted"].append(cut)
        st["measuring"] = None
    elif what == "boot not issued" and st.get("booting"):
        st["booting"]["not_issued"] = e.get("how")
    elif what == "cut by a shutdown":
        st["measuring"] = {"slot": slot, "boot_id": e.get("boot_id"), "at": e.get("at"), "cut_by": e.get("how")}
    elif what in ("complete", "incomplete", "stopped", "ended") and e.get("state") in STATES:
        st["state"] = e["state"]
        st["why"] = e.get("why")
        if e["state"] != "running":        # an ended loop has nothing under way
            st["booting"] = st["measuring"] = None


def slot_state(state: dict, slot: int) -> dict:
    return state["slots"].setdefault(str(slot), {"attempts": 0, "failures": [], "outcome": None,
                                                 "booted_at": None, "stored_at": None})


def why_failed(failure: dict) -> str:
    """A failed boot's line: its own why, or the kernel expected and found;
    with who is blamed where the step could tell (a failed boot whose cause
    the machine did not record is not blamed on the kernel)."""
    why = failure.get("why") or expected_found(failure["expected"], failure["found"])
    blamed = failure.get("blamed")
    return why + (f" [blamed: {blamed}]" if blamed else "")


def expected_found(expected: dict, found: dict) -> str:
    """"expected R, found R'", with each kernel's build string where the
    releases alone do not tell them apart (two builds of one release)."""
    if expected["release"] != found["release"]:
        return f"expected {expected['release']}, found {found['release']}"
    return (f"expected {expected['release']} built {expected.get('build') or '?'}, "
            f"found {found['release']} built {found.get('build') or '?'}")
