# SPDX-License-Identifier: Apache-2.0
"""BPF maps read with the bpf(2) system call, without bcc or LLVM: the
daemon's side of the loader (nttrace.daemon.loader). It holds the map and
attachment descriptors the loader passed it (Handed: one probe's, as data
the Tracer adopts); a MapSet answers the lookups
the probes' snapshot() make, as bcc's tables do (table[key], a list of
per-CPU values for per-CPU maps, .items()), with the key and value layouts
read from the maps' declarations in the BPF C (nttrace.bpf.map_decls) and
checked against the kernel's own sizes. Closing the descriptors detaches."""
from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from nttrace import bpf as bpf_sources

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
BPF_MAP_LOOKUP_ELEM, BPF_MAP_GET_NEXT_KEY, BPF_OBJ_GET_INFO_BY_FD = 1, 4, 15
PERCPU = ("BPF_PERCPU_ARRAY",)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _ElemAttr(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("key", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _InfoAttr(ctypes.Structure):
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


class MapInfo(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16)]


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    rc = _libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc


def map_info(fd: int) -> MapInfo:
    info = MapInfo()
    _bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(fd, ctypes.sizeof(info), ctypes.addressof(info)))
    return info


def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """How many per-CPU values a lookup returns: the kernel's possible CPUs."""
    n = 0
    for part in Path(path).read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


class Table:
    """One map, read by its descriptor. A lookup returns the value bytes the
    kernel copies out (one slot per possible CPU for a per-CPU map, each
    8-byte aligned), decoded by decode(): the one decoding of a map value."""

    def __init__(self, name: str, fd: int, macro: str, key_t, value_t):
        self.name, self.fd, self.macro = name, fd, macro
        self.key_t, self.value_t = key_t, value_t
        info = map_info(fd)
        if (info.key_size, info.value_size) != (ctypes.sizeof(key_t), ctypes.sizeof(value_t)):
            raise ValueError(f"map {name}: the kernel has key/value sizes {info.key_size}/{info.value_size}, "
                             f"its C declaration {ctypes.sizeof(key_t)}/{ctypes.sizeof(value_t)}")
        self.ncpus = possible_cpus() if macro in PERCPU else 1

    @property
    def _stride(self) -> int:
        return (ctypes.sizeof(self.value_t) + 7) & ~7

    def _key(self, key):
        return key if isinstance(key, self.key_t) else self.key_t(key.value if hasattr(key, "value") else key)

    def lookup(self, key) -> bytes:
        """The value bytes of `key` as bpf(BPF_MAP_LOOKUP_ELEM) copies them out."""
        k = self._key(key)
        buf = (ctypes.c_char * (self._stride * self.ncpus))()
        try:
            _bpf(BPF_MAP_LOOKUP_ELEM, _ElemAttr(self.fd, 0, ctypes.addressof(k), ctypes.addressof(buf), 0))
        except FileNotFoundError:
            raise KeyError(key) from None
        return bytes(buf)

    def decode(self, raw: bytes):
        values = [self.value_t.from_buffer_copy(raw, i * self._stride) for i in range(self.ncpus)]
        return values if self.macro in PERCPU else values[0]

    def __getitem__(self, key):
        return self.decode(self.lookup(key))

    def dump(self) -> dict:
        """Every entry's key and value bytes, as the kernel holds them (hex)."""
        entries = []
        for k in list(self.keys()):
            try:
                entries.append([bytes(k).hex(), self.lookup(k).hex()])
            except KeyError:      # deleted between the walk and the lookup
                continue
        return {"macro": self.macro, "ncpus": self.ncpus, "key_size": ctypes.sizeof(self.key_t),
                "value_size": ctypes.sizeof(self.value_t), "entries": entries}

    def keys(self):
        prev, key = None, self.key_t()
        while True:
            attr = _ElemAttr(self.fd, 0, ctypes.addressof(prev) if prev is not None else 0, ctypes.addressof(key), 0)
            try:
                _bpf(BPF_MAP_GET_NEXT_KEY, attr)
            except FileNotFoundError:
                return
            yield key
            prev, key = key, self.key_t()

    def items(self):
        out = []
        for k in list(self.keys()):
            try:
                out.append((k, self[k]))
            except KeyError:      # deleted between the walk and the lookup
                continue
        return out


