# SPDX-License-Identifier: Apache-2.0
"""The running kernel's GNU build-id, read from /sys/kernel/notes as the
kernel lays its ELF notes out: other notes (Xen's, the kernel's own
"Linux" notes) before it, names and descriptors padded to 4 bytes."""
import struct

from nttrace.kernel import build_id


def note(name: bytes, kind: int, desc: bytes) -> bytes:
    pad = lambda b: b + b"\0" * (-len(b) % 4)      # noqa: E731
    return struct.pack("<III", len(name), len(desc), kind) + pad(name) + pad(desc)


def test_the_gnu_build_id_is_found_among_the_kernels_other_notes(tmp_path):
    bid = bytes(range(20))
    blob = note(b"Linux\0", 6, b"6.18.44\0") + note(b"Xen\0", 1, b"\x01\x02") + note(b"GNU\0", 3, bid)
    assert build_id.parse(blob, "little") == bid.hex()
    (tmp_path / "notes").write_bytes(blob)
    assert build_id.read(tmp_path / "notes") == bid.hex()
    # a name that is not GNU's, a truncated blob, a missing file: none
    assert build_id.parse(note(b"GNX\0", 3, bid), "little") is None
    assert build_id.parse(blob[:-30], "little") is None
    assert build_id.read(tmp_path / "none") is None

