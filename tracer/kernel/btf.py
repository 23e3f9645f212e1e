"""A reader for the kernel's BTF (`/sys/kernel/btf/vmlinux`).

nttrace takes enum values and struct member offsets from the running kernel's
BTF rather than from headers: the NT demotion revisions put their new
`migrate_mode` at different positions, and struct layouts follow the config.
Only what nttrace needs is decoded: enums and struct/union members (with
anonymous members flattened so `page.pgmap` resolves through unions).
"""
from __future__ import annotations

import struct
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
    def __init__(self, data: bytes, source: str = "<bytes>"):
        self.source = source
        try:
            self._types = self._parse(data)
        except (struct.error, IndexError, KeyError, UnicodeDecodeError) as exc:
            raise UsageError(f"{source}: malformed BTF ({exc.__class__.__name__})") from None
        self._by_name: dict[tuple[int, str], int] = {}
        for tid, t in enumerate(self._types):
            if t is not None and t.name:
                self._by_name.setdefault((t.kind, t.name), tid)

    @classmethod
    def from_file(cls, path: str | Path) -> "Btf":
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read BTF {path}: {exc.strerror}") from None
        return cls(data, str(path))

    def _parse(self, data: bytes) -> list:
        if len(data) < 24:
            raise UsageError(f"{self.source}: not a BTF file (too short)")
        magic, version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise UsageError(f"{self.source}: not a BTF file (bad magic {magic:#x})")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        types_start = hdr_len + type_off
        strings = data[hdr_len + str_off: hdr_len + str_off + str_len]
        if types_start + type_len > len(data) or hdr_len + str_off + str_len > len(data):
            raise UsageError(f"{self.source}: truncated BTF")

        def name_at(off: int) -> str:
            end = strings.index(b"\0", off)
            return strings[off:end].decode()

        types: list = [None]  # type id 0 is void
        pos, end = types_start, types_start + type_len
        while pos < end:
            name_off, info, size_or_type = struct.unpack_from("<III", data, pos)
            pos += 12
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            kind_flag = bool(info >> 31)
            if kind not in _TRAILER:
                raise UsageError(f"{self.source}: unknown BTF kind {kind}")
            fixed, per = _TRAILER[kind]
            members: list = []
            if kind in (KIND_STRUCT, KIND_UNION):
                for i in range(vlen):
                    m_name, m_type, m_off = struct.unpack_from("<III", data, pos + fixed + 12 * i)
                    bit_off = (m_off & 0xFFFFFF) if kind_flag else m_off
                    members.append((name_at(m_name), m_type, bit_off))
            elif kind == KIND_ENUM:
                signed = kind_flag
                for i in range(vlen):
                    m_name, raw = struct.unpack_from("<Ii" if signed else "<II", data, pos + 8 * i)
                    members.append((name_at(m_name), raw))
            elif kind == KIND_FUNC_PROTO:
                for i in range(vlen):
                    m_name, m_type = struct.unpack_from("<II", data, pos + 8 * i)
                    members.append((name_at(m_name), m_type))
            elif kind == KIND_ENUM64:
                for i in range(vlen):
                    m_name, lo, hi = struct.unpack_from("<III", data, pos + 12 * i)
                    members.append((name_at(m_name), (hi << 32) | lo))
            pos += fixed + per * vlen
            types.append(BtfType(kind, name_at(name_off), size_or_type, vlen, kind_flag, members))
        return types

    # -- queries ---------------------------------------------------------
    def has_enum(self, name: str) -> bool:
        return (KIND_ENUM, name) in self._by_name or (KIND_ENUM64, name) in self._by_name

    def enum(self, name: str) -> dict[str, int]:
        """`enum NAME` as {enumerator: value}, in declaration order."""
        tid = self._by_name.get((KIND_ENUM, name)) or self._by_name.get((KIND_ENUM64, name))
        if tid is None:
            raise KeyError(f"enum {name} not in BTF")
        return dict(self._types[tid].members)

    def has_func(self, name: str) -> bool:
        """True when BTF describes kernel function `name` (fentry needs it;
        assembly routines have no BTF)."""
        return (KIND_FUNC, name) in self._by_name

    def func_params(self, name: str) -> list[str]:
        """Parameter names of kernel function `name`, in order."""
        tid = self._by_name.get((KIND_FUNC, name))
        if tid is None:
            raise KeyError(f"function {name} not in BTF")
        proto = self._types[self._types[tid].size_or_type]
        return [p_name for p_name, _p_type in proto.members]

    def struct_size(self, name: str) -> int:
        return self._types[self._struct_id(name)].size_or_type

    def _struct_id(self, name: str) -> int:
        tid = self._by_name.get((KIND_STRUCT, name)) or self._by_name.get((KIND_UNION, name))
        if tid is None:
            raise KeyError(f"struct {name} not in BTF")
        return tid

    def _resolve(self, tid: int) -> int:
        while self._types[tid] is not None and self._types[tid].kind in _MODIFIERS:
            tid = self._types[tid].size_or_type
        return tid

    def _find_member(self, tid: int, name: str) -> tuple[int, int] | None:
        """(bit offset, type id) of member `name`, looking through anonymous members."""
        t = self._types[self._resolve(tid)]
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
