# SPDX-License-Identifier: Apache-2.0
"""What the machine recorded of why the boot before this one ended, where it
recorded anything: the evidence that lets `nttrace ab` tell a kernel that
panicked or hung from a power cut or a reset nobody asked for.

  pstore     /sys/fs/pstore/dmesg-*: the tail of a crashed kernel's log
             (ramoops, EFI, ERST), each record's time its file's mtime; and
             where systemd-pstore.service has moved them at boot (its
             default), /var/lib/systemd/pstore/**/dmesg-*, their mtime the
             time of the move; a record's release from the "Not tainted
             R #..." / "Tainted: ... R #..." line, its cause from the
             "Kernel panic - not syncing:" line
  watchdog   /sys/class/watchdog/watchdogN/bootstatus: WDIOF_CARDRESET
             (0x20) where the driver knows the last reset was the watchdog's
  journal    `journalctl --list-boots`: the boots the journal holds, in
             order, and for each boot after the one that asked for the boot
             the first "Linux version" line of its kernel log (did the
             expected kernel start at all?)

The files are read from under `root`; the journal through a function (the
real one runs journalctl), so the tests lay out both.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable

from nttrace.kernel.sysfs import read as _read

WDIOF_CARDRESET = 0x20
# a pstore record written before the boot was asked is an older crash's
SLACK_S = 5.0
_RELEASE = re.compile(r"(?:Not tainted|Tainted: [A-Z ]*?) (\S+) #")
_PANIC = re.compile(r"(Kernel panic - not syncing: .*|BUG: .*|watchdog: BUG: .*|Oops: .*)")
_VERSION = re.compile(r"Linux version (\S+)")


def pstore(root: Path, since: float | None) -> list[dict]:
    """The dmesg records pstore holds from `since` on (all where since is None)."""
    out = []
    root = Path(root)
    files = sorted((root / "sys/fs/pstore").glob("dmesg-*")) + \
        sorted((root / "var/lib/systemd/pstore").rglob("dmesg-*"))
    for p in files:
        try:
            at = p.stat().st_mtime
            text = p.read_text(errors="replace")
        except OSError:
            continue
        if since is not None and at < since - SLACK_S:
            continue
        rel = _RELEASE.search(text)
        panics = _PANIC.findall(text)
        out.append({"file": str(p.relative_to(root)), "at": round(at, 1), "release": rel.group(1) if rel else None,
                    "panic": panics[-1].strip() if panics else None})
    return out


def watchdogs(root: Path) -> list[dict]:
    out = []
    d = Path(root) / "sys/class/watchdog"
    for w in sorted(d.glob("watchdog*")):
        raw = _read(w / "bootstatus")
        try:
            status = int(raw, 0) if raw is not None else None
        except ValueError:
            status = None
        out.append({"device": w.name, "identity": _read(w / "identity"), "bootstatus": status,
                    "reset_by_watchdog": bool(status is not None and status & WDIOF_CARDRESET)})
    return out


def parse_list_boots(text: str) -> list[str]:
    """The boot ids `journalctl --list-boots` lists, oldest first."""
    ids = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.fullmatch(r"-?\d+", parts[0]) and re.fullmatch(r"[0-9a-f]{32}", parts[1]):
            ids.append(parts[1])
    return ids


def boot_key(boot_id: str | None) -> str:
    """A boot id as the journal writes it (no dashes, lower case)."""
    return (boot_id or "").replace("-", "").lower()


def journal_release(boot: str, run=subprocess.Popen) -> str | None:
    """The release of the kernel that started boot `boot`: its first
    "Linux version" line in the journal's kernel log, None where none."""
    try:
        p = run(["journalctl", "-b", boot, "-k", "-o", "cat", "-q", "--no-pager"], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    try:
        for n, line in enumerate(p.stdout):
            m = _VERSION.search(line)
            if m or n > 400:
                return m.group(1) if m else None
        return None
    finally:
        p.kill()
        p.wait()


def journal(asking: str, this: str) -> dict:
    """The journal's account of the boots between the one that asked
    (`asking`) and this one: {"readable", "asking_found", "between":
    [{"boot_id", "release"}]}."""
    try:
        p = subprocess.run(["journalctl", "--list-boots", "--no-pager", "-q"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {"readable": False, "asking_found": False, "between": []}
    return between(parse_list_boots(p.stdout) if p.returncode == 0 else [], asking, this, journal_release)


def between(ids: list[str], asking: str, this: str, release: Callable[[str], str | None]) -> dict:
    ids = [boot_key(i) for i in ids]
    a, t = boot_key(asking), boot_key(this)
    if not ids or a not in ids:
        return {"readable": bool(ids), "asking_found": False, "between": []}
    after = ids[ids.index(a) + 1:]
    if t in after:
        after = after[:after.index(t)]
    return {"readable": True, "asking_found": True,
            "between": [{"boot_id": b, "release": release(b)} for b in after]}


def read(root: Path, since: float | None, asking: str | None, this: str | None,
         journal_of: Callable[[str, str], dict] = journal) -> dict:
    """Every record: {"pstore": [...], "watchdog": [...], "journal": {...}}."""
    return {"pstore": pstore(root, since), "watchdog": watchdogs(root),
            "journal": journal_of(asking, this) if asking and this else
            {"readable": False, "asking_found": False, "between": []}}


def assess(records: dict, expected: str, found: str, default: str | None, reached: str) -> dict:
    """What the records say of a boot of `expected` that came back as
    `found`: {"blamed": "kernel" | "unknown", "known": what is known, "cause":
    the cause where recorded}. The kernel is blamed on evidence only: a
    pstore record of its panic, or the journal showing it started and the
    watchdog showing it then hung."""
    on = f"{found} (the default kernel)" if found == default else found
    known = f"the machine came back on {on} {reached}"
    panics = [r for r in records.get("pstore") or [] if r.get("release") == expected]
    others = [r for r in records.get("pstore") or [] if r.get("release") != expected]
    dog = [w for w in records.get("watchdog") or [] if w.get("reset_by_watchdog")]
    j = records.get("journal") or {}
    started = [b for b in j.get("between") or [] if b.get("release") == expected]
    if panics:
        r = panics[-1]
        return {"blamed": "kernel", "known": known,
                "cause": f"{expected} crashed: {r['panic'] or 'a crash record without a panic line'} "
                         f"(pstore {r['file']})"}
    dog_text = f"the watchdog ({', '.join(w['device'] + (' ' + w['identity'] if w['identity'] else '') for w in dog)}) " \
               "reset the machine" if dog else ""
    if started and dog:
        return {"blamed": "kernel", "known": known,
                "cause": f"{expected} started (journal boot {started[-1]['boot_id'][:12]}) and hung: {dog_text}"}
    parts = []
    if others:
        parts.append("pstore holds a crash of " + ", ".join(sorted({str(r['release']) for r in others})))
    if dog:
        parts.append(dog_text + f" (a hang during the boot, before {expected} recorded that it started)"
                     if not started else dog_text)
    if started:
        parts.append(f"{expected} started (journal boot {started[-1]['boot_id'][:12]}), then the machine reset "
                     "with no record of why (a power cut, a reset, or a crash pstore did not keep)")
    elif j.get("asking_found"):
        parts.append(f"the journal holds no boot of {expected}: it did not start, or died before its journal "
                     "reached the disk")
    elif not j.get("readable"):
        parts.append("no journal of earlier boots to tell whether it started")
    if not records.get("pstore") and not dog:
        parts.append("no crash record (pstore) and no watchdog reset recorded")
    return {"blamed": "unknown", "known": known, "cause": "; ".join(parts) or "no record of why"}
