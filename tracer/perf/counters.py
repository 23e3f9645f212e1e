# SPDX-License-Identifier: Apache-2.0
"""Counting perf events: one adapter over the `perf` Python module.

Newer builds of the binding (2025 on) can count: `evsel.read(cpu, thread)`,
enabled and disabled through an `evlist` (tests/live/test_perf_binding.py runs
this path with the binding built from Linux 7.2's tools/perf). Debian 12's
build can open events but not read them. The adapter uses the
binding's counting API where it exists and otherwise opens the same
perf_event_attr with perf_event_open(2) and reads the fds itself
(event_open.py). Both produce `Reading`s; `Reading.path` says which ran.

Scopes: a process (pid, all CPUs), system-wide (every CPU, pid -1), and
`around(fn)`, counting only while fn runs in this process.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field

from nttrace.perf import event_open as pe

GENERIC_EVENTS = {
    "cycles": pe.EventSpec("cycles", pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_CPU_CYCLES),
    "instructions": pe.EventSpec("instructions", pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_INSTRUCTIONS),
    "llc_read_misses": pe.EventSpec("LLC-load-misses", pe.PERF_TYPE_HW_CACHE, pe.cache_config(
        pe.PERF_COUNT_HW_CACHE_LL, pe.PERF_COUNT_HW_CACHE_OP_READ, pe.PERF_COUNT_HW_CACHE_RESULT_MISS)),
    "llc_write_misses": pe.EventSpec("LLC-store-misses", pe.PERF_TYPE_HW_CACHE, pe.cache_config(
        pe.PERF_COUNT_HW_CACHE_LL, pe.PERF_COUNT_HW_CACHE_OP_WRITE, pe.PERF_COUNT_HW_CACHE_RESULT_MISS)),
    "cache_misses": pe.EventSpec("cache-misses", pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_CACHE_MISSES),
    "task_clock": pe.EventSpec("task-clock", pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_TASK_CLOCK),
    "page_faults": pe.EventSpec("page-faults", pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_PAGE_FAULTS),
    "cpu_clock": pe.EventSpec("cpu-clock", pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_CPU_CLOCK),
}


@dataclass
class Reading:
    name: str
    raw: int = 0
    time_enabled: int = 0
    time_running: int = 0
    path: str = ""                 # "binding" or "syscall"
    error: str | None = None       # why the event could not be counted
    per_cpu: list = field(default_factory=list)

    @property
    def available(self) -> bool:
        return self.error is None

    @property
    def running_fraction(self) -> float | None:
        return (self.time_running / self.time_enabled) if self.time_enabled else None

    @property
    def value(self) -> float | None:
        """The count scaled for multiplexing: raw * enabled / running."""
        if self.error is not None:
            return None
        return scale(self.raw, self.time_enabled, self.time_running)

    def as_json(self) -> dict:
        return {"name": self.name, "value": self.value, "raw": self.raw, "time_enabled_ns": self.time_enabled,
                "time_running_ns": self.time_running, "running_fraction": self.running_fraction,
                "path": self.path, "error": self.error}


def scale(raw: int, enabled: int, running: int) -> float:
    """perf's multiplexing estimate. A counter that never ran counted nothing
    we can extrapolate from: 0."""
    if running == 0:
        return 0.0
    if running >= enabled:
        return float(raw)
    return raw * (enabled / running)


def binding_can_count(module=None) -> bool:
    try:
        perf = module or __import__("perf")
    except ImportError:
        return False
    # 7.2's binding: evsel.read() counts; the evlist enables and disables.
    return (hasattr(perf, "evsel") and hasattr(perf.evsel, "read")
            and hasattr(perf, "evlist") and hasattr(perf.evlist, "enable"))


def counting_path() -> str:
    return "binding" if binding_can_count() else "syscall"


class _SyscallGroup:
    """Counters opened with perf_event_open(2), one fd per (event, cpu)."""

    path = "syscall"

    def __init__(self, specs: dict[str, pe.EventSpec], pid: int, cpus: list[int]):
        self.fds: dict[str, list[int]] = {}
        self.errors: dict[str, str] = {}
        for key, spec in specs.items():
            fds = []
            try:
                for cpu in cpus:
                    fds.append(pe.open_event(spec, pid=pid, cpu=cpu, inherit=(pid != -1)))
                self.fds[key] = fds
            except pe.PerfOpenError as exc:
                for fd in fds:
                    os.close(fd)
                self.errors[key] = exc.strerror

    def enable(self):
        for fds in self.fds.values():
            for fd in fds:
                pe.ioctl(fd, pe.PERF_EVENT_IOC_RESET)
                pe.ioctl(fd, pe.PERF_EVENT_IOC_ENABLE)

    def disable(self):
        for fds in self.fds.values():
            for fd in fds:
                pe.ioctl(fd, pe.PERF_EVENT_IOC_DISABLE)

    def read(self, key: str) -> tuple[int, int, int, list]:
        total = [0, 0, 0]
        per_cpu = []
        for fd in self.fds[key]:
            v, en, run = pe.read_counter(fd)
            per_cpu.append(scale(v, en, run))
            total[0] += v
            total[1] += en
            total[2] += run
        return total[0], total[1], total[2], per_cpu

    def close(self):
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds = {}


class _BindingGroup:
    """Counters opened and read through the perf module's counting API: the
    evsels in one evlist, which enables and disables them (the binding has
    enable/disable on the evlist only; `evsel.read(cpu, thread)` takes a CPU
    number and a thread id and returns the count since its last read)."""

    path = "binding"

    def __init__(self, specs: dict[str, pe.EventSpec], pid: int, cpus: list[int]):
        import perf
        self.perf = perf
        self.evsels = {}
        self.errors: dict[str, str] = {}
        # A process is counted on any CPU (cpu -1, one fd, as the syscall
        # path does; the binding's cpu_map("") is that map). Not one fd per
        # CPU: each per-CPU fd of a task counts as "enabled" while the task
        # runs elsewhere, so summing them scaled for multiplexing doubled the
        # count on 2 CPUs (found by running this path for real, 7.2 binding).
        self.cpus = perf.cpu_map("") if pid != -1 else perf.cpu_map(",".join(map(str, cpus)))
        self.threads = perf.thread_map(pid if pid > 0 else os.getpid()) if pid != -1 else perf.thread_map(-1)
        self.evlist = perf.evlist(self.cpus, self.threads)
        for key, spec in specs.items():
            # The binding names no config1/config2: they share their union in
            # perf_event_attr with bp_addr/bp_len, which it does name.
            ev = perf.evsel(type=spec.type, config=spec.config, bp_addr=spec.config1, bp_len=spec.config2,
                            read_format=pe.PERF_FORMAT_TOTAL_TIME_ENABLED | pe.PERF_FORMAT_TOTAL_TIME_RUNNING,
                            disabled=1, inherit=int(pid != -1))
            try:
                ev.open(cpus=self.cpus, threads=self.threads)
            except OSError as exc:
                self.errors[key] = f"perf_event_open({spec.name}): {exc.strerror or exc}"
                continue
            self.evlist.add(ev)
            self.evsels[key] = ev

    def enable(self):
        self.evlist.enable()

    def disable(self):
        self.evlist.disable()

    def read(self, key: str):
        ev = self.evsels[key]
        total = [0, 0, 0]
        per_cpu = []
        for cpu in self.cpus:
            for thread in self.threads:
                c = ev.read(cpu, thread)
                per_cpu.append(scale(c.val, c.ena, c.run))
                total[0] += c.val
                total[1] += c.ena
                total[2] += c.run
        return total[0], total[1], total[2], per_cpu

    def close(self):
        self.evsels = {}
        self.evlist = None


class Counters:
    """A set of events counted together over one scope."""

    def __init__(self, specs: dict[str, pe.EventSpec], pid: int = 0, system_wide: bool = False,
                 cpus: list[int] | None = None, force_path: str | None = None):
        if system_wide:
            pid = -1
            cpus = cpus or sorted(os.sched_getaffinity(0)) or list(range(os.cpu_count() or 1))
        else:
            cpus = [-1]
        path = force_path or counting_path()
        group_cls = _BindingGroup if path == "binding" else _SyscallGroup
        self.specs = specs
        self.group = group_cls(specs, pid, cpus)

    @property
    def path(self) -> str:
        return self.group.path

    def start(self):
        self.group.enable()

    def stop(self):
        self.group.disable()

    def readings(self) -> dict[str, Reading]:
        out = {}
        for key, spec in self.specs.items():
            if key in self.group.errors:
                out[key] = Reading(spec.name, path=self.path, error=self.group.errors[key])
                continue
            raw, en, run, per_cpu = self.group.read(key)
            out[key] = Reading(spec.name, raw, en, run, self.path, per_cpu=per_cpu)
        return out

    def close(self):
        self.group.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextmanager
def counting(specs: dict[str, pe.EventSpec], **kw):
    """Count `specs` for the duration of the with-block; yields a dict that is
    filled with the readings when the block ends."""
    result: dict[str, Reading] = {}
    with Counters(specs, **kw) as c:
        c.start()
        try:
            yield result
        finally:
            c.stop()
            result.update(c.readings())


def around(fn, specs: dict[str, pe.EventSpec] | None = None):
    """Run fn() counting `specs` (default: every generic event) in this
    process only. Returns (fn's result, readings)."""
    specs = specs or GENERIC_EVENTS
    with counting(specs) as readings:
        value = fn()
    return value, readings
