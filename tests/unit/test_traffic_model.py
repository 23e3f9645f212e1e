# SPDX-License-Identifier: Apache-2.0
"""The traffic plugin's model without QEMU (lab/traffic/model.c, built here
with the system compiler and driven through ctypes): the NT-store decoder on
the bytes GNU as assembles, and the LLC / write-combining model on access
sequences whose traffic is known; and the driver's reading of QEMU's
`info ramblock` and of the plugin's output."""
import ctypes
import json
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))
from lab.traffic import run as trun  # noqa: E402

MODEL = REPO / "lab" / "traffic"
OTHER, NT, OPEN, CLOSE, FAST_STRING = 0, 1, 2, 3, 4
DRAM, PMEM = 0, 1
FIELDS = ["loads", "stores", "nt_stores", "fills_load", "fills_store", "writebacks", "writebacks_at_close",
          "nt_line_writes", "nt_partial_writes", "nt_partial_bytes", "nt_invalidates", "string_stores",
          "string_full_lines", "evictions"]
SOURCE_FIELDS = ["fills_load", "fills_store", "writebacks", "nt_line_writes", "nt_partial_bytes", "evictions"]

pytestmark = pytest.mark.skipif(not (shutil.which("cc") and shutil.which("as") and shutil.which("objcopy")),
                                reason="needs cc, as and objcopy")


class Params(ctypes.Structure):
    _fields_ = [("llc_bytes", ctypes.c_uint64), ("ways", ctypes.c_uint), ("line", ctypes.c_uint),
                ("wc_buffers", ctypes.c_uint), ("fast_string_no_rfo", ctypes.c_uint)]


class Counts(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in FIELDS]


class SourceCounts(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in SOURCE_FIELDS]


def build_model(so) -> ctypes.CDLL:
    """model.c as a shared library, its functions typed."""
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(so), str(MODEL / "model.c")],
                   check=True)
    lib = ctypes.CDLL(str(so))
    lib.tm_new.restype = ctypes.c_void_p
    lib.tm_new.argtypes = [ctypes.POINTER(Params)]
    for fn in ("tm_load", "tm_store", "tm_nt_store", "tm_string_store"):
        getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint32]
    for fn in ("tm_reset", "tm_close", "tm_free"):
        getattr(lib, fn).argtypes = [ctypes.c_void_p]
    lib.tm_counts.restype = ctypes.POINTER(Counts)
    lib.tm_counts.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.tm_source_counts.restype = ctypes.POINTER(SourceCounts)
    lib.tm_source_counts.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int]
    lib.tm_source_span.restype = ctypes.c_uint32
    lib.tm_source_span.argtypes = [ctypes.c_void_p]
    lib.tm_decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tm_flow.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("model") / "libtraffic-model.so")


class Model:
    """One model.c model: its accesses take an optional source (default 0)."""
    def __init__(self, lib, llc=32 << 20, ways=16, line=64, wc=10, no_rfo=False):
        self.lib = lib
        self.m = lib.tm_new(ctypes.byref(Params(llc, ways, line, wc, int(no_rfo))))
        assert self.m

    def counts(self, target=PMEM) -> dict:
        c = self.lib.tm_counts(self.m, target).contents
        return {f: getattr(c, f) for f in FIELDS if getattr(c, f)}

    def source(self, src, target=PMEM) -> dict:
        c = self.lib.tm_source_counts(self.m, src, target).contents
        return {f: getattr(c, f) for f in SOURCE_FIELDS if getattr(c, f)}

    def load(self, target, addr, size, src=0):
        self.lib.tm_load(self.m, target, addr, size, src)

    def store(self, target, addr, size, src=0):
        self.lib.tm_store(self.m, target, addr, size, src)

    def nt_store(self, target, addr, size, src=0):
        self.lib.tm_nt_store(self.m, target, addr, size, src)

    def string_store(self, target, addr, size, src=0):
        self.lib.tm_string_store(self.m, target, addr, size, src)

    def __getattr__(self, name):
        fn = getattr(self.lib, "tm_" + name)
        return lambda *a: fn(self.m, *a)


def test_bad_geometry_is_refused(lib):
    for llc, ways, line, wc in [(32 << 20, 16, 48, 10), (32 << 20, 16, 128, 10), (32 << 20, 0, 64, 10),
                                (1000, 16, 64, 10), (32 << 20, 16, 64, 0)]:
        assert not lib.tm_new(ctypes.byref(Params(llc, ways, line, wc, 0))), (llc, ways, line, wc)
    assert not lib.tm_new(ctypes.byref(Params(32 << 20, 16, 64, 10, 2)))


def copy(model, src_target, src, dst, nbytes, nt):
    for off in range(0, nbytes, 64):
        for w in range(0, 64, 8):
            model.load(src_target, src + off + w, 8)
        for w in range(0, 64, 8):
            (model.nt_store if nt else model.store)(PMEM, dst + off + w, 8)


def test_a_cached_copy_fills_both_sides_and_writes_the_destination_back(lib):
    m = Model(lib)
    m.reset()
    copy(m, PMEM, 0, 32 << 20, 1 << 20, nt=False)
    lines, words = (1 << 20) // 64, (1 << 20) // 8
    assert m.counts() == {"loads": words, "stores": words, "fills_load": lines, "fills_store": lines}
    m.close()
    assert m.counts() == {"loads": words, "stores": words, "fills_load": lines, "fills_store": lines,
                          "writebacks": lines, "writebacks_at_close": lines}


