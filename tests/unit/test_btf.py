# SPDX-License-Identifier: Apache-2.0
"""The BTF reader decodes a type only when a query reaches it: its lookups
must give what decoding every type would, on hand-made tables with the
shapes a producer may choose (on this host's BTF: tests/live/test_btf_live.py)."""
import struct

import pytest

from nttrace.errors import UsageError
from nttrace.kernel.btf import KIND_ENUM, KIND_FWD, KIND_STRUCT, KIND_UNION, Btf


def _table(strings: bytes, types: list[bytes]) -> bytes:
    body = b"".join(types)
    return struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(body), len(body), len(strings)) + body + strings


def _struct(name_off: int, size: int, members: list[tuple[int, int, int]], kind: int = KIND_STRUCT) -> bytes:
    return (struct.pack("<III", name_off, (kind << 24) | len(members), size)
            + b"".join(struct.pack("<III", n, t, bits) for n, t, bits in members))


def _int(name_off: int) -> bytes:
    return struct.pack("<III", name_off, 1 << 24, 4) + struct.pack("<I", 32)


def test_the_first_type_of_the_kind_asked_wins_and_a_struct_before_a_union():
    # "\0page\0page\0u32\0" : two copies of the name (a producer need not
    # dedup strings), a FWD, a union and two structs named page
    strings = b"\0page\0page\0u32\0"
    page_a, page_b, u32 = 1, 6, 11
    types = [_int(u32),                                           # 1
             struct.pack("<III", page_a, KIND_FWD << 24, 0),     # 2: a forward declaration
             _struct(page_b, 8, [(u32, 1, 0)], KIND_UNION),       # 3
             _struct(page_b, 16, [(u32, 1, 64)]),                 # 4: the first struct
             _struct(page_a, 32, [(u32, 1, 0)])]                  # 5
    btf = Btf(_table(strings, types))
    assert btf._id(KIND_FWD, "page") == 2 and btf._id(KIND_UNION, "page") == 3
    assert btf._id(KIND_STRUCT, "page") == 4 and btf.struct_size("page") == 16
    assert btf.member_offset("page", "u32") == 8


def test_a_name_that_is_the_tail_of_another_string_is_found():
    # "xpage" holds "page" at offset 2: a producer may point a type there
    strings = b"\0xpage\0u32\0"
    types = [_int(7), _struct(2, 24, [(7, 1, 32)])]
    btf = Btf(_table(strings, types))
    assert btf.struct_size("page") == 24 and btf.member_offset("page", "u32") == 4
    with pytest.raises(KeyError):
        btf.struct_size("xpag")


def test_a_table_whose_last_type_overruns_its_section_is_malformed():
    strings = b"\0s\0"
    good = _struct(1, 8, [(1, 0, 0)])
    data = bytearray(_table(strings, [good]))
    struct.pack_into("<I", data, 12, len(good) - 4)   # type_len four bytes short of the one record
    with pytest.raises(UsageError, match="malformed BTF"):
        Btf(bytes(data))


def test_a_name_outside_the_string_section_is_a_usage_error_when_read():
    btf = Btf(_table(b"\0e\0", [struct.pack("<III", 1, (KIND_ENUM << 24) | 1, 4) + struct.pack("<Ii", 999, 0)]))
    with pytest.raises(UsageError, match="outside the string section"):
        btf.enum("e")


def test_a_types_name_outside_the_string_section_is_malformed():
    with pytest.raises(UsageError, match="name outside the string section"):
        Btf(_table(b"\0s\0", [_int(64)]))
