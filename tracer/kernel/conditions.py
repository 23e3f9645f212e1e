# SPDX-License-Identifier: Apache-2.0
"""The host's conditions over a measured window: what else ran beside the
measurement. A timing taken beside a compiler or another emulator is not
the timing of a quiet machine, and an A/B whose sides were measured under
different load compares the load as much as the kernels.

A `Monitor` samples, once a second and at both ends of the window:
  /proc/stat       the CPUs' busy, steal and total time; procs_running
  /proc/loadavg    the 1-minute load average
  /proc/<pid>/     which other processes used CPU, and which of them are
                   compilers, linkers, make or an emulator (QEMU)
and subtracts the CPU time of the processes being measured (`own`: pids
whose whole trees are the measurement, e.g. the QEMU of a lab boot, or this
process for `validate`). What it records (`as_json`): the window's length,
the others' CPU time and its share of one CPU, the steal share, the
runnable tasks (mean, max), load average at start and end, the processes
seen beside it (name and CPU seconds), the CPU model and frequency policy,
and what the caller adds (a guest's accelerator). `assess()` calls it quiet,
busy or contended by the limits below.

Everything is read from /proc and /sys; nothing is changed.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

# The limits of a quiet window (per one CPU of the host): others used under
# QUIET_SHARE of a CPU on average and nothing beside it compiled or emulated.
QUIET_SHARE = 0.10
CONTENDED_SHARE = 0.50
# Names of the processes that make a host unquiet by being there at all.
BUSY_NAMES = ("cc1", "cc1plus", "gcc", "g++", "clang", "ld", "ld.bfd", "ld.gold", "as", "make", "rustc",
              "cargo", "pahole", "qemu-system-x86_64", "qemu-system-aarch64", "qemu-system-i386")
# Seconds between samples; 0 samples the window's two ends only (the lab's
# guests: a sampler on the guest's other vCPU would slow what it measures,
# and the lab records the host's conditions around the boot instead).
SAMPLE_S = float(os.environ.get("NTTRACE_CONDITIONS_INTERVAL", "1.0"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat() -> dict:
    """Busy, steal and total jiffies over all CPUs, and procs_running."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        parts = line.split()
        if parts[0] == "cpu":
            v = [int(x) for x in parts[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0)             # idle + iowait
            steal = v[7] if len(v) > 7 else 0
            total = sum(v[:8])                                    # guest time is inside user
            out.update(busy=total - idle - steal, steal=steal, total=total)
        elif parts[0] == "procs_running":
            out["running"] = int(parts[1])
    return out


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _processes() -> dict[int, tuple[str, int, int]]:
    """{pid: (comm, ppid, utime + stime jiffies)} of every process."""
    out = {}
    for d in os.scandir("/proc"):
        if not d.name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d.name}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2:].split()
        # fields after comm: state(0) ppid(1) ... utime(11) stime(12)
        out[int(d.name)] = (comm, int(rest[1]), int(rest[11]) + int(rest[12]))
    return out


def _tree(procs: dict[int, tuple[str, int, int]], roots: set[int]) -> set[int]:
    """The roots and every descendant among procs."""
    children: dict[int, list[int]] = {}
    for pid, (_c, ppid, _t) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [r for r in roots if r in procs]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo += children.get(p, [])
    return out