def test_an_nt_copy_fills_only_the_source_and_writes_whole_lines(lib):
    m = Model(lib)
    m.reset()
    copy(m, DRAM, 0, 1 << 30, 1 << 20, nt=True)
    m.close()
    lines, words = (1 << 20) // 64, (1 << 20) // 8
    assert m.counts(DRAM) == {"loads": words, "fills_load": lines}
    assert m.counts(PMEM) == {"nt_stores": words, "nt_line_writes": lines}


def test_lru_evicts_the_least_recently_used_way_and_writes_a_dirty_victim_back(lib):
    m = Model(lib, llc=2 * 2 * 64, ways=2)          # 2 sets of 2 ways
    m.reset()
    line = lambda n: n * 64                          # noqa: E731 - lines 0, 2, 4 share set 0
    m.store(PMEM, line(0), 8)
    m.load(PMEM, line(2), 8)
    m.load(PMEM, line(0), 8)                         # 0 used last: 2 is the LRU way
    m.load(PMEM, line(4), 8)                         # evicts 2 (clean)
    assert m.counts() == {"loads": 3, "stores": 1, "fills_load": 2, "fills_store": 1, "evictions": 1}
    m.load(PMEM, line(2), 8)                         # evicts 0 (dirty): a write-back
    assert m.counts()["writebacks"] == 1 and m.counts()["fills_load"] == 3 and m.counts()["evictions"] == 2
    m.close()
    assert "writebacks_at_close" not in m.counts()


def test_an_nt_store_to_a_cached_dirty_line_writes_it_back_and_invalidates_it(lib):
    m = Model(lib)
    m.reset()
    m.store(PMEM, 0, 8)
    m.nt_store(PMEM, 8, 8)
    assert m.counts() == {"stores": 1, "nt_stores": 1, "fills_store": 1, "writebacks": 1, "nt_invalidates": 1}
    m.load(PMEM, 0, 8)      # a cached access to the line in a WC buffer: the buffer goes out first, then a fill
    m.close()
    assert m.counts() == {"loads": 1, "stores": 1, "nt_stores": 1, "fills_store": 1, "fills_load": 1,
                          "writebacks": 1, "nt_invalidates": 1, "nt_partial_writes": 1, "nt_partial_bytes": 8}


def test_write_combining_buffers_are_evicted_oldest_first_as_partial_writes(lib):
    m = Model(lib, wc=2)
    m.reset()
    for n in range(3):                  # three lines, two buffers: line 0 goes out at the third
        m.nt_store(PMEM, n * 64, 8)
    assert m.counts() == {"nt_stores": 3, "nt_partial_writes": 1, "nt_partial_bytes": 8}
    m.nt_store(PMEM, 64 + 8, 56)        # line 1 completed: a full-line write
    m.close()                           # line 2 flushed partial
    assert m.counts() == {"nt_stores": 4, "nt_partial_writes": 2, "nt_partial_bytes": 16, "nt_line_writes": 1}


def test_an_access_across_a_line_boundary_touches_both_lines(lib):
    m = Model(lib)
    m.reset()
    m.load(DRAM, 60, 8)
    m.nt_store(PMEM, 1 << 20 | 60, 8)
    m.close()
    assert m.counts(DRAM) == {"loads": 1, "fills_load": 2}
    assert m.counts(PMEM) == {"nt_stores": 1, "nt_partial_writes": 2, "nt_partial_bytes": 8}


def test_a_reset_empties_the_llc(lib):
    m = Model(lib)
    m.reset()
    m.load(PMEM, 0, 8)
    m.reset()
    m.load(PMEM, 0, 8)
    assert m.counts() == {"loads": 1, "fills_load": 1}


# -- what a broken model gets wrong ---------------------------------------------------
# Each test below names the mutation of model.c it catches ("fails if ...").
# A small LLC: 64 KiB, 16 ways, 64 sets; a line n lands in set n mod 64.
SMALL = {"llc": 64 << 10, "ways": 16}
SMALL_LINES, SMALL_SETS = (64 << 10) // 64, 64


def test_a_copy_larger_than_the_llc_misses_by_capacity(lib):
    """A cached copy of 256 KiB (four LLCs) and a buffer of twice the LLC
    read twice: capacity misses as arithmetic gives them. Fails if the
    model's capacity is not its geometry (an infinite cache: a mutation
    that multiplies the sets keeps every line, so nothing is evicted,
    every write-back waits for the close and the second read hits), and if
    a store miss reads nothing (RFO dropped)."""
    m = Model(lib, **SMALL)
    m.reset()
    nbytes = 256 << 10
    copy(m, PMEM, 0, 1 << 20, nbytes, nt=False)
    lines = nbytes // 64
    m.close()
    c = m.counts()
    # every line of source and destination filled once; the LLC holds 1024 of the 8192
    assert (c["fills_load"], c["fills_store"]) == (lines, lines)
    assert c["evictions"] == 2 * lines - SMALL_LINES
    # each set ends with the last 8 source and 8 destination lines it saw: 8 dirty a set at the close
    assert c["writebacks"] == lines and c["writebacks_at_close"] == SMALL_LINES // 2
    m.reset()
    twice = 2 * SMALL_LINES
    for _ in range(2):
        for n in range(twice):
            m.load(DRAM, n * 64, 8)
    # LRU over a cycle longer than the cache: the second pass misses every line again
    assert m.counts(DRAM) == {"loads": 2 * twice, "fills_load": 2 * twice, "evictions": 2 * twice - SMALL_LINES}


