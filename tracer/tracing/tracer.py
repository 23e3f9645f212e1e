# SPDX-License-Identifier: Apache-2.0
"""The Tracer: attaches a set of probes, snapshots their kernel-side
aggregates, and always detaches (normal exit, SIGINT, SIGTERM, exceptions).

Signals: while attached, SIGINT raises KeyboardInterrupt and SIGTERM
Terminated, even where the process was started with SIGINT ignored (a job a
non-interactive shell put in the background inherits that). A signal that
lands while bcc polls a perf buffer is held until the poll returns: raised
inside bcc's ctypes callback, the exception would be printed and dropped, and
the loop around it would run on with the probes attached. Holding it, the
records are paused at once (Probe.pause_records): bcc's drain returns only
once it has caught up with the ring, which under a heavy enough load it never
does, and the held signal would never be raised. Terminated is a BaseException, as KeyboardInterrupt is, so
no `except Exception` (bcc's, or attach_probe's) takes it for a failed
attach; a stop asked for during attach that something swallowed anyway is
raised when attach returns. StopGuard (nttrace.tracing.stop_guard) covers what
a handler cannot: the main thread inside a C call (a compile) for seconds.

Concurrency: the daemon's scrape threads call snapshot() while its main
thread reloads (set_probes) and drains records (poll, records). The probe set
is two dicts replaced as a whole under one lock, never changed in place; a
reload compiles and attaches its new probes before it takes the lock, swaps,
and detaches the dropped ones after it lets go. A snapshot holds the lock
while it reads, so it sees the old set or the new one, never half of each,
and no probe is detached under a reader.

Attached here or elsewhere: attach() and set_probes() attach with bcc in
this process (trace, validate, the daemon's loader process), or, given
`handed`, take over probes another process attached (the daemon: its loader
process hands over descriptors, nttrace.daemon.loader, and the daemon reads
them as bpf_maps.Handed data). Either way the Tracer calls nothing back.
"""
from __future__ import annotations

import signal
import tempfile
import threading
import time

from nttrace.errors import CapabilityError
from nttrace.kernel import metadata as kernel_meta
from nttrace.kernel.sysroot import Sysroot
from nttrace.probes import PROBES, check_names
from nttrace.capabilities import report as capmod
from nttrace.probe_framework import histogram


class Terminated(BaseException):
    """SIGTERM, turned into an exception so every `finally` runs (a
    BaseException: `except Exception` does not take it)."""


