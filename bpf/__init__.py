# SPDX-License-Identifier: Apache-2.0
"""BPF C programs, compiled by bcc at run time. `source(name)` reads one;
`struct_type(name, struct)` turns one of its C structs into the ctypes
layout Python reads it with, `map_decls(name)` lists its maps with their
key and value types, and `defines(name)` its numeric #defines, so each
record, stats layout, map and constant is declared once, in the C."""
from __future__ import annotations

import ctypes
import re
from functools import lru_cache
from importlib import resources

C_TYPES = {"u64": ctypes.c_uint64, "s64": ctypes.c_int64, "u32": ctypes.c_uint32, "s32": ctypes.c_int32,
           "u16": ctypes.c_uint16, "s16": ctypes.c_int16, "u8": ctypes.c_uint8, "s8": ctypes.c_int8}
_FIELD = re.compile(r"^\s*(\w+)\s+(\w+)\s*(?:\[\s*(\w+)\s*\])?\s*;")
_DEFINE = re.compile(r"^#define\s+(\w+)\s+(\d+)\b", re.M)


def source(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text()


def defines(name: str) -> dict[str, int]:
    """The numeric #defines of a source, common.h's first (the source's win)."""
    out = {k: int(v) for k, v in _DEFINE.findall(source("common.h"))}
    out.update({k: int(v) for k, v in _DEFINE.findall(source(name))})
    return out


@lru_cache(maxsize=None)
def struct_type(name: str, struct: str, **sizes: int) -> type[ctypes.Structure]:
    """The ctypes Structure of `struct <struct>` in the source `name` (or in
    common.h). Members are nttrace's fixed-width types (u64, s32, ...), or
    arrays of them sized by a number or by a #define of the source; `sizes`
    gives array sizes the loader defines at load time."""
    text = source(name)
    body = re.search(r"struct\s+" + re.escape(struct) + r"\s*\{(.*?)\n\};", text, re.S)
    if body is None and name != "common.h":
        return struct_type("common.h", struct, **sizes)
    if body is None:
        raise KeyError(f"no struct {struct} in {name}")
    sized = {**defines(name), **sizes}
    fields = []
    for line in re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S).splitlines():
        if not line.strip():
            continue
        m = _FIELD.match(line)
        if m is None or m.group(1) not in C_TYPES:
            raise ValueError(f"struct {struct} in {name}: cannot read member {line.strip()!r}")
        ctype = C_TYPES[m.group(1)]
        if m.group(3):
            n = m.group(3)
            ctype = ctype * (int(n) if n.isdigit() else sized[n])
        fields.append((m.group(2), ctype))
    return type(struct, (ctypes.Structure,), {"_fields_": fields})


_MAP = re.compile(r"^\s*(BPF_[A-Z_]+)\(\s*(\w+)\s*(?:,([^;]*))?\)\s*;", re.M)
U64 = ctypes.c_uint64


def _c_type(name: str, text: str, **sizes: int):
    text = text.strip()
    if text.startswith("struct "):
        return struct_type(name, text.split()[1], **sizes)
    if text in C_TYPES:
        return C_TYPES[text]
    if text == "int":
        return ctypes.c_int32
    raise ValueError(f"{name}: map type {text!r} is not one nttrace reads")


def map_decls(name: str, **sizes: int) -> dict[str, tuple[str, object, object]]:
    """{map: (macro, key ctype, value ctype)} of the bcc map macros in the
    source `name`: BPF_ARRAY / BPF_PERCPU_ARRAY (u32 key), BPF_HASH,
    BPF_PERF_OUTPUT (no key or value read). Histograms are no map of their
    own: a stats struct's hist[] (common.h: NTTRACE_LATENCY)."""
    out = {}
    for macro, map_name, args in _MAP.findall(source(name)):
        parts = [a.strip() for a in (args or "").split(",") if a.strip()]
        if macro in ("BPF_ARRAY", "BPF_PERCPU_ARRAY"):
            out[map_name] = (macro, ctypes.c_int32, _c_type(name, parts[0], **sizes) if parts else U64)
        elif macro == "BPF_HASH":
            key = _c_type(name, parts[0], **sizes) if parts else U64
            value = _c_type(name, parts[1], **sizes) if len(parts) > 1 else U64
            out[map_name] = (macro, key, value)
        elif macro == "BPF_PERF_OUTPUT":
            out[map_name] = (macro, None, None)
    return out