def test_a_set_conflict_misses_past_the_ways(lib):
    """Seventeen lines of one set (a stride of 64 lines) read round and
    round miss every time, with 16 ways; the same seventeen lines one line
    apart spread over the sets and miss once each. Fails if the set index is
    taken from the wrong bits of the line number (line / sets instead of
    line mod sets: the conflicting lines land in different sets)."""
    m = Model(lib, **SMALL)
    m.reset()
    for _ in range(4):
        for n in range(17):
            m.load(DRAM, n * SMALL_SETS * 64, 8)
    assert m.counts(DRAM)["fills_load"] == 4 * 17
    m.reset()
    for _ in range(4):
        for n in range(17):
            m.load(DRAM, n * 64, 8)
    assert m.counts(DRAM) == {"loads": 4 * 17, "fills_load": 17}


def test_lru_evicts_the_least_recently_used_not_the_first_filled(lib):
    """One set of 4 ways: A B C D filled, A used again, then E: LRU evicts B
    (the least recently used), so A still hits and B misses. Fails if the
    replacement is FIFO (a hit does not renew the line's age: A, the first
    filled, goes)."""
    m = Model(lib, llc=4 * 64, ways=4)        # 1 set
    m.reset()
    a, b, c, d, e = (n * 64 for n in range(5))
    for x in (a, b, c, d, a, e):
        m.load(DRAM, x, 8)
    assert m.counts(DRAM)["fills_load"] == 5
    m.load(DRAM, a, 8)
    assert m.counts(DRAM)["fills_load"] == 5, "A was used after B: B must have gone, not A"
    m.load(DRAM, b, 8)
    assert m.counts(DRAM)["fills_load"] == 6


def warm_then_copy(lib, nt: bool) -> dict:
    """A resident working set of half the LLC (32 KiB of DRAM, 8 lines a
    set), then a 32 KiB copy on the device, in one window."""
    m = Model(lib, **SMALL)
    m.reset()
    resident = (32 << 10) // 64
    for n in range(resident):
        m.load(DRAM, (4 << 20) + n * 64, 8)
    assert m.counts(DRAM) == {"loads": resident, "fills_load": resident}
    copy(m, PMEM, 0, 1 << 20, 32 << 10, nt=nt)
    m.close()
    return {"dram": m.counts(DRAM), "pmem": m.counts(PMEM)}


def test_a_warm_cache_an_ordinary_copy_evicts_the_resident_set_an_nt_copy_none(lib):
    """The pollution the NT series claims to avoid, measured: with 8 lines
    a set resident, an ordinary copy brings 8 source and 8 destination lines
    a set (24 for 16 ways: the 8 oldest, every resident line, go), an NT copy
    only its 8 source lines (16: nothing goes). Fails if NT stores allocate
    in the LLC as ordinary stores do (the mutation: tm_nt_store through the
    cached path)."""
    resident = (32 << 10) // 64
    cached, nt = warm_then_copy(lib, False), warm_then_copy(lib, True)
    assert cached["dram"]["evictions"] == resident and "evictions" not in cached["pmem"]
    assert "evictions" not in nt["dram"] and "evictions" not in nt["pmem"]
    assert nt["pmem"]["nt_line_writes"] == resident and "fills_store" not in nt["pmem"]


def test_a_repeated_window_counts_the_same(lib):
    """An A/A of the model: one access sequence (loads, stores, NT and
    string stores on both targets, more lines than the LLC holds) replayed
    in a second window counts the same, in total and per source. Fails if a
    window's open leaves the LLC warm (the mutation: tm_reset does not
    clear the tags), the lab's kernel windows' A/A in the model."""
    m = Model(lib, **SMALL)

    def window():
        m.reset()
        for n in range(3 * SMALL_LINES):
            m.load(DRAM, (16 << 20) + (n * 7919 % (4 * SMALL_LINES)) * 64, 8, 1)
            m.store(PMEM, n * 64, 8, 2)
            m.nt_store(PMEM, (1 << 20) + n * 8, 8, 3)
            m.string_store(PMEM, (2 << 20) + n * 4, 4, 4)
        m.close()
        return ([m.counts(t) for t in (DRAM, PMEM)],
                [m.source(s, t) for s in range(1, 5) for t in (DRAM, PMEM)])
    first, second = window(), window()
    assert first == second
    assert first[0][1]["fills_store"] > SMALL_LINES        # the window did more than the LLC holds


def test_a_partial_line_nt_write_writes_only_its_bytes(lib):
    """NT stores that fill part of a line: 8 bytes of one line, 24 of
    another, 56 of a third (7 stores): at the close each buffer goes out as
    a partial write of the bytes it holds, reading nothing; 64 bytes in 8
    stores make a full line. Fails if a partial buffer is counted as a full
    line (the mutation: wc_emit tests the mask for any byte, not all)."""
    m = Model(lib)
    m.reset()
    m.nt_store(PMEM, 16, 8)
    for w in range(3):
        m.nt_store(PMEM, 64 + 8 * w, 8)
    for w in range(7):
        m.nt_store(PMEM, 128 + 8 * w, 8)
    for w in range(8):
        m.nt_store(PMEM, 192 + 8 * w, 8)
    m.close()
    assert m.counts() == {"nt_stores": 19, "nt_partial_writes": 3, "nt_partial_bytes": 8 + 24 + 56,
                          "nt_line_writes": 1}


# -- fast strings: both rules -------------------------------------------------------
def string_copy(m, dst, nbytes, size=1):
    """A `rep movs` of size-byte elements from DRAM to the device, as TCG
    runs it: a load and a string store an element."""
    for off in range(0, nbytes, size):
        m.load(DRAM, (8 << 20) + off, size)
        m.string_store(PMEM, dst + off, size)