def cpu_policy() -> dict:
    """The CPU model and, where cpufreq is there, each policy's governor and
    frequency range (a VM usually has none: then it says so)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    governors = set()
    for g in Path("/sys/devices/system/cpu").glob("cpufreq/policy*/scaling_governor"):
        try:
            governors.add(g.read_text().strip())
        except OSError:
            continue
    return {"cpu": model, "cpus": os.cpu_count(),
            "frequency_policy": ", ".join(sorted(governors)) if governors else "no cpufreq (fixed or host-managed)"}


class Monitor:
    """`with Monitor(own={pid}) as m: ...` then `m.as_json()`. `own`: the
    roots of the process trees being measured (default: this process, its
    threads and children); it may be added to while the window runs (a child
    started inside it: `m.own.add`). A harness that is not itself the
    measurement (the lab's, around a guest) passes only the guest's QEMU:
    its own CPU time, and whatever else it runs, then counts as others'."""

    def __init__(self, own: set[int] | None = None, extra: dict | None = None, interval: float = SAMPLE_S):
        self.own = set(own) if own is not None else {os.getpid()}
        self.extra = dict(extra or {})
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._first: dict = {}
        self._last: dict = {}
        self._load0 = 0.0
        self._running: list[int] = []
        self._at_start: dict[int, int] = {}      # pid -> CPU jiffies when the window opened
        self._seen: dict[int, tuple[str, int]] = {}   # pid -> (comm, CPU jiffies last seen)
        self._own_seen: set[int] = set()         # every pid ever in the measured trees
        self._t0 = self._t1 = 0.0
        self.result: dict | None = None

    def _sample(self) -> None:
        st = _stat()
        procs = _processes()
        own = _tree(procs, self.own)
        with self._lock:
            self._last = st
            self._running.append(max(0, st.get("running", 1) - 1))    # less the sampler itself
            self._own_seen |= own
            for pid, (comm, _pp, cpu) in procs.items():
                self._seen[pid] = (comm, cpu)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except OSError:
                continue

    def __enter__(self) -> "Monitor":
        self._t0 = time.monotonic()
        self._load0 = _loadavg()
        self._first = _stat()
        # a process alive at the start counts from its CPU time then, one
        # started inside the window from zero
        self._at_start = {pid: cpu for pid, (_c, _pp, cpu) in _processes().items()}
        self._sample()
        if self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name="nttrace-conditions", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self._t1 = time.monotonic()
        self.result = self._summarise()

    def _summarise(self) -> dict:
        with self._lock:
            first, last = self._first, self._last
            seconds = max(self._t1 - self._t0, 1e-9)
            busy_s = (last["busy"] - first["busy"]) / CLK_TCK
            steal_s = (last["steal"] - first["steal"]) / CLK_TCK
            used = {pid: (comm, cpu - self._at_start.get(pid, 0)) for pid, (comm, cpu) in self._seen.items()}
            own_s = sum(u for pid, (_c, u) in used.items() if pid in self._own_seen) / CLK_TCK
            others: dict[str, float] = {}
            for pid, (comm, u) in used.items():
                if pid not in self._own_seen and u > 0:
                    others[comm] = others.get(comm, 0.0) + u / CLK_TCK
            running = list(self._running)
        other_s = max(0.0, busy_s - own_s)
        beside = sorted(((c, round(s, 2)) for c, s in others.items() if s >= 0.05), key=lambda x: -x[1])
        busy_names = sorted({c for c in others if c in BUSY_NAMES or c.startswith("qemu-system")})
        out = {"window_s": round(seconds, 2), "others_cpu_s": round(other_s, 2),
               "others_share": round(other_s / seconds, 3), "own_cpu_s": round(own_s, 2),
               "steal_share": round(steal_s / seconds, 3),
               "runnable_mean": round(sum(running) / len(running), 2) if running else None,
               "runnable_max": max(running) if running else None,
               "loadavg_start": self._load0, "loadavg_end": _loadavg(),
               "beside": [{"name": c, "cpu_s": s} for c, s in beside[:12]], "busy_beside": busy_names,
               **cpu_policy(), **self.extra}
        out["state"], out["why"] = assess(out)
        return out

    def as_json(self) -> dict:
        if self.result is None:
            raise RuntimeError("the window has not ended")
        return self.result


def assess(c: dict) -> tuple[str, str]:
    """("quiet" | "busy" | "contended", why) for a window's record."""
    share, busy = c.get("others_share") or 0.0, c.get("busy_beside") or []
    steal = c.get("steal_share") or 0.0
    why = []
    if busy:
        why.append("beside " + ", ".join(busy))
    if share >= QUIET_SHARE:
        why.append(f"other processes used {100 * share:.0f}% of a CPU")
    if steal >= QUIET_SHARE:
        why.append(f"the hypervisor took {100 * steal:.0f}% of a CPU (steal)")
    if not why:
        return "quiet", f"other processes used {100 * share:.0f}% of a CPU, nothing compiled or emulated beside it"
    heavy = share >= CONTENDED_SHARE or steal >= CONTENDED_SHARE or any(
        n in BUSY_NAMES[:8] or n.startswith("qemu-system") for n in busy)
    return ("contended" if heavy else "busy"), "; ".join(why)


def now(seconds: float = 5.0) -> dict:
    """The host's conditions over the next `seconds` (no measurement of ours
    in it): what `wait_quiet` looks at."""
    with Monitor(interval=min(SAMPLE_S or 1.0, seconds / 2)) as m:
        time.sleep(seconds)
    return m.as_json()


def wait_quiet(limit_s: float, window_s: float = 10.0, say=None) -> dict:
    """Wait, up to limit_s, for a window of window_s that is quiet; returns the
    last window's record (its "state" says whether it was quiet)."""
    deadline = time.monotonic() + limit_s
    while True:
        c = now(window_s)
        if c["state"] == "quiet" or time.monotonic() >= deadline:
            return c
        if say:
            say(f"host not quiet ({c['why']}); waiting up to {max(0, deadline - time.monotonic()):.0f} s more")


def summary(records: list[dict]) -> dict:
    """One side's windows together: how many of each state, the worst
    others' share, what ran beside any of them."""
    states = [r.get("state", "unrecorded") for r in records]
    return {"windows": len(records), "states": {s: states.count(s) for s in dict.fromkeys(states)},
            "others_share_max": max((r.get("others_share") or 0.0 for r in records), default=None),
            "busy_beside": sorted({n for r in records for n in r.get("busy_beside") or []}),
            "accelerators": sorted({str(r.get("accelerator")) for r in records if r.get("accelerator")})}
