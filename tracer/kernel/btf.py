# SPDX-License-Identifier: Apache-2.0
"""A reader for the kernel's BTF (`/sys/kernel/btf/vmlinux`).

nttrace takes enum values and struct member offsets from the running kernel's
BTF rather than from headers: the NT demotion revisions put their new
`migrate_mode` at different positions, and struct layouts follow the config.
Only what nttrace needs is decoded: enums and struct/union members (with
anonymous members flattened so `page.pgmap` resolves through unions).
"""
from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

from nttrace.errors import UsageError

BTF_MAGIC = 0xEB9F

KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM = 1, 2, 3, 4, 5, 6
KIND_FWD, KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT = 7, 8, 9, 10, 11
KIND_FUNC, KIND_FUNC_PROTO, KIND_VAR, KIND_DATASEC, KIND_FLOAT = 12, 13, 14, 15, 16
KIND_DECL_TAG, KIND_TYPE_TAG, KIND_ENUM64 = 17, 18, 19

# Bytes that follow the 12-byte common header, per kind: (fixed, per vlen entry).
_TRAILER = {
    KIND_INT: (4, 0), KIND_PTR: (0, 0), KIND_ARRAY: (12, 0), KIND_STRUCT: (0, 12),
    KIND_UNION: (0, 12), KIND_ENUM: (0, 8), KIND_FWD: (0, 0), KIND_TYPEDEF: (0, 0),
    KIND_VOLATILE: (0, 0), KIND_CONST: (0, 0), KIND_RESTRICT: (0, 0), KIND_FUNC: (0, 0),
    KIND_FUNC_PROTO: (0, 8), KIND_VAR: (4, 0), KIND_DATASEC: (0, 12), KIND_FLOAT: (0, 0),
    KIND_DECL_TAG: (4, 0), KIND_TYPE_TAG: (0, 0), KIND_ENUM64: (0, 12),
}
_TRAILER_BY_KIND = [_TRAILER.get(kind) for kind in range(32)]
_HEADER = struct.Struct("<III")   # name_off, info (kind, vlen, kind_flag), size or type
_MODIFIERS = {KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG}


@dataclass
class BtfType:
    kind: int
    name: str
    size_or_type: int
    vlen: int
    kind_flag: bool
    members: list  # struct/union: (name, type_id, bit_offset); enum: (name, value)


