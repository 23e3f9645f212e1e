# SPDX-License-Identifier: Apache-2.0
"""What every probe provides to the Tracer."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nttrace import bpf as bpf_sources
from nttrace.kernel.sysroot import Sysroot
from nttrace.kernel.tracefs import read_format
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise


PERF_EVENT_IOC_PAUSE_OUTPUT = 0x40042409     # _IOW('$', 9, __u32)


@dataclass
class Availability:
    ok: bool
    reason: str = ""
    attach_via: str = ""  # "tracepoint", "kprobe", "fentry", "uprobe"


class Probe:
    """A BPF program plus the code that attaches it and reads its maps.

    Subclasses set `name`, `summary`, `source` and the declarations of
    nttrace.probe_framework.contract (tracepoints, functions, columns, metrics) and
    nttrace.probe_framework.exercise (exercise), and
    implement availability(), defines(), attach() and snapshot()."""

    name = ""
    summary = ""          # what it shows, in a line: its row in the docs' generated tables
    source = ""
    tracepoints: tuple[tuple[str, str], ...] = ()   # (system, event) it attaches to
    functions: tuple[str, ...] = ()                 # kernel functions it attaches to
    columns: tuple[Column, ...] = ()                # its `nttrace trace` table
    metrics: tuple[Metric, ...] = ()                # what the exporter makes of its rows
    exercise: Exercise | None = None                # its workload and the kernel's count it must agree with

    @classmethod
    def options_for(cls, names: list[str], record: bool) -> dict:
        """The probe's options when `names` are traced together (`record`:
        per-call records were asked for)."""
        return {}

    def __init__(self, meta, caps, options=None, sysroot: Sysroot | None = None):
        self.meta = meta
        self.caps = caps
        self.options = options or {}
        self.sysroot = sysroot or Sysroot("/")
        self.bpf = None
        self.via = ""
        self._records: list[dict] = []
        self._lost_records = 0
        self._records_paused = False
        self.fentry_error = ""   # why fentry did not load, when the probe fell back to kprobes
        self._maps = None        # the decoder's view of bcc's maps (maps below)

    # -- state a loader process hands over (nttrace.daemon.loader) -------------------
    # What attach() decides and the daemon's copy of the probe must know to
    # read the maps as the probe that attached them would: declared, each
    # name an attribute, each value JSON. A probe adds its own names to these.
    handover: tuple[str, ...] = ("via", "fentry_error", "_lost_records")

    def state(self) -> dict:
        """The declared handover attributes, as JSON-ready values. A value
        that JSON cannot carry is a bug in the declaration, said at once."""
        import json
        out = {}
        for k in self.handover:
            v = getattr(self, k)
            try:
                json.dumps(v)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"probe {self.name}: handover attribute {k!r} is not JSON: {exc}") from None
            out[k] = v
        return out

    def restore(self, state: dict) -> None:
        unknown = set(state) - set(self.handover)
        if unknown:
            raise ValueError(f"probe {self.name}: handed over undeclared state {sorted(unknown)}")
        for k, v in state.items():
            setattr(self, k, v)

    # -- program -----------------------------------------------------------
    def availability(self) -> Availability:
        raise NotImplementedError

    def defines(self) -> dict[str, int | str]:
        return {}

    def program_text(self) -> str:
        """The C text bcc compiles: the NTTRACE_* defines, then the source."""
        lines = [f"/* nttrace {self.name} probe ({self.via or 'unattached'}) */"]
        for k, v in self.defines().items():
            lines.append(f"#define {k} {v}")
        return "\n".join(lines) + "\n" + bpf_sources.source(self.source)

    @staticmethod
    def include_dir() -> str:
        return str(Path(bpf_sources.__file__).parent)

    # -- lifecycle -----------------------------------------------------------
    def load(self):
        self.bpf = load_bpf(self.program_text().encode())
        return self.bpf

    def attach(self) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict:
        raise NotImplementedError

    # -- per-call records (a perf buffer the program submits to) ----------
    def emits_records(self) -> bool:
        """True when the attached program submits a record per call."""
        return False

    def open_records(self, table: str, page_cnt: int) -> None:
        self.bpf[table].open_perf_buffer(self._take_record, page_cnt=page_cnt, lost_cb=self._on_lost)

    def _take_record(self, cpu, data, size) -> None:
        if not self._records_paused:
            self._on_record(cpu, data, size)

    def pause_records(self) -> None:
        """Stop the kernel writing this probe's records and skip those still
        in the ring (a stop is under way). bcc's drain (perf_reader_event_read)
        reads the ring's head again after each record and returns only when
        it has caught up: while the probe writes records faster than the
        Python callback takes them, it never returns, and a stop signal held
        until it returns was held for good. Paused (PERF_EVENT_IOC_PAUSE_OUTPUT,
        Linux 4.7), the ring gets nothing new; skipped, what is left drains at
        once. Called from a signal handler: syscalls only, no lock."""
        import fcntl
        self._records_paused = True
        readers = getattr(self.bpf, "perf_buffers", None)
        if not readers:
            return
        from bcc.libbcc import lib
        for reader in list(readers.values()):
            try:
                fcntl.ioctl(lib.perf_reader_fd(reader), PERF_EVENT_IOC_PAUSE_OUTPUT, 1)
            except OSError:
                pass       # an older kernel: the skipping alone shortens the drain

    def _on_record(self, cpu, data, size) -> None:
        raise NotImplementedError

    def _on_lost(self, count) -> None:
        self._lost_records += count

    def poll(self, timeout_ms: int = 0) -> bool:
        """Drain per-call records, waiting up to timeout_ms for them, where
        the probe emits any. False when it has nothing to wait on."""
        if self.bpf is not None and self.emits_records():
            self.bpf.perf_buffer_poll(timeout=timeout_ms)
            return True
        return False

    def fallback_note(self) -> dict:
        """{"fentry_fallback": why} when the probe runs by kprobe because
        its fentry program would not load (the Tracer adds it to every
        probe's snapshot)."""
        return {"fentry_fallback": self.fentry_error} if self.fentry_error else {}

    def by_kprobe(self, symbol: str) -> bool:
        """Whether `symbol` is attached by kprobe (a function probe that fell
        back to kprobes; copy decides routine by routine)."""
        return self.via == "kprobe"

    def notes(self) -> list[str]:
        """What a reader of the probe's figures must know (the `trace` table
        prints them under its rows; snapshots carry them as "notes")."""
        return [f"fentry did not load, attached by kprobe: {self.fentry_error}"] if self.fentry_error else []

    def records(self) -> list[dict]:
        out, self._records = self._records, []
        return out

    @property
    def maps(self):
        """The probe's maps through nttrace's one decoder
        (nttrace.probe_framework.bpf_maps): the daemon's MapSet as handed over, or a
        view of the maps bcc loaded. Snapshots read only through this."""
        from nttrace.probe_framework.bpf_maps import MapSet
        if isinstance(self.bpf, MapSet):
            return self.bpf
        if self._maps is None or self._maps[0] is not self.bpf:
            self._maps = (self.bpf, MapSet.of_bcc(self.source, self.bpf))
        return self._maps[1]

    def program_fds(self) -> dict[str, int]:
        """The attached probe's programs by function name, as descriptors
        this process holds (nttrace.kernel.bpf_stats reads their run-time
        counters): the daemon's as handed over, or bcc's."""
        from nttrace.probe_framework.bpf_maps import MapSet
        if self.bpf is None:
            return {}
        if isinstance(self.bpf, MapSet):
            return dict(self.bpf.programs)
        return {(k.decode() if isinstance(k, bytes) else k): fn.fd
                for k, fn in (getattr(self.bpf, "funcs", {}) or {}).items()}

    def descriptors(self) -> tuple[dict[str, int], dict[str, int], list[int]]:
        """What keeps the probe attached and readable, as bcc holds it in
        this process: its map descriptors by map name, its program
        descriptors by function name, and its attachment descriptors (perf
        events, BPF links). The daemon's loader process sends these to the
        daemon (nttrace.daemon.loader), which reads them as a bpf_maps.MapSet."""
        from bcc.libbcc import lib
        maps = {}
        for name in bpf_sources.map_decls(self.source):
            fd = lib.bpf_table_fd(self.bpf.module, name.encode())
            if fd >= 0:
                maps[name] = fd
        return maps, self.program_fds(), bcc_attachment_fds(self.bpf)

    def detach(self) -> None:
        """Detach and unload: bcc's cleanup, and where that stops part way
        (it raises at the first attachment it cannot close, leaving the rest
        and every program open until the process exits: a daemon's reload
        would keep them attached) every descriptor bcc still holds is closed
        before the error goes on."""
        self._maps = None
        b, self.bpf = self.bpf, None
        if b is None:
            return
        try:
            b.cleanup()
        except Exception:
            close_bcc_descriptors(b)
            raise


class TracepointProbe(Probe):
    """A probe on tracepoints. Subclasses declare `programs`, (system,
    event, BPF function) triples; their tracepoints follow from them. The
    tracepoints' format files are read once (self.formats, None where the
    kernel lacks one); the probe is available where all of them exist and
    bcc works, and attaches each program to its tracepoint."""

    programs: tuple[tuple[str, str, str], ...] = ()
    missing_hint = ""    # said after a missing tracepoint (what kernel option adds it)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "programs" in cls.__dict__:
            cls.tracepoints = tuple(dict.fromkeys((system, event) for system, event, _fn in cls.programs))

    def __init__(self, meta, caps, options=None, sysroot: Sysroot | None = None):
        super().__init__(meta, caps, options, sysroot)
        tracefs = self.sysroot.tracefs()
        self.formats = {(system, event): read_format(tracefs, system, event) for system, event in self.tracepoints}

    def availability(self) -> Availability:
        missing = [f"{system}:{event}" for (system, event), fmt in self.formats.items() if fmt is None]
        if missing:
            return Availability(False, f"no tracepoint {', '.join(missing)} in this kernel{self.missing_hint}")
        if not self.caps["bcc"].available:
            return Availability(False, self.caps["bcc"].detail)
        return Availability(True, attach_via="tracepoint")

    def attach(self) -> None:
        self.via = "tracepoint"
        b = self.load()
        for system, event, fn in self.programs:
            b.attach_tracepoint(tp=f"{system}:{event}", fn_name=fn)


def compile_flags() -> list[str]:
    """What bcc compiles every nttrace program with: bpf/ on the include path
    (common.h), the NTTRACE_* defines allowed to shadow the sources' own, and
    no warning for attributes that clang ignores: a kernel built with IBT
    marks functions in its own headers nocf_check, which clang without
    -fcf-protection ignores with three warnings and their notes, about 30
    lines, on every compile (the lab's 7.2 kernels: at each start of trace,
    validate and the daemon, burying the daemon's own log)."""
    return [f"-I{Probe.include_dir()}", "-Wno-macro-redefined", "-Wno-ignored-attributes"]


@contextmanager
def fd_pointed_at(fd: int, target: int):
    """Inside, descriptor `fd` writes where `target` does (bcc's C code
    writes to fds 1 and 2 directly, past Python's streams); restored after."""
    saved = os.dup(fd)
    os.dup2(target, fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


class Captured:
    """What a `stderr_captured()` block wrote to fd 2 (`text`, once it ended)."""
    text = ""


@contextmanager
def stderr_captured():
    """fd 2 goes to a temporary file inside: libbcc's C code writes its own
    line for a refusal there ("cannot attach kprobe, Invalid argument"),
    past Python, where nttrace reports the refusal itself."""
    import tempfile
    sys.stderr.flush()
    captured = Captured()
    with tempfile.TemporaryFile() as f:
        try:
            with fd_pointed_at(2, f.fileno()):
                yield captured
        finally:
            f.seek(0)
            captured.text = f.read().decode(errors="replace")


@contextmanager
def bcc_stdout_to_stderr():
    """fd 1 is fd 2 inside: bcc writes some of its messages to standard
    output (a missing kernel-headers directory: "Unable to find kernel
    headers..."), where nttrace writes its JSON and tables: on a host
    without kernel headers, `validate --json` would begin with that line and
    not parse."""
    import ctypes
    sys.stdout.flush()
    with fd_pointed_at(1, 2):
        try:
            yield
        finally:
            ctypes.CDLL(None).fflush(None)      # C stdio's buffer, to where it was meant to go


def load_bpf(text: bytes, cflags: list[str] | None = None):
    """bcc's BPF(text=...), except that a constructor that fails part way
    (e.g. an fentry program that loads but will not attach) releases what it
    had already loaded and attached, instead of leaving it to atexit; and
    that what bcc prints while it compiles goes to standard error."""
    import atexit

    from bcc import BPF

    class _Released(BPF):
        def __init__(self, *args, **kwargs):
            try:
                super().__init__(*args, **kwargs)
            except BaseException:
                atexit.unregister(self.cleanup)
                try:
                    self.cleanup()
                except Exception:
                    pass
                raise

    with bcc_stdout_to_stderr():
        return _Released(text=text, cflags=compile_flags() if cflags is None else cflags)


# What /proc/self/fd names a descriptor bcc opened: a perf event (kprobe,
# uprobe, tracepoint), a BPF link (raw tracepoint, fentry) or a program.
BCC_DESCRIPTOR_KINDS = frozenset({"anon_inode:[perf_event]", "anon_inode:bpf_link", "anon_inode:bpf-link",
                                  "anon_inode:bpf-prog"})


# bcc's BPF object keeps its attachments' descriptors in these tables.
BCC_ATTACHMENT_TABLES = ("kprobe_fds", "uprobe_fds", "tracepoint_fds", "raw_tracepoint_fds",
                         "kfunc_entry_fds", "kfunc_exit_fds", "lsm_fds")


def bcc_attachment_fds(b) -> list[int]:
    """The attachment descriptors (perf events, BPF links) a bcc BPF object holds."""
    fds = []
    for table in BCC_ATTACHMENT_TABLES:
        for fd in (getattr(b, table, {}) or {}).values():   # kprobes: {event: {function: fd}}; the others {name: fd}
            fds += list(fd.values()) if isinstance(fd, dict) else [fd]
    return fds


def close_bcc_descriptors(b) -> None:
    """Close every attachment and program descriptor a bcc BPF object still
    holds, whatever state its cleanup left it in: with the last descriptor
    the kernel detaches the program and unloads it. A number bcc closed
    before it raised (its bookkeeping not yet updated) may already name
    another file of this process: only a descriptor that is still a perf
    event, BPF link or program is closed."""
    fds = bcc_attachment_fds(b)
    for table in BCC_ATTACHMENT_TABLES:
        (getattr(b, table, {}) or {}).clear()
    funcs = getattr(b, "funcs", {}) or {}
    fds += [fn.fd for fn in funcs.values()]
    funcs.clear()
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") in BCC_DESCRIPTOR_KINDS:
                os.close(fd)
        except OSError:
            pass     # closed already by the cleanup that stopped part way


def kernel_function_attach(caps, symbols: list[str]) -> Availability:
    """How to attach to kernel functions: fentry where it loads, else kprobe."""
    present = [sym for sym in symbols if caps[f"ksym:{sym}"].available]
    if not present:
        return Availability(False, f"{', '.join(symbols)} not in /proc/kallsyms")
    if not caps["bcc"].available:
        return Availability(False, caps["bcc"].detail)
    if caps["fentry"].available:
        return Availability(True, attach_via="fentry")
    if caps["kprobe"].available:
        return Availability(True, attach_via="kprobe")
    return Availability(False, f"neither fentry ({caps['fentry'].detail}) nor kprobes ({caps['kprobe'].detail})")


def attach_functions(probe, kprobes: list[tuple[str, str, str | None]]) -> dict[str, str]:
    """Load a function probe by fentry where it loads (its fentry programs
    attach themselves), else by kprobe, then attach by kprobe each (symbol,
    entry program, return program or None) the probe routes by kprobe
    (Probe.by_kprobe). Returns {symbol: why} for the kprobes the kernel
    refused; the caller says whether the probe can run without them."""
    probe.via = probe.availability().attach_via
    load_with_fallback(probe)
    refused = {}
    for symbol, entry, ret in kprobes:
        if not probe.by_kprobe(symbol):
            continue
        # libbcc prints its own line for a refused kprobe on fd 2; the
        # refusal is reported here (the probe's notes), its line with it
        with stderr_captured() as libbcc:
            try:
                probe.bpf.attach_kprobe(event=symbol, fn_name=entry)
                if ret:
                    probe.bpf.attach_kretprobe(event=symbol, fn_name=ret)
            except Exception as exc:  # bcc raises a bare Exception for a refused kprobe
                refused[symbol] = f"kprobe refused: {exc}"
        said = " ".join(libbcc.text.split())
        if symbol in refused and said:
            refused[symbol] += f" (libbcc: {said})"
        elif said:                  # an attach that worked: what libbcc said is not nttrace's to drop
            sys.stderr.write(libbcc.text)
    return refused


def load_with_fallback(probe) -> None:
    """Load `probe` by fentry, falling back to kprobe when the fentry program
    does not load or attach (e.g. a function with more arguments than the
    kernel's BPF trampoline takes)."""
    if probe.via == "fentry":
        try:
            probe.load()
            probe.fentry_error = ""
            return
        except Exception as exc:
            probe.fentry_error = str(exc)
            if not probe.caps["kprobe"].available:
                raise
            probe.via = "kprobe"
    probe.load()
