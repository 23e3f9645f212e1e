# SPDX-License-Identifier: Apache-2.0
"""Runs are named by date, machine and commit, never by a working-period
counter ("session 12", "stop 26"): a reader can resolve a date, a machine
and a commit, not a counter of the periods someone worked in. The whole
checkout is searched, file names and text (pytest's own "session", the run
of the test suite, is another word and not a counter)."""
import re
import subprocess
from pathlib import Path

from conftest import REPO

# "session 12", "session12", "session-2", "sessions 11-13", "stop 26", "stop26"
COUNTER = re.compile(r"\b(?:sessions?|stops?)[ _-]?\d+", re.I)
COUNTER_IN_NAME = re.compile(r"(?:session|stop)[_-]?\d+", re.I)
# BENCHMARKS.md has no pytest session to speak of: there any "session" is a working period
BENCHMARKS_WORD = re.compile(r"\bsessions?\b", re.I)


def checkout_files(root: Path) -> list[Path]:
    """The checkout's files: git's tracked and untracked-but-not-ignored
    ones where there is a git tree, else every file outside .git, the venv
    and build output."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout
        return [root / p for p in out.decode().split("\0") if p and (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "build", "__pycache__", ".pytest_cache"}
        return [p for p in root.rglob("*") if p.is_file() and not skip & set(p.relative_to(root).parts)]


def counters(root: Path) -> list[str]:
    """'path: what' for every working-period counter in the checkout."""
    found = []
    for path in checkout_files(root):
        if path.resolve() == Path(__file__).resolve():
            continue    # its examples
        rel = path.relative_to(root)
        if COUNTER_IN_NAME.search(str(rel)):
            found.append(f"{rel}: its name")
        try:
            text = path.read_text(errors="ignore")
        except OSError:
            continue
        pattern = BENCHMARKS_WORD if rel == Path("BENCHMARKS.md") else COUNTER
        for n, line in enumerate(text.splitlines(), 1):
            found += [f"{rel}:{n}: {m.group(0)!r}" for m in pattern.finditer(line)]
    return found


def test_no_run_is_named_by_a_working_period_counter():
    found = counters(REPO)
    assert not found, "runs named by a working-period counter (name them by date, machine and commit):\n" + \
                      "\n".join(found[:40])


def test_the_search_finds_a_counter_in_a_name_in_text_and_in_benchmarks(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "ci-cold-2026-12-02-session13.json").write_text("{}")
    (tmp_path / "notes.md").write_text("measured in session 12 and sessions 13-14, landed at stop 26\n"
                                       "the test session's tmp_path; start_new_session=True\n")
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\nBefore this session the path had never run.\n")
    found = counters(tmp_path)
    assert sorted(found) == sorted([
        "BENCHMARKS.md:2: 'session'",
        "benchmarks/ci-cold-2026-12-02-session13.json: its name",
        "notes.md:1: 'session 12'",
        "notes.md:1: 'sessions 13'",
        "notes.md:1: 'stop 26'",
    ]), found
