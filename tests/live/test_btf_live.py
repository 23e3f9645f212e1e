# SPDX-License-Identifier: Apache-2.0
"""The BTF reader on this host's kernel: every lookup gives what decoding
every type would (the hand-made tables are in tests/unit/test_btf.py)."""
from pathlib import Path

import pytest

from nttrace.kernel.btf import KIND_ENUM, KIND_FUNC, KIND_STRUCT, Btf

LIVE = Path("/sys/kernel/btf/vmlinux")


@pytest.mark.needs("btf")
def test_every_lookup_on_the_live_btf_matches_decoding_every_type():
    btf = Btf.from_file(LIVE)
    first: dict[tuple[int, str], int] = {}
    tid = 1
    while tid < len(btf._offs):
        t = btf._type(tid)
        if t.name:
            first.setdefault((t.kind, t.name), tid)
        tid += 1
    assert len(first) > 10_000
    enums = [name for kind, name in first if kind == KIND_ENUM]
    structs = sorted(name for kind, name in first if kind == KIND_STRUCT)[::25]
    funcs = sorted(name for kind, name in first if kind == KIND_FUNC)[::200]
    assert enums and structs and funcs
    for kind, names in ((KIND_ENUM, enums), (KIND_STRUCT, structs), (KIND_FUNC, funcs)):
        for name in names:
            assert btf._id(kind, name) == first[(kind, name)], (kind, name)
    for name in ("migrate_mode", "migrate_reason"):
        assert btf.enum(name) == dict(btf._type(first[(KIND_ENUM, name)]).members)
    assert btf.struct_size("page") == btf._type(first[(KIND_STRUCT, "page")]).size_or_type
    for absent in ("nttrace_no_such_type", "age", "_page"):
        assert btf._id(KIND_STRUCT, absent) == first.get((KIND_STRUCT, absent))
    assert not btf.has_enum("nttrace_no_such_enum") and not btf.has_func("nttrace_no_such_func")