@pytest.mark.parametrize("size", [1, 8])
def test_fast_string_stores_read_for_ownership_under_one_rule_and_not_for_whole_lines_under_the_other(lib, size):
    """A rep movsb (and movsq) of 4 aligned lines: under the RFO rule each
    destination line is read before it is written, as an ordinary store's;
    under the no-RFO rule none is (each written whole), and both write each
    back. Misaligned by 8 bytes, the copy touches 5 lines, 3 whole: the
    no-RFO rule reads the 2 partial ones. Fails if the rule also spares a
    line not written whole (the mutation: a pending line's deferred read is
    not counted), or if string stores are not told from ordinary ones."""
    for rule, aligned_reads, misaligned_reads in ((False, 4, 5), (True, 0, 2)):
        for dst, reads, full in ((0, aligned_reads, 4), (8, misaligned_reads, 3)):
            m = Model(lib, no_rfo=rule)
            m.reset()
            string_copy(m, dst, 256, size)
            m.close()
            c = m.counts()
            touched = 4 if dst == 0 else 5
            assert c.get("fills_store", 0) == reads and c["writebacks"] == touched, (rule, dst, c)
            assert c["string_stores"] == 256 // size and "stores" not in c
            assert c.get("string_full_lines", 0) == (full if rule else 0), (rule, dst, c)


def test_a_line_a_string_store_left_partial_pays_its_read_when_used_evicted_or_closed(lib):
    """Under the no-RFO rule a line a string store allocated and did not
    write whole is read for ownership at its next other access (a load
    here), at its eviction, or at the close: never twice, and charged to
    the string store. Fails if the deferred read is dropped at any of the
    three (the mutation: settle_pending counts nothing)."""
    m = Model(lib, llc=4 * 64, ways=4, no_rfo=True)      # 1 set of 4 ways
    m.reset()
    m.string_store(PMEM, 0, 8, 7)
    m.load(PMEM, 0, 8, 8)                   # the line is read now: one RFO, no load fill
    assert m.counts() == {"loads": 1, "string_stores": 1, "fills_store": 1}
    m.string_store(PMEM, 64, 8, 7)          # partial, then pushed out by 4 loads
    for n in range(2, 6):
        m.load(DRAM, (1 << 20) + n * 64, 8, 8)
    assert m.counts()["fills_store"] == 2 and m.counts()["writebacks"] == 2     # lines 0 and 1, both dirty
    m.string_store(PMEM, 128, 8, 7)         # partial, still there at the close
    m.close()
    assert m.counts()["fills_store"] == 3 and m.counts()["writebacks"] == 3
    assert m.source(7) == {"fills_store": 3, "writebacks": 3}
    assert m.source(8) == {"evictions": 2} and m.source(8, DRAM) == {"fills_load": 4}


# -- who is charged --------------------------------------------------------------------
def test_each_count_is_charged_to_the_instruction_that_caused_it(lib):
    """A fill to the access that missed, a write-back to the store that
    made the line dirty, a WC buffer's write to the NT store that opened
    it, an eviction to the fill that caused it; and the sources' counts add
    up to the window's. Fails if a write-back is charged to whoever forces
    it out rather than the store that dirtied the line (the mutation: the
    dirtying store is not kept)."""
    m = Model(lib, llc=4 * 64, ways=4)               # 1 set of 4 ways
    m.reset()
    m.load(PMEM, 0, 8, 1)            # line 0 filled by 1
    m.store(PMEM, 8, 8, 2)           # ... dirtied by 2 (a hit)
    m.store(PMEM, 64, 8, 3)          # line 1: RFO and dirt by 3
    m.store(PMEM, 72, 8, 4)          # ... a hit by 4: 3 made it dirty
    for n in range(2, 6):
        m.load(DRAM, (1 << 20) + n * 64, 8, 5)   # 4 DRAM lines: lines 0 and 1 evicted, written back
    for w in range(8):
        m.nt_store(PMEM, 1024 + 8 * w, 8, 6 + (w > 0))   # opened by 6, completed by 7
    m.close()
    assert m.source(1) == {"fills_load": 1}
    assert m.source(2) == {"writebacks": 1}
    assert m.source(3) == {"fills_store": 1, "writebacks": 1}
    assert m.source(4) == {}
    assert m.source(5, DRAM) == {"fills_load": 4} and m.source(5) == {"evictions": 2}
    assert m.source(6) == {"nt_line_writes": 1} and m.source(7) == {}
    for target in (DRAM, PMEM):
        total = {f: sum(m.source(s, target).get(f, 0) for s in range(m.source_span())) for f in SOURCE_FIELDS}
        assert {f: v for f, v in total.items() if v} == {f: v for f, v in m.counts(target).items()
                                                         if f in SOURCE_FIELDS}