def _stop_exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Tracer:
    def __init__(self, probe_names: list[str], options: dict | None = None, caps=None, meta=None,
                 handle_signals: bool = True):
        check_names(probe_names)
        self.options = options or {}
        self.sysroot = Sysroot("/")
        self.caps = caps or capmod.report(self.sysroot)
        lacking = capmod.missing_privilege(self.caps)
        if lacking:
            raise CapabilityError(lacking)
        self.meta = meta or kernel_meta.load(self.sysroot)
        self.probes = {name: self._make(name) for name in probe_names}
        self.status: dict[str, dict] = {}
        self._lock = threading.RLock()
        self.handle_signals = handle_signals   # False: the caller (the daemon) handles SIGINT and SIGTERM
        self._old_handlers: dict[int, object] = {}
        self.detach_errors: dict[str, str] = {}   # probe -> what its bcc cleanup raised (descriptors closed anyway)
        self._holding = False      # inside a probe's poll: a stop signal waits in _held until it returns
        self._held: int | None = None
        self._stop_asked: int | None = None   # the first stop signal taken, raised or not

    def _on_stop_signal(self, signum, frame):
        if self._stop_asked is None:
            self._stop_asked = signum
        if self._holding:
            self._held = signum
            for p in list(self.probes.values()):
                p.pause_records()
            return
        raise _stop_exception(signum)

    def _make(self, name: str):
        return PROBES[name](self.meta, self.caps, self.options.get(name, {}), self.sysroot)

    def programs(self) -> dict[str, str]:
        """The C text of each available probe (for --ebpf)."""
        out = {}
        for name, p in self.probes.items():
            av = p.availability()
            p.via = av.attach_via
            out[name] = p.program_text() if av.ok else f"/* {name}: unavailable: {av.reason} */\n"
        return out

    @staticmethod
    def _attach_all(probes: dict, handed: dict | None) -> dict[str, dict]:
        """Attach `probes` here, or adopt them from `handed`; their status entries."""
        if handed is None:
            return {name: attach_probe(p) for name, p in probes.items()}
        return {name: adopt(p, handed.pop(name, None)) for name, p in probes.items()}

    def attach(self, handed: dict | None = None) -> "Tracer":
        """Attach the probes with bcc in this process or, given `handed`
        ({probe: bpf_maps.Handed}), take over what another process attached
        for them (what is taken is removed from `handed`: the caller closes
        the rest). Raises CapabilityError when no probe is attached."""
        if self.handle_signals and not self._old_handlers:
            self._old_handlers = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS}
        try:
            self.status = dict(self._attach_all(self.probes, handed))
            if self._stop_asked is not None:    # raised inside bcc and swallowed there (a bare except)
                raise _stop_exception(self._stop_asked)
        except BaseException:
            self.detach()
            raise
        finally:
            self.meta.release_btf()  # the programs are loaded; nothing reads it now
        if not any(s["status"] == "attached" for s in self.status.values()):
            reasons = "; ".join(f"{n}: {s['reason']}" for n, s in self.status.items())
            self.detach()
            hint = capmod.perf_paranoid_hint(self.caps)
            raise CapabilityError(f"no probe could attach ({reasons})" + (f"; {hint}" if hint else ""))
        return self

    def set_probes(self, names: list[str], options: dict | None = None,
                   handed: dict | None = None) -> dict[str, list[str]]:
        """Attach what is new (with bcc here, or adopted from `handed` as
        attach() does), detach what is gone, leave the rest (and its
        counters) alone; `options` for the new ones. Returns {"added": [...],
        "removed": [...]}."""
        check_names(names)
        if options is not None:
            self.options = options
        with self._lock:
            current = dict(self.probes)
        removed = [n for n in current if n not in names]
        added = [n for n in names if n not in current]
        fresh = {n: self._make(n) for n in added}
        try:
            fresh_status = self._attach_all(fresh, handed)  # compile and attach (or adopt), unseen
        except BaseException:
            for p in fresh.values():
                p.detach()
            raise
        with self._lock:
            probes = {n: p for n, p in self.probes.items() if n not in removed}
            status = {n: st for n, st in self.status.items() if n not in removed}
            probes.update(fresh)
            status.update(fresh_status)
            self.probes, self.status = probes, status
        for n in removed:          # no reader holds them: readers hold the lock
            current[n].detach()
        self.meta.release_btf()
        return {"added": added, "removed": removed}

    def poll(self, timeout_ms: int = 0) -> None:
        """Drain per-call records; waits up to timeout_ms in all (sleeping
        when no attached probe emits records)."""
        t0 = time.monotonic()
        waited = False
        with self._lock:
            self._holding = True
            try:
                for name, p in self.probes.items():
                    if self.attached(name):
                        waited |= p.poll(0 if waited else timeout_ms)
            finally:
                self._holding = False
        held, self._held = self._held, None
        if held is not None:
            raise _stop_exception(held)
        if not waited and timeout_ms > 0:
            time.sleep(max(0.0, timeout_ms / 1000 - (time.monotonic() - t0)))

    def records(self) -> list[dict]:
        """The per-call records taken since the last call, in time order: the
        per-CPU perf buffers deliver them CPU by CPU, so one CPU's calls can
        come back after a later CPU's."""
        out = []
        with self._lock:
            for name, p in self.probes.items():
                if self.attached(name):
                    out.extend(p.records())
        out.sort(key=lambda r: r["ts_ns"])
        return out

    def snapshot(self, summarise: bool = True) -> dict:
        """Every probe's entry; latency histograms as their summaries (the
        output form), or with summarise=False as histogram.Latency (the
        exporter's form: int slots, no percentiles computed)."""
        with self._lock:
            snap = {name: snapshot_entry(p, self.status.get(name, {"status": "detached"}))
                    for name, p in self.probes.items()}
        return histogram.summarised(snap) if summarise else snap

    def record_maps(self, attempts: int = 20) -> dict:
        """The attached probes' maps as the kernel holds them (bytes), with
        what a replay needs to decode them (kernel facts, capabilities, each
        probe's options and handover state) and the snapshot they decode to
        here. The dump is taken between two snapshots that agree, so the
        maps did not move under it (up to `attempts` tries, then the last)."""
        with self._lock:
            attached = {n: p for n, p in self.probes.items() if self.attached(n)}
            for _ in range(attempts):
                before = self.snapshot()
                maps = {n: p.maps.dump() for n, p in attached.items()}
                after = self.snapshot()
                if before == after:
                    break
            return {"kernel": self.meta.as_json(), "caps": {k: v.as_json() for k, v in self.caps.items()},
                    "settled": before == after,
                    "probes": {n: {"options": p.options, "status": self.status[n], "state": p.state(),
                                   "maps": maps[n], "snapshot": after[n]} for n, p in attached.items()}}

    def program_stats(self) -> dict[str, dict]:
        """{probe: {program: ProgramStats}} of the attached probes' programs:
        the kernel's run_time_ns and run_cnt (nttrace.kernel.bpf_stats),
        cumulative since each program loaded; they grow only while run-time
        statistics are on."""
        from nttrace.kernel.bpf_stats import program_stats
        out = {}
        with self._lock:
            for name, p in self.probes.items():
                if self.attached(name):
                    progs = {fn: program_stats(fd) for fn, fd in p.program_fds().items()}
                    out[name] = {fn: st for fn, st in progs.items() if st is not None}
        return out

    def status_view(self) -> dict[str, dict]:
        """The probes' status as one consistent copy (for /healthz)."""
        with self._lock:
            return {n: dict(s) for n, s in self.status.items()}

    def attached(self, name: str) -> bool:
        return self.status.get(name, {}).get("status") == "attached"

    def detach(self) -> dict[str, float]:
        """Detach every probe; the seconds each took (the kernel detaches a
        probe's programs as its descriptors close: fentry links wait for
        ftrace's updates and their RCU grace periods there)."""
        took = {}
        with self._lock:
            for name, p in self.probes.items():
                t0 = time.monotonic()
                try:
                    p.detach()
                except Exception as exc:   # its descriptors are closed regardless (Probe.detach)
                    self.detach_errors[name] = f"{type(exc).__name__}: {exc}"
                took[name] = time.monotonic() - t0
        for sig, old in self._old_handlers.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)   # None: set outside Python
        self._old_handlers = {}
        return took

    def __enter__(self):
        return self.attach()

    def __exit__(self, *exc):
        self.detach()


