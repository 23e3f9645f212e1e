# SPDX-License-Identifier: Apache-2.0
"""The running kernel's GNU build-id: the ELF note the linker puts in
vmlinux (NT_GNU_BUILD_ID, owner "GNU"), which the kernel shows in
/sys/kernel/notes. Two builds of one source and config have different ones
unless the build is reproducible bit for bit: what tells an A/B's runs were
taken on one build of a kernel where its release and build string are the
same.

/sys/kernel/notes holds the notes as the ELF note section stores them: a
4-byte name size, a 4-byte descriptor size and a 4-byte type, then the name
and the descriptor, each padded to 4 bytes, in the machine's byte order.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

NT_GNU_BUILD_ID = 3
NOTES = Path("/sys/kernel/notes")


def parse(data: bytes, order: str = sys.byteorder) -> str | None:
    """The build-id (hex) in a notes blob, None where it holds none."""
    fmt = "<III" if order == "little" else ">III"
    at = 0
    while at + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from(fmt, data, at)
        at += 12
        name = data[at:at + namesz]
        at += (namesz + 3) & ~3
        desc = data[at:at + descsz]
        at += (descsz + 3) & ~3
        if kind == NT_GNU_BUILD_ID and name.rstrip(b"\0") == b"GNU" and desc:
            return desc.hex()
    return None


def read(path: Path = NOTES) -> str | None:
    """The running kernel's build-id, None where it cannot be read."""
    try:
        return parse(path.read_bytes())
    except OSError:
        return None
