# SPDX-License-Identifier: Apache-2.0
"""What probes make of what they read, without the host: memmap's template
path from page_ref_set counts, copy's folio-order offset from a hand-made
BTF, memremap's ground truth from test_hmm's own lines and what memremap
declares (their programs on this host: tests/live/test_probe_programs.py and
tests/live/test_probe_memremap.py)."""
import pytest

from nttrace.probes import PROBES
from nttrace.probes.memmap import infer_template_path
from nttrace.probes.memremap import CHUNK_LINE, MemremapProbe


@pytest.mark.parametrize("sets,pages,expected", [(2048, 1024, "slow"), (1024, 1024, "slow"), (2, 262144, "template"),
                                                 (4, 512, "template"), (300, 1024, "mixed"), (0, 0, "unknown")])
def test_template_path_inference(sets, pages, expected):
    assert infer_template_path(sets, pages) == expected


# struct folio's head, as the two layouts put it (byte offsets on x86-64):
# 6.1 keeps the order in _folio_order beside a _flags_1 that is the first
# tail page's flags; 6.6 and later keep it in _flags_1's low byte.
FOLIO_6_1 = [("flags", 0), ("_flags_1", 64), ("_head_1", 72), ("_folio_dtor", 80), ("_folio_order", 81)]
FOLIO_6_18 = [("flags", 0), ("_flags_1", 64), ("_head_1", 72), ("_large_mapcount", 80)]


@pytest.mark.parametrize("members,order_at", [(FOLIO_6_1, 81), (FOLIO_6_18, 64)], ids=["6.1", "6.18"])
def test_folio_order_is_read_where_the_kernels_folio_keeps_it(members, order_at):
    from sysroot_builder import BtfWriter
    from nttrace.kernel.btf import Btf
    from nttrace.probes.copy import folio_layout
    w = BtfWriter()
    u64, u8 = w.int_type("long unsigned int", 8), w.int_type("unsigned char", 1)
    w.enum("pageflags", {"PG_locked": 0, "PG_head": 6})
    w.struct("folio", 128, [(n, u8 if n.startswith("_folio") else u64, off) for n, off in members])
    assert folio_layout(Btf(w.bytes())) == {"NTTRACE_FOLIO_FLAGS": 0, "NTTRACE_PG_HEAD": 6, "NTTRACE_FOLIO_ORDER": order_at}


def test_memremap_is_registered_and_declares_what_it_attaches_to():
    assert PROBES[MemremapProbe.name] is MemremapProbe
    assert MemremapProbe.functions == ("memremap_pages",)
    keys = {c.key for c in MemremapProbe.columns} | {m.value for m in MemremapProbe.metrics}
    assert {"calls", "pages", "latency_ns", "failed"} <= keys


def test_memremaps_ground_truth_is_test_hmms_own_chunk_lines():
    log = ("HMM test module loaded. This is only for testing HMM.\n"
           "added new 256 MB chunk (total 1 chunks, 256 MB) PFNs [0x8000000 0x8010000)\n"
           "added new 256 MB chunk (total 1 chunks, 256 MB) PFNs [0x8010000 0x8020000)\n")
    assert [int(m) for m in CHUNK_LINE.findall(log)] == [256, 256]
    assert CHUNK_LINE.findall("added new chunk") == []
