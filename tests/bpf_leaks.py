# SPDX-License-Identifier: Apache-2.0
"""The BPF programs a test finds loaded, and the processes that hold them:
what a test that checks for leaked programs reads and says."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def bpf_programs() -> list[dict]:
    """The loaded BPF programs as bpftool lists them (id, name; pids where
    bpftool was built with them)."""
    import json
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


def bpftool_prog_ids() -> set[tuple[int, str]]:
    return {(p["id"], p.get("name", "")) for p in bpf_programs()}


def _process(pid: int) -> str:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"pid {pid} (gone)"
    return f"pid {pid} ({comm}): {cmdline}"


def program_holders() -> dict[int, set[str]]:
    """The processes that hold each loaded BPF program, by program id, each
    as 'pid PID (COMM): COMMAND LINE': bpftool's pids where it lists them,
    every process's descriptors of programs and links (/proc/PID/fdinfo's
    prog_id), and programs attached through a process's perf events
    (bpftool perf list)."""
    import json
    held: dict[int, set[int]] = {}
    for p in bpf_programs():
        for h in p.get("pids", ()):
            held.setdefault(p["id"], set()).add(h["pid"])
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            fds = [fd for fd in fd_dir.iterdir() if "bpf" in os.readlink(fd)]
        except OSError:
            continue
        for fd in fds:
            try:
                for line in (fd_dir.parent / "fdinfo" / fd.name).read_text().splitlines():
                    if line.startswith("prog_id:"):
                        held.setdefault(int(line.split()[1]), set()).add(int(fd_dir.parent.name))
            except (OSError, ValueError):
                pass
    try:
        perf = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True, timeout=10).stdout
        for e in json.loads(perf or "[]"):
            held.setdefault(e["prog_id"], set()).add(e["pid"])
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        pass
    return {prog: {_process(pid) for pid in pids} for prog, pids in held.items()}


def nttrace_programs() -> set[tuple[int, str]]:
    """(id, name) of every loaded program whose name starts with nttrace."""
    return {p for p in bpftool_prog_ids() if p[1].startswith("nttrace")}


def _holders_of(prog: int, holders: dict[int, set[str]]) -> str:
    return "; ".join(sorted(holders[prog])) if holders.get(prog) else "no process (a BPF link or a pin holds it)"


def held_by(programs: set[tuple[int, str]] | None = None) -> str:
    """What a test that finds programs attached says: each one (by default
    every nttrace program) with the processes that hold it, one a line, so
    that a program another run left behind is named with its holder."""
    programs = nttrace_programs() if programs is None else programs
    holders = program_holders()
    lines = [f"program {prog} {name} held by " + _holders_of(prog, holders) for prog, name in sorted(programs)]
    return "\n".join(lines) or "no nttrace program loaded"


def programs_left(before: set[tuple[int, str]], settle_s: float = 10.0) -> set[tuple[int, str, str]]:
    """The programs loaded since `before` that are still loaded, each as
    (id, name, the processes that hold it: held_by's words): polled for
    up to settle_s, so that a program the kernel releases a moment after its
    last descriptor closed is not taken for a leak, while one that something
    still holds (attached, pinned, or a process still alive) is. A program
    that was loaded in `before` and is gone now is not this test's: another
    one released it late (an in-process Tracer's uretprobe program can be
    listed at the next test's start and gone at its end); the test
    that loaded it checks its own with this same function. A release slower
    than a poll is reported as a warning with its time."""
    import warnings
    t0 = time.monotonic()
    while True:
        left = bpftool_prog_ids() - before
        waited = time.monotonic() - t0
        if not left or waited >= settle_s:
            break
        time.sleep(0.05)
    if waited > 0.5 and not left:
        warnings.warn(f"BPF programs released {waited:.1f} s after their process or Tracer let them go")
    holders = program_holders() if left else {}
    return {(prog, name, _holders_of(prog, holders)) for prog, name in left}