class RecordedTable(Table):
    """A map as Table.dump() recorded it: the same lookups and the same
    decode(), from the recorded bytes instead of a descriptor."""

    def __init__(self, name: str, macro: str, key_t, value_t, recorded: dict):
        self.name, self.fd, self.macro = name, -1, macro
        self.key_t, self.value_t = key_t, value_t
        if (recorded["key_size"], recorded["value_size"]) != (ctypes.sizeof(key_t), ctypes.sizeof(value_t)):
            raise ValueError(f"map {name}: recorded with key/value sizes {recorded['key_size']}/"
                             f"{recorded['value_size']}, its C declaration now {ctypes.sizeof(key_t)}/"
                             f"{ctypes.sizeof(value_t)}")
        self.ncpus = recorded["ncpus"]
        self._entries = {bytes.fromhex(k): bytes.fromhex(v) for k, v in recorded["entries"]}

    def lookup(self, key) -> bytes:
        try:
            return self._entries[bytes(self._key(key))]
        except KeyError:
            raise KeyError(key) from None

    def keys(self):
        for k in self._entries:
            yield self.key_t.from_buffer_copy(k)


class MapSet:
    """A probe's maps and the descriptors that keep its programs attached,
    standing in for bcc's BPF object once the loader has exited; or (of_bcc)
    a view of the maps bcc holds, so that every reader of a probe's maps
    (trace, validate, the daemon) decodes them one way: the layouts of the
    C declarations (nttrace.bpf.map_decls), sizes checked against the kernel."""

    def __init__(self, source: str, maps: dict[str, int], attachments: list[int], owns: bool = True,
                 programs: dict[str, int] | None = None):
        decls = bpf_sources.map_decls(source)
        self.tables: dict[str, Table] = {}
        self.read: set[str] = set()      # the maps lookups went to (what dump() keeps)
        self.attachments = list(attachments)
        self.programs = dict(programs or {})   # function name -> program descriptor (its run-time counters)
        self._fds = (list(maps.values()) + list(self.programs.values()) + self.attachments) if owns else []
        try:
            for name, fd in maps.items():
                macro, key_t, value_t = decls[name]
                if key_t is not None:
                    self.tables[name] = Table(name, fd, macro, key_t, value_t)
        except BaseException:
            self.cleanup()
            raise

    @classmethod
    def of_bcc(cls, source: str, bpf) -> "MapSet":
        """The maps of a program bcc loaded, by their descriptors (bcc keeps
        them: closing this view closes nothing)."""
        fds = {}
        for name, (_macro, key_t, _value_t) in bpf_sources.map_decls(source).items():
            if key_t is None:
                continue
            try:
                fds[name] = bpf[name].map_fd
            except (KeyError, Exception):   # bcc raises a plain Exception for a map it did not create
                continue
        return cls(source, fds, [], owns=False)

    @classmethod
    def replay(cls, source: str, recorded: dict[str, dict]) -> "MapSet":
        """The maps of a recording (dump()), read through the same tables
        and decode as live maps: what a snapshot of them decodes offline is
        what it decoded on the kernel that filled them."""
        self = cls.__new__(cls)
        self.attachments, self._fds, self.tables, self.read, self.programs = [], [], {}, set(), {}
        decls = bpf_sources.map_decls(source)
        for name, rec in recorded.items():
            macro, key_t, value_t = decls[name]
            self.tables[name] = RecordedTable(name, macro, key_t, value_t, rec)
        return self

    def dump(self) -> dict[str, dict]:
        """The maps a snapshot read (the in-kernel scratch maps, such as the
        in-flight slots, are never read and not kept), as the kernel holds them."""
        return {name: self.tables[name].dump() for name in sorted(self.read)}

    def __getitem__(self, name: str) -> Table:
        self.read.add(name)
        return self.tables[name]

    def cleanup(self) -> None:
        """Close every descriptor: the kernel detaches the programs and frees
        them and their maps once nothing else holds them."""
        fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass
class Handed:
    """One probe as a process that attached it hands it over (the daemon's
    loader, nttrace.daemon.loader): its status entry, its declared state
    (Probe.state()) and, when attached, its maps and descriptors (a MapSet
    that owns them). Tracer.attach(handed=...) and set_probes(handed=...)
    adopt it; close() releases one nobody adopted."""
    status: dict
    state: dict = field(default_factory=dict)
    maps: MapSet | None = None

    def close(self) -> None:
        maps, self.maps = self.maps, None
        if maps is not None:
            maps.cleanup()