def attach_probe(probe) -> dict:
    """Attach one probe with bcc in this process; its status entry
    ({"status": "attached", "via": ...} or {"status": "unavailable",
    "reason": ...}). A probe that fails to attach is detached again. What
    the daemon's loader process runs for each probe before it hands the
    descriptors over (Probe.descriptors)."""
    av = probe.availability()
    if not av.ok:
        return {"status": "unavailable", "reason": av.reason}
    try:
        probe.attach()
        return {"status": "attached", "via": probe.via}
    except Exception as exc:  # bcc raises bare Exception
        probe.detach()
        return {"status": "unavailable", "reason": f"attach failed: {exc}"}


def adopt(probe, handed) -> dict:
    """Make `probe` the reader of what another process attached for it
    (`handed`, a bpf_maps.Handed, or None when nothing came): its maps and
    descriptors become probe.bpf, its state is restored. Its status entry."""
    if handed is None:
        return {"status": "unavailable", "reason": "the loader handed nothing over for it"}
    if handed.status.get("status") == "attached":
        probe.bpf, handed.maps = handed.maps, None
        probe.restore(handed.state)
    return handed.status


def snapshot_entry(probe, status: dict) -> dict:
    """A probe's entry in a snapshot: its status, and when attached its rows,
    fallback note and notes."""
    entry = dict(status)
    if status["status"] == "attached":
        entry.update(probe.snapshot())
        entry.update(probe.fallback_note())
        notes = probe.notes()
        if notes:
            entry["notes"] = notes
    return entry


def replay(recording: dict) -> dict:
    """The snapshot a recording's maps (Tracer.record_maps) decode to, read
    through the daemon's decoder (bpf_maps.MapSet over the recorded bytes)
    by probes restored from their handover state, as the daemon's are."""
    from nttrace.probe_framework.bpf_maps import MapSet
    from nttrace.capabilities.report import Capability
    meta = kernel_meta.KernelMetadata.from_json(recording["kernel"])
    caps = {k: Capability.from_json(v) for k, v in recording["caps"].items()}
    out = {}
    with tempfile.TemporaryDirectory() as empty:   # nothing of this host's kernel is read
        for name, rec in recording["probes"].items():
            probe = PROBES[name](meta, caps, rec["options"], Sysroot(empty))
            probe.bpf = MapSet.replay(probe.source, rec["maps"])
            probe.restore(rec["state"])
            out[name] = snapshot_entry(probe, rec["status"])
    return histogram.summarised(out)