# -- the decoder, on what the assembler makes -----------------------------------------
INSNS = [
    ("movnti %rax, (%rdi)", NT), ("movnti %eax, 8(%rdi)", NT), ("movnti %r9, 0x10(%r12,%rcx,8)", NT),
    ("movntdq %xmm0, (%rdi)", NT), ("movntdq %xmm9, 0x40(%r8)", NT), ("movntps %xmm1, (%rsi)", NT),
    ("movntpd %xmm2, (%rsi)", NT), ("movntq %mm0, (%rdi)", NT), ("maskmovdqu %xmm1, %xmm0", NT),
    ("vmovntdq %xmm0, (%rdi)", NT), ("vmovntdq %ymm0, (%rdi)", NT), ("vmovntdq %ymm12, (%r13)", NT),
    ("vmovntps %ymm1, 32(%rdi)", NT), ("vmovntpd %xmm3, (%rax)", NT), ("fs movnti %rax, (%rdi)", NT),
    ("addr32 movnti %rax, (%edi)", NT),
    ("mov %rax, (%rdi)", OTHER), ("movdqa %xmm0, (%rdi)", OTHER), ("movaps %xmm0, (%rdi)", OTHER),
    ("vmovdqa %ymm0, (%rdi)", OTHER), ("movntdqa (%rdi), %xmm0", OTHER), ("vmovntdqa (%rdi), %ymm0", OTHER),
    ("prefetchnta (%rdi)", OTHER), ("clwb (%rdi)", OTHER), ("sfence", OTHER),
    ("rep movsb", FAST_STRING), ("rep movsq", FAST_STRING), ("rep movsl", FAST_STRING), ("rep stosb", FAST_STRING),
    ("rep stosq", FAST_STRING), ("repnz movsb", FAST_STRING), ("fs rep movsb", FAST_STRING),
    ("movsb", OTHER), ("stosq", OTHER), ("rep lodsb", OTHER), ("repz cmpsb", OTHER), ("rep scasb", OTHER),
    ("rep nop", OTHER),
    ("nopl 0x12345678(%rax)", OTHER), ("nopl 0x4e540001(%rax,%rax,1)", OTHER),
    ("nopl 0x4e540001(%rax)", OPEN), ("nopl 0x4e540002(%rax)", CLOSE),
]


# Calls and returns (tm_flow): the plugin follows return addresses to name a function's caller.
NONE, CALL, RET, IRET = 0, 1, 2, 3
FLOWS = [
    ("call .", CALL), ("call *%rax", CALL), ("call *0x10(%rdi)", CALL), ("call *%r11", CALL),
    ("notrack call *%rax", CALL), ("bnd call .", CALL), ("ret", RET), ("ret $8", RET), ("repz ret", RET),
    ("iretq", IRET), ("iret", IRET), ("jmp *%rax", NONE), ("jmp .", NONE), ("lcall *(%rax)", NONE), ("push %rax", NONE),
    ("pop %rax", NONE), ("lret", NONE), ("mov %rax, (%rsp)", NONE), ("inc %eax", NONE),
]


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    d = tmp_path_factory.mktemp("insns")
    texts = [text for text, _ in INSNS + FLOWS]
    src = "".join(f'.section .t{i},"ax"\n{text}\n' for i, text in enumerate(texts))
    (d / "i.s").write_text(src)
    subprocess.run(["as", "--64", "-o", str(d / "i.o"), str(d / "i.s")], check=True)
    out = {}
    for i, text in enumerate(texts):
        subprocess.run(["objcopy", "-O", "binary", f"--only-section=.t{i}", str(d / "i.o"), str(d / f"{i}.bin")],
                       check=True)
        out[text] = (d / f"{i}.bin").read_bytes()
    return out


@pytest.mark.parametrize("text,kind", INSNS)
def test_the_decoder_on_assembled_bytes(lib, assembled, text, kind):
    code = assembled[text]
    assert lib.tm_decode(code, len(code)) == kind, (text, code.hex())


@pytest.mark.parametrize("text,flow", FLOWS)
def test_the_call_and_return_decoder_on_assembled_bytes(lib, assembled, text, flow):
    code = assembled[text]
    assert lib.tm_flow(code, len(code)) == flow, (text, code.hex())


def test_the_window_markers_are_the_bytes_window_h_emits(lib):
    text = (MODEL / "window.h").read_text()
    for name, kind in (("OPEN", OPEN), ("CLOSE", CLOSE)):
        line = next(ln for ln in text.splitlines() if f"TRAFFIC_WINDOW_{name}()" in ln and ".byte" in ln)
        code = bytes(int(b, 16) for b in line.split('".byte ')[1].split('"')[0].split(","))
        assert lib.tm_decode(code, len(code)) == kind, code.hex()


# -- the driver's reading of QEMU and of the plugin -------------------------------------
# `info ramblock` of QEMU 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18) for the lab's
# command line, as its monitor printed it
RAMBLOCK = """\
              Block Name    PSize              Offset               Used              Total
                    ram0    4 KiB  0x0000000000000000 0x0000000080000000 0x0000000080000000
                     nv0    4 KiB  0x0000000080000000 0x0000000080000000 0x0000000080000000
   0000:00:02.0/vga.vram    4 KiB  0x0000000100080000 0x0000000001000000 0x0000000001000000
    /rom@etc/acpi/tables    4 KiB  0x0000000101100000 0x0000000000020000 0x0000000000200000
                 pc.bios    4 KiB  0x0000000100000000 0x0000000000040000 0x0000000000040000
(qemu) quit
"""


def test_the_ramblock_list_and_the_pmem_range():
    blocks = trun.parse_ramblocks(RAMBLOCK)
    assert [b.name for b in blocks] == ["ram0", "nv0", "0000:00:02.0/vga.vram", "/rom@etc/acpi/tables", "pc.bios"]
    nv = trun.pmem_range(blocks)
    assert (nv.offset, nv.total) == (0x80000000, 0x80000000)
    with pytest.raises(trun.TrafficError, match="no single nv0"):
        trun.pmem_range(blocks[:1])


def test_the_ramblock_query_is_the_boot_stopped_with_its_monitor_on_stdio():
    boot = ["qemu-system-x86_64", "-m", "2G", "-serial", "file:/r/console.log", "-monitor", "none", "-no-reboot",
            "-plugin", "/p.so,out=/x"]
    assert trun.ramblock_command(boot) == ["qemu-system-x86_64", "-m", "2G", "-no-reboot", "-S",
                                           "-monitor", "stdio", "-serial", "null"]