class Btf:
    """The BTF of one kernel. Construction walks the type section once,
    keeping where each type's record starts and its kind and name offset
    (type ids are the records' positions in that section); a type's name and
    members are decoded only when a query reaches it. Parsing every type up
    front cost ~1.2 s of a 1.5 s `nttrace validate` on the host (126,668
    types), and tens of seconds per command under the lab's TCG."""

    def __init__(self, data: bytes, source: str = "<bytes>"):
        self.source = source
        self._data = data
        try:
            self._walk(data)
        except (struct.error, IndexError) as exc:
            raise UsageError(f"{source}: malformed BTF ({exc.__class__.__name__})") from None
        self._decoded: dict[int, BtfType] = {}
        self._found: dict[tuple[int, str], int | None] = {}
        self._tails: bool | None = None       # decided on the first name lookup
        self._named: set[int] | None = None   # type names' offsets, when tails are shared

    @classmethod
    def from_file(cls, path: str | Path) -> "Btf":
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read BTF {path}: {exc.strerror}") from None
        return cls(data, str(path))

    def _walk(self, data: bytes) -> None:
        if len(data) < 24:
            raise UsageError(f"{self.source}: not a BTF file (too short)")
        magic, version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise UsageError(f"{self.source}: not a BTF file (bad magic {magic:#x})")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        types_start = hdr_len + type_off
        self._str_start, self._str_end = hdr_len + str_off, hdr_len + str_off + str_len
        if types_start + type_len > len(data) or self._str_end > len(data):
            raise UsageError(f"{self.source}: truncated BTF")
        # type id 0 is void: no record
        offs, names, kinds = array("I", [0]), array("I", [0]), bytearray(1)
        add_off, add_name, add_kind = offs.append, names.append, kinds.append
        header, trailer = _HEADER.unpack_from, _TRAILER_BY_KIND
        pos, end = types_start, types_start + type_len
        while pos < end:
            name_off, info, _size_or_type = header(data, pos)
            kind = (info >> 24) & 0x1F
            sizes = trailer[kind]
            if sizes is None:
                raise UsageError(f"{self.source}: unknown BTF kind {kind}")
            add_off(pos)
            add_name(name_off)
            add_kind(kind)
            pos += 12 + sizes[0] + sizes[1] * (info & 0xFFFF)
        if pos != end:
            raise UsageError(f"{self.source}: malformed BTF (the last type runs past the type section)")
        if max(names) >= str_len:
            raise UsageError(f"{self.source}: malformed BTF (a type's name outside the string section)")
        self._offs, self._names, self._kinds = offs, names, kinds

    def _name_at(self, off: int) -> str:
        start = self._str_start + off
        end = self._data.find(b"\0", start, self._str_end)
        if off >= self._str_end - self._str_start or end < 0:
            raise UsageError(f"{self.source}: malformed BTF (a name outside the string section)")
        try:
            return self._data[start:end].decode()
        except UnicodeDecodeError:
            raise UsageError(f"{self.source}: malformed BTF (a name that is not UTF-8)") from None

    def _type(self, tid: int) -> BtfType | None:
        """Type `tid`, decoded (and kept) on first use; None for void."""
        if tid == 0:
            return None
        t = self._decoded.get(tid)
        if t is None:
            t = self._decoded[tid] = self._decode(tid)
        return t

    def _decode(self, tid: int) -> BtfType:
        data, pos, kind = self._data, self._offs[tid], self._kinds[tid]
        name_off, info, size_or_type = _HEADER.unpack_from(data, pos)
        vlen, kind_flag = info & 0xFFFF, bool(info >> 31)
        pos += 12 + _TRAILER[kind][0]
        members: list = []
        if kind in (KIND_STRUCT, KIND_UNION):
            for m_name, m_type, m_off in struct.iter_unpack("<III", data[pos:pos + 12 * vlen]):
                members.append((self._name_at(m_name), m_type, (m_off & 0xFFFFFF) if kind_flag else m_off))
        elif kind == KIND_ENUM:
            for m_name, raw in struct.iter_unpack("<Ii" if kind_flag else "<II", data[pos:pos + 8 * vlen]):
                members.append((self._name_at(m_name), raw))
        elif kind == KIND_FUNC_PROTO:
            for m_name, m_type in struct.iter_unpack("<II", data[pos:pos + 8 * vlen]):
                members.append((self._name_at(m_name), m_type))
        elif kind == KIND_ENUM64:
            for m_name, lo, hi in struct.iter_unpack("<III", data[pos:pos + 12 * vlen]):
                members.append((self._name_at(m_name), (hi << 32) | lo))
        return BtfType(kind, self._name_at(name_off), size_or_type, vlen, kind_flag, members)

    def _id(self, kind: int, name: str) -> int | None:
        """The first type of `kind` named `name`, or None. The name is found
        in the string section (every place it ends a string: strings may
        share a tail), then the types whose name is at one of those offsets."""
        key = (kind, name)
        if key not in self._found:
            data, start = self._data, self._str_start
            if self._tails is None:
                # Does any type's name start inside another string (a shared
                # tail)? pahole's tables never do; only then is every place
                # the name ends a string a candidate.
                self._tails = any(data[start + off - 1] for off in self._names if off)
                self._named = set(self._names) if self._tails else None
            best = None
            if self._tails:
                want, first = name.encode() + b"\0", 0
            else:
                want, first = b"\0" + name.encode() + b"\0", 1
            at = data.find(want, start, self._str_end)
            while at >= 0:
                off = at + first - start
                if self._named is None or off in self._named:
                    tid = self._first_of_kind(off, kind)
                    if tid is not None and (best is None or tid < best):
                        best = tid
                at = data.find(want, at + 1, self._str_end)
            self._found[key] = best
        return self._found[key]

    def _first_of_kind(self, name_off: int, kind: int) -> int | None:
        tid = 0
        while True:
            try:
                tid = self._names.index(name_off, tid + 1)   # a scan in C, not a Python loop
            except ValueError:
                return None
            if self._kinds[tid] == kind:
                return tid

    # -- queries ---------------------------------------------------------
    def has_enum(self, name: str) -> bool:
        return self._id(KIND_ENUM, name) is not None or self._id(KIND_ENUM64, name) is not None

    def enum(self, name: str) -> dict[str, int]:
        """`enum NAME` as {enumerator: value}, in declaration order."""
        tid = self._id(KIND_ENUM, name) or self._id(KIND_ENUM64, name)
        if tid is None:
            raise KeyError(f"enum {name} not in BTF")
        return dict(self._type(tid).members)

    def has_func(self, name: str) -> bool:
        """True when BTF describes kernel function `name` (fentry needs it;
        assembly routines have no BTF)."""
        return self._id(KIND_FUNC, name) is not None

    def func_params(self, name: str) -> list[str]:
        """Parameter names of kernel function `name`, in order."""
        tid = self._id(KIND_FUNC, name)
        if tid is None:
            raise KeyError(f"function {name} not in BTF")
        proto = self._type(self._type(tid).size_or_type)
        return [p_name for p_name, _p_type in proto.members]

    def struct_size(self, name: str) -> int:
        return self._type(self._struct_id(name)).size_or_type

    def _struct_id(self, name: str) -> int:
        tid = self._id(KIND_STRUCT, name) or self._id(KIND_UNION, name)
        if tid is None:
            raise KeyError(f"struct {name} not in BTF")
        return tid

    def _resolve(self, tid: int) -> int:
        while tid and self._kinds[tid] in _MODIFIERS:
            tid = self._type(tid).size_or_type
        return tid

    def _find_member(self, tid: int, name: str) -> tuple[int, int] | None:
        """(bit offset, type id) of member `name`, looking through anonymous members."""
        t = self._type(self._resolve(tid))
        if t is None or t.kind not in (KIND_STRUCT, KIND_UNION):
            return None
        for m_name, m_type, bit_off in t.members:
            if m_name == name:
                return bit_off, m_type
        for m_name, m_type, bit_off in t.members:
            if not m_name:
                inner = self._find_member(m_type, name)
                if inner is not None:
                    return bit_off + inner[0], inner[1]
        return None

    def member_offset(self, struct_name: str, path: str) -> int:
        """Byte offset of `path` (e.g. "type" or "ref.data") in `struct struct_name`."""
        tid, bits = self._struct_id(struct_name), 0
        for part in path.split("."):
            found = self._find_member(tid, part)
            if found is None:
                raise KeyError(f"struct {struct_name} has no member {path}")
            bits += found[0]
            tid = found[1]
        if bits % 8:
            raise KeyError(f"struct {struct_name}.{path} is a bitfield")
        return bits // 8
