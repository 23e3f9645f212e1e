# SPDX-License-Identifier: Apache-2.0
"""Tracepoint `format` files: field offsets and `__print_symbolic` tables.

BPF programs attached to tracepoints read the raw record; nttrace takes each
field's offset and size from the running kernel's format file, never from a
header, and uses the symbolic tables to cross-check enum values read from BTF.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nttrace.errors import UsageError

_FIELD_RE = re.compile(
    r"field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);\s*signed:(?P<signed>\d+);"
)
_SYMBOLIC_RE = re.compile(r"__print_symbolic\(\s*REC->(?P<field>\w+)\s*,(?P<body>.*?)\)(?=\s*[,)]|\s*$)", re.S)
_PAIR_RE = re.compile(r"\{\s*(?P<value>-?(?:0x[0-9a-fA-F]+|\d+))\s*,\s*\"(?P<name>[^\"]*)\"\s*\}")


@dataclass
class TracepointField:
    ctype: str
    name: str
    offset: int
    size: int
    signed: bool


@dataclass
class TracepointFormat:
    system: str
    event: str
    id: int
    fields: dict[str, TracepointField] = field(default_factory=dict)
    print_fmt: str = ""

    def symbolic(self, field_name: str) -> dict[int, str]:
        """The `__print_symbolic(REC->field, ...)` table as {value: name}."""
        for m in _SYMBOLIC_RE.finditer(self.print_fmt):
            if m.group("field") == field_name:
                return {int(p.group("value"), 0): p.group("name") for p in _PAIR_RE.finditer(m.group("body"))}
        return {}

    def require(self, *names: str) -> None:
        missing = [n for n in names if n not in self.fields]
        if missing:
            raise UsageError(
                f"tracepoint {self.system}:{self.event} has no field {', '.join(missing)} on this kernel"
            )


def parse_format(text: str, system: str = "", event: str = "") -> TracepointFormat:
    name_m = re.search(r"^name:\s*(\S+)", text, re.M)
    id_m = re.search(r"^ID:\s*(\d+)", text, re.M)
    fmt_m = re.search(r"^print fmt:\s*(.*)$", text, re.M | re.S)
    if not (name_m and id_m):
        raise UsageError(f"tracepoint format for {system}:{event} is malformed (no name/ID line)")
    tp = TracepointFormat(system, event or name_m.group(1), int(id_m.group(1)), print_fmt=(fmt_m.group(1).strip() if fmt_m else ""))
    for m in _FIELD_RE.finditer(text):
        decl = m.group("decl").strip()
        # "unsigned short common_type", "char comm[16]", "enum migrate_mode mode"
        decl_m = re.match(r"(?P<ctype>.*?)\s*(?P<name>\w+)\s*(?:\[[^\]]*\])?$", decl)
        if not decl_m:
            continue
        tp.fields[decl_m.group("name")] = TracepointField(
            decl_m.group("ctype"), decl_m.group("name"), int(m.group("offset")), int(m.group("size")), m.group("signed") == "1"
        )
    return tp


def format_path(tracefs: Path, system: str, event: str) -> Path:
    return tracefs / "events" / system / event / "format"


def read_format(tracefs: Path | None, system: str, event: str) -> TracepointFormat | None:
    """The format of `system:event`, or None when the kernel has no such tracepoint."""
    if tracefs is None:
        return None
    path = format_path(tracefs, system, event)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return parse_format(text, system, event)


def ftrace_sites(tracefs: Path | None) -> set[str] | None:
    """The functions ftrace can hook (`available_filter_functions`): a
    function fentry can attach to must be one of them (the BPF trampoline
    patches its __fentry__ call). None when the list cannot be read (no
    tracefs, or a locked-down kernel that refuses it): nothing can be said."""
    if tracefs is None:
        return None
    try:
        text = (tracefs / "available_filter_functions").read_text()
    except OSError:
        return None
    # "name" or "name [module]"
    return {line.split(" ", 1)[0] for line in text.splitlines() if line}