def _output(windows):
    head = {"model": {"what": "memory traffic, not time", "llc_bytes": 33554432, "ways": 16, "line": 64},
            "pmem_ramblock": {"start": 2147483648, "size": 2147483648}}
    zero = {f: 0 for f in FIELDS}
    lines = [head] + [{"window": i, "closed_by": "close", "io_accesses": 0,
                       "counts": {"dram": zero, "pmem": {**zero, **w}}} for i, w in enumerate(windows)]
    return "\n".join(json.dumps(x) for x in lines + [{"end": True, "windows": len(windows)}]) + "\n"


def test_the_plugins_output_read_and_its_device_bytes():
    out = trun.parse_output(_output([{"fills_load": 3, "fills_store": 2, "writebacks": 2},
                                     {"nt_line_writes": 4, "nt_partial_writes": 1, "nt_partial_bytes": 8}]))
    trun.label(out, [{"label": "a"}, {"label": "b"}])
    assert [w.label for w in out.windows] == ["a", "b"]
    assert out.windows[0].device_bytes() == {"read": 5 * 64, "written": 2 * 64}
    assert out.windows[1].device_bytes() == {"read": 0, "written": 4 * 64 + 8}
    with pytest.raises(trun.TrafficError, match="the guest ran 1 windows, the plugin saw 2"):
        trun.label(out, [{"label": "a"}])
    with pytest.raises(trun.TrafficError, match="model line"):
        trun.parse_output('{"window": 0}\n')


def test_first_principles_counts_of_the_copies():
    mib16 = 16 << 20
    lines, words = mib16 // 64, mib16 // 8
    nothing = {"string_stores": 0, "string_full_lines": 0}
    assert trun.expected_pmem("cached_pmem_pmem", mib16) == {
        "loads": words, "fills_load": lines, "stores": words, "nt_stores": 0, "fills_store": lines,
        "writebacks": lines, "nt_line_writes": 0, "nt_partial_writes": 0, "nt_partial_bytes": 0, "nt_invalidates": 0,
        **nothing}
    nt = trun.expected_pmem("nt_dram_pmem", mib16)
    assert (nt["loads"], nt["fills_load"], nt["fills_store"], nt["nt_line_writes"]) == (0, 0, 0, lines)


def test_first_principles_counts_of_the_fast_strings_under_both_rules():
    """A rep movsb of 1 MiB, aligned: every destination line read for
    ownership under the RFO rule, none under the no-RFO rule (each written
    whole); 8 bytes into a line, 1 MiB less 16 bytes: 16384 lines touched,
    the first and last not whole, so the no-RFO rule reads those two."""
    mib, lines = 1 << 20, (1 << 20) // 64
    rfo = trun.expected_pmem("string_movsb_dram_pmem", mib)
    assert (rfo["string_stores"], rfo["fills_store"], rfo["writebacks"], rfo["string_full_lines"]) == (
        mib, lines, lines, 0)
    no = trun.expected_pmem("string_movsb_dram_pmem", mib, rule="counts_fast_string_no_rfo")
    assert (no["fills_store"], no["writebacks"], no["string_full_lines"]) == (0, lines, lines)
    assert trun.expected_pmem("string_stosq_pmem", mib)["string_stores"] == mib // 8
    off = trun.expected_pmem("string_movsb_dram_pmem_misaligned", mib - 16, rule="counts_fast_string_no_rfo",
                             dst_offset=8)
    assert (off["fills_store"], off["writebacks"], off["string_full_lines"]) == (2, lines, lines - 2)
    partial = trun.expected_pmem("nt_partial_pmem", 256 * 8)
    assert (partial["nt_partial_writes"], partial["nt_partial_bytes"], partial["nt_line_writes"]) == (256, 2048, 0)
    warm = trun.expected_pmem("warm_cached_pmem_pmem", 16 << 20)
    resident = (16 << 20) // 64
    assert warm["fills_load"] == 2 * resident and warm["fills_store"] == resident


def _window(label, pmem, dram=None, **plan):
    w = trun.Window(0, {"pmem": pmem, "dram": dram or {}}, None, 0, "close", label, {"label": label, **plan})
    return w


def test_the_windows_evictions_are_bounded_by_their_dram_lines():
    """An ordinary copy after the resident set evicts every resident line,
    give or take one device line for each DRAM line the window brought in
    (a full set); an NT copy, or a copy without the resident set, evicts
    none but those."""
    resident = (16 << 20) // 64
    ok = _window("warm_cached_pmem_pmem", {"evictions": resident + 3}, {"fills_load": 5})
    assert trun.eviction_mismatches(ok) == []
    few = _window("warm_cached_pmem_pmem", {"evictions": resident - 1}, {"fills_load": 5})
    assert trun.eviction_mismatches(few) == [
        f"warm_cached_pmem_pmem pmem evictions: {resident - 1}, expected {resident}..{resident + 5} "
        "(the window's DRAM fills: 5)"]
    assert trun.eviction_mismatches(_window("warm_nt_pmem_pmem", {"evictions": 2}, {"fills_store": 2})) == []
    assert trun.eviction_mismatches(_window("warm_nt_pmem_pmem", {"evictions": resident}, {"fills_store": 2}))
    assert trun.eviction_mismatches(_window("cached_pmem_pmem", {"evictions": 250}, {"fills_load": 300})) == []
    assert trun.eviction_mismatches(_window("cached_pmem_pmem", {"evictions": 301}, {"fills_load": 300}))


