# SPDX-License-Identifier: Apache-2.0
"""The kernel's own count of what each BPF program costs: run_time_ns and
run_cnt per program, kept while run-time statistics are on (a few tens of
ns a run while on, nothing while off; the kernel's entry cost around the
program, the tracepoint's or the trampoline's, is not in them).

Turning them on, in order of preference:
* bpf(BPF_ENABLE_STATS, BPF_STATS_RUN_TIME) (Linux 5.8+): the kernel
  returns a descriptor and keeps statistics on while any holder keeps one
  open. Nothing to restore: when the process ends, however it ends (kill -9
  included), the descriptor closes and statistics go off unless another
  holder (bpftop, another nttrace, the sysctl) still wants them.
* the sysctl kernel.bpf_stats_enabled, only where the command is missing:
  its old value is written to a state file before it is changed and put
  back on close; a run that died without closing leaves the file, and the
  next run puts that value back first.
Both need CAP_SYS_ADMIN. Without it statistics stay as they are (counted
only if something else turned them on) and the hold says why.

A program's figures are read from /proc/self/fdinfo of a descriptor of the
program this process holds (run_time_ns, run_cnt): no privilege needed.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
STATE_FILE = Path(os.environ.get("NTTRACE_STATE_DIR", "/run/nttrace")) / "bpf-stats-sysctl.json"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _EnableStatsAttr(ctypes.Structure):
    # union bpf_attr's enable_stats member; the rest of the union the kernel
    # checks is zero (CHECK_ATTR), so the attr is exactly this size
    _fields_ = [("type", ctypes.c_uint32)]


def bpf_enable_stats() -> int:
    """A descriptor that keeps run-time statistics on while held; OSError
    (EINVAL: no such command before 5.8; EPERM: no CAP_SYS_ADMIN)."""
    attr = _EnableStatsAttr(BPF_STATS_RUN_TIME)
    fd = _libc.syscall(SYS_BPF, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def sysctl_value(path: Path = SYSCTL) -> int | None:
    """kernel.bpf_stats_enabled now (1: on by the sysctl; the descriptors
    BPF_ENABLE_STATS hands out do not show here), None where absent."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class Hold:
    """Run-time statistics held on by this process, or why not.
    method: "bpf_enable_stats", "sysctl", or "" when this process could not
    turn them on (reason says why; they count anyway when another holder
    has them on)."""
    method: str
    reason: str = ""
    fd: int = -1
    sysctl: Path = SYSCTL
    state_file: Path = STATE_FILE
    old: int | None = None
    restored: str = ""     # a previous run's sysctl value this start put back, said once

    @property
    def on(self) -> bool:
        return bool(self.method)

    def close(self) -> None:
        """Let go: the descriptor closes (the kernel turns statistics off when
        no one else holds them), or the sysctl gets its old value back."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
        elif self.method == "sysctl" and self.old is not None:
            old, self.old = self.old, None
            try:
                self.sysctl.write_text(str(old))
                self.state_file.unlink(missing_ok=True)
            except OSError:
                pass     # the state file stays: the next start puts it back
        self.method = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def restore_leftover(sysctl: Path = SYSCTL, state_file: Path = STATE_FILE) -> str:
    """Put back the sysctl value a previous run recorded and never restored
    (it was killed while holding statistics on by the sysctl); what was
    done, in words, or "" when there was nothing to do."""
    try:
        saved = json.loads(state_file.read_text())
        old = int(saved["old"])
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"ignored an unreadable {state_file} ({exc})"
    try:
        sysctl.write_text(str(old))
        state_file.unlink(missing_ok=True)
    except OSError as exc:
        return f"could not restore {sysctl} to {old} from {state_file}: {exc.strerror}"
    return f"restored {sysctl} to {old}, as a run that did not exit cleanly (pid {saved.get('pid')}) left it"


def enable(sysctl: Path = SYSCTL, state_file: Path = STATE_FILE, enable_stats=bpf_enable_stats) -> Hold:
    """Turn run-time statistics on for as long as the returned Hold is open;
    never raises for a kernel or a privilege that does not allow it."""
    restored = restore_leftover(sysctl, state_file)
    try:
        return Hold("bpf_enable_stats", fd=enable_stats(), restored=restored)
    except OSError as exc:
        if exc.errno != errno.EINVAL:     # the command exists: the sysctl would be refused the same way
            return Hold("", f"BPF_ENABLE_STATS refused: {exc.strerror}", restored=restored)
        why = "this kernel has no BPF_ENABLE_STATS (before 5.8)"
    old = sysctl_value(sysctl)
    if old is None:
        return Hold("", f"{why}, nor {sysctl}", restored=restored)
    if old:
        return Hold("", f"{why}; {sysctl} is on already, left as it is", restored=restored)
    try:
        state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"old": old, "pid": os.getpid()}))
        os.replace(tmp, state_file)      # recorded before the change, so a kill after it can be undone
    except OSError as exc:
        return Hold("", f"{why}; no state file to restore {sysctl} from ({state_file}: {exc.strerror}), "
                        "so it is left off", restored=restored)
    try:
        sysctl.write_text("1")
    except OSError as exc:
        state_file.unlink(missing_ok=True)
        return Hold("", f"{why}; {sysctl}: {exc.strerror}", restored=restored)
    return Hold("sysctl", sysctl=sysctl, state_file=state_file, old=old, restored=restored)


@dataclass(frozen=True)
class ProgramStats:
    run_time_ns: int
    run_cnt: int

    @property
    def ns_per_run(self) -> float | None:
        return self.run_time_ns / self.run_cnt if self.run_cnt else None


def program_stats(fd: int, proc: Path = Path("/proc/self")) -> ProgramStats | None:
    """A program's counters from its descriptor's fdinfo; None when the
    descriptor is not a BPF program's (or the kernel prints no counters)."""
    try:
        text = (proc / "fdinfo" / str(fd)).read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return ProgramStats(int(fields["run_time_ns"]), int(fields["run_cnt"]))
    except (KeyError, ValueError):
        return None