# -- a recorded run: the stock lab guest under the plugin (lab.traffic.run), its
# plugin.jsonl, the guest's guest.json and device.json as the boot left them
RECORDED = REPO / "tests" / "fixtures" / "recorded" / "traffic"


def _recorded():
    out = trun.parse_output((RECORDED / "plugin.jsonl").read_text())
    guest = json.loads((RECORDED / "guest.json").read_text())
    trun.label(out, guest["windows"])
    return out, json.loads((RECORDED / "device.json").read_text())


def test_the_recorded_run_meets_first_principles_and_a_changed_count_is_named():
    out, _ = _recorded()
    assert out.model["what"] == "memory traffic, not time" and out.end["unclosed"] == 0
    assert trun.first_principles_mismatches(out) == []
    cached = next(w for w in out.windows if w.label == "cached_pmem_pmem")
    cached.counts["pmem"]["fills_store"] -= 1
    assert trun.first_principles_mismatches(out) == [
        "cached_pmem_pmem pmem fills_store: counted 262143, expected 262144"]


def test_the_recorded_probe_lands_at_the_guests_physical_offset_in_the_nvdimms_ramblock():
    out, device = _recorded()
    probe = next(w for w in out.windows if w.label == "probe")
    assert trun.probe_offset(device, probe.plan) == 0x2200000 + (48 << 20) + 0x1238
    assert probe.pmem_offsets["first"] == trun.probe_offset(device, probe.plan)
    # the RAMBlock offset is not the guest physical address (QEMU 7.2)
    assert out.pmem_ramblock["start"] != int(device["region_start"], 16)


def test_the_recorded_a_a_counts_the_same_device_traffic_and_a_difference_is_named():
    a, _ = _recorded()
    b = trun.parse_output((RECORDED / "aa-b" / "plugin.jsonl").read_text())
    assert trun.aa_differences(a, b) == []
    # the kernel's own DRAM work in a window differs between the boots
    assert any(wa.counts["dram"] != wb.counts["dram"] for wa, wb in zip(a.windows, b.windows))
    b.windows[2].counts["pmem"]["nt_line_writes"] += 1
    assert trun.aa_differences(a, b) == ["nt_pmem_pmem nt_line_writes: 262144, 262145"]


def test_the_traffic_ab_table_from_a_recorded_memmap_run():
    """The stock guest's 6.1 kernel, memmap init by cached stores with the
    memmap on the device (-M dev): every struct page's line read from the
    device (the RFO) and written back, about 64 bytes each per page. (A
    boot of a plugin that named no function: the report has no function
    table then.)"""
    from lab.traffic import report
    from nttrace.ab import formats
    s = json.loads((RECORDED / "memmap-stock" / "traffic-summary.json").read_text())
    pp = report.per_page(s)
    assert set(pp) == {"rebind_fsdax", "rebind_devdax"}
    fs = pp["rebind_fsdax"]
    assert fs["pages"] == 515584 and 64 <= fs["device_read_per_page"] < 66 and fs["nt_lines_per_page"] == 0, fs
    t = report.figures({"stock": s}, ["rebind_fsdax", "rebind_devdax"])
    md = formats.section_text("markdown", report.ab_section(t, ["stock"]))
    assert "models memory traffic, not time" in md and "no statistics are run" in md
    assert "| memmap init, fsdax -M dev | device bytes read / initialised page | 65.1 |" in md
    assert "Who moved the lines" not in md


def test_a_recorded_demotion_run_reads_each_demoted_page_from_the_device_once():
    """The stock guest's 6.1 kernel demotes with cached stores: every line
    of every demoted page is read from the device (the RFO) before it is
    written, the traffic the NT demotion RFC removes; the in-boot repeat
    counts the same."""
    from lab.traffic import report
    s = json.loads((RECORDED / "demotion-stock" / "traffic-summary.json").read_text())
    d = report.per_page(s)["demotion"]
    assert d["pages"] == 16400 and 4090 < d["device_read_per_page"] <= 4096 and d["nt_lines_per_page"] == 0, d
    first, second = [w for w in s["windows"] if w["label"] == "demotion"]
    drop = lambda c: {k: v for k, v in c.items() if k != "writebacks_at_close"}   # noqa: E731
    assert drop(first["counts"]["pmem"]) == drop(second["counts"]["pmem"])


@pytest.mark.parametrize("kernel", ["nt-v3", "nt-v2"])
def test_the_recorded_base_against_nt_table_is_what_ab_makes_of_its_two_boots(kernel, tmp_path):
    """lab.traffic.ab base nt-v3 and base nt-v2, recorded: the figures and
    the markdown are what the module makes of the two boots' summaries, and
    they show the NT series' direction (device reads per demoted page from a
    page to about none, writes unchanged; memmap init reads no struct page's
    line but what the model finds left)."""
    from lab.traffic import ab as tab
    from lab.traffic import report
    d = RECORDED / f"ab-base-{kernel}"
    base, nt = (json.loads((d / f"{v}.json").read_text()) for v in ("base", kernel))
    t = report.figures({"base": base, kernel: nt}, list(report.STEP_LABELS))
    assert t == json.loads((d / "traffic-ab.json").read_text())["traffic"]
    written = tab.write_report(tmp_path, "base", kernel, t)
    assert written["markdown"].read_text() == (d / "traffic-ab.md").read_text()
    b, n = report.per_page(base), report.per_page(nt)
    assert b["demotion"]["device_read_per_page"] > 4000 and n["demotion"]["device_read_per_page"] < 2
    assert abs(b["demotion"]["device_written_per_page"] - 4096) < 2 and n["demotion"]["nt_lines_per_page"] > 63.9
    assert b["rebind_fsdax"]["device_read_per_page"] > 64 and n["rebind_fsdax"]["device_read_per_page"] < 2


def test_an_ab_run_is_recorded_with_its_command_machine_date_and_commit():
    """lab.traffic.ab names its run as lab.ab does (run.json): the command,
    the machine, when, the commit at its start (a tree changed since is
    said), each boot's host conditions; BENCHMARKS.md's section renders it."""
    import importlib
    from lab import ab as lab_ab
    from lab.traffic import ab as tab
    head = lab_ab.checkout_commit()
    host = {"state": "contended", "why": "beside cc1", "own_cpu_s": 28.3, "window_s": 124.4, "beside": [{"name": "cc1"}]}
    r = tab.run_record(["base", "nt-v3", "--out", "out"], "base", "nt-v3", head, "2026-12-06 16:01:00", 250.04,
                       {"base": host, "nt-v3": host})
    assert r["command"] == "python3 -m lab.traffic.ab base nt-v3 --out out" and r["commit"] == head
    assert r["started"] == "2026-12-06 16:01:00" and r["wall_s"] == 250.0 and r["finished"][:2] == "20"
    assert r["machine"] and r["cpus"] >= 1 and "icount" in r["cpu"]
    assert r["host"]["base"] == {k: host[k] for k in ("state", "why", "own_cpu_s", "window_s")}
    moved = tab.run_record([], "base", "nt-v3", "0000000", "2026-12-06 16:01:00", 1.0, {})
    assert moved["commit"] == f"0000000 (the tree changed during the run: {head} at its end)"
    sys.path.insert(0, str(REPO / "benchmarks"))
    section = importlib.import_module("sections.traffic")
    raw = {}
    for kernel in section.PAIRS:
        d = RECORDED / f"ab-base-{kernel}"  # the same boots as section.PAIRS' raw files
        raw.update({f"{kernel} run": r, f"{kernel} table": json.loads((d / "traffic-ab.json").read_text()),
                    f"{kernel} base": json.loads((d / "base.json").read_text()),
                    f"{kernel} kernel": json.loads((d / f"{kernel}.json").read_text())})
    text = section.traffic_ab(raw)
    assert f"commit {head}, " in text and "(added when saved)" not in text
    assert "; `python3 -m lab.traffic.ab base nt-v3 --out out`" in text


def test_a_cost_run_is_recorded_with_its_command_machine_date_and_commit():
    from lab import ab as lab_ab
    from lab.traffic import cost
    head = lab_ab.checkout_commit()
    r = cost.run_record(["out"], head, "2026-12-06 15:33:00")
    assert r == {**r, "command": "python3 -m lab.traffic.cost out", "date": "2026-12-06", "commit": head}
    assert r["machine"] and r["cpus"] >= 1 and r["finished"][:2] == "20"


def test_the_cost_sets_the_windows_with_the_model_against_without_and_the_boot_against_no_plugin():
    """lab.traffic.cost's figures: the step windows' TCG-thread CPU time of
    the plugin with its model against the plugin with the model off, and
    QEMU's CPU time over the boot with the plugin against without it, each
    stated as the A/B states a comparison (n, medians, ranges, p, verdict);
    the guest's own windows (its copies) are not the step windows."""
    from lab.traffic import cost

    def boot(mode, qemu, step_s):
        windows = None if mode == "none" else [
            {"label": "cached_pmem_pmem", "cpu_s": {"tcg_thread": 9.0, "qemu": 9.0}},
            {"label": "rebind_fsdax", "cpu_s": {"tcg_thread": step_s, "qemu": step_s}},
            {"label": "demotion", "cpu_s": {"tcg_thread": step_s, "qemu": step_s}}]
        return {"mode": mode, "qemu_cpu_s": qemu, **({"windows": windows} if windows else {})}
    boots = [b for r in range(3) for b in (boot("none", 20 + r, 0), boot("markers", 21 + r, 1 + r / 10),
                                           boot("model", 30 + r, 4 + r / 10))]
    f = cost.figures(boots)
    assert f["step_windows_tcg_cpu_s"] == {"markers": [2.0, 2.2, 2.4], "model": [8.0, 8.2, 8.4]}
    assert f["qemu_cpu_s"]["none"] == [20, 21, 22] and f["qemu_cpu_s"]["model"] == [30, 31, 32]
    assert f["in_windows"].startswith("model against markers: +") and "markers n 3, median 2.2 s" in f["in_windows"]
    assert "n 3" in f["whole_boot"] and "p 0.1" in f["whole_boot"]


def test_base_boots_in_two_runs_count_the_same_memmap_device_lines():
    """Base was booted once in each recorded run (against nt-v3, against
    nt-v2): the memmap init's device counts are the same, window for window
    and function by function; demotion's differ by the few pages reclaim
    demoted or not."""
    from lab.traffic import report

    def device(s, label):
        return [(w["pages"], w["pmem_device_bytes"]) for w in s["windows"] if w["label"] == label]
    a, b = (json.loads((RECORDED / f"ab-base-{k}" / "base.json").read_text()) for k in ("nt-v3", "nt-v2"))
    for label in ("rebind_fsdax", "rebind_devdax"):
        assert device(a, label) == device(b, label), label
        fa, fb = (report.first_windows(s)[label]["functions"] for s in (a, b))
        assert trun.function_differences(fa, fb) == [], label
    (p1, b1), (p2, b2) = device(a, "demotion")[0], device(b, "demotion")[0]
    assert abs(p1 - p2) <= 4 and abs(b1["written"] - b2["written"]) <= 8 * 4096
