# SPDX-License-Identifier: Apache-2.0
"""The native reference library (nttrace._native), loaded with ctypes.

The C sources live in native/; every function here is a thin typed wrapper.
Buffers are anonymous mmaps, pre-faulted, so timing never includes page
faults.
"""
from __future__ import annotations

import ctypes
import importlib.util
import mmap
from dataclasses import dataclass
from functools import lru_cache

from nttrace.errors import CapabilityError

CPU_FEATURES = {"x86": 1 << 0, "sse2": 1 << 1, "avx2": 1 << 2, "avx512f": 1 << 3, "erms": 1 << 4, "fsrm": 1 << 5, "clwb": 1 << 6,
                "clflushopt": 1 << 7}
PRIMITIVES = ["memcpy", "rep_movsb", "rep_movsq", "movq_unrolled", "nt_generic", "nt_mixed"]
PAGE_METHODS = ["memcpy", "rep_movsb", "movnti_prefetchnta", "avx2_stream", "avx512_stream"]
NT_PAGE_METHODS = {"movnti_prefetchnta", "avx2_stream", "avx512_stream"}
DRAIN = {"none": 0, "per_page": 1, "per_folio": 2}
MEMMAP_METHODS = ["slow", "template_cached", "template_nt", "template_refresh_copy", "template_movnti"]
PGMAP_TYPES = {"PRIVATE": 1, "COHERENT": 2, "FS_DAX": 3, "GENERIC": 4, "PCI_P2PDMA": 5}
FIXED_SIZES = (4, 8, 16, 32, 48, 64, 80, 96)
MODEL_SYMBOL = "nttrace_memmap_init_zone_device_model"


class MemmapArgs(ctypes.Structure):
    _fields_ = [
        ("descs", ctypes.c_void_p), ("nr", ctypes.c_uint64), ("desc_size", ctypes.c_uint32),
        ("pgmap_type", ctypes.c_uint32), ("order", ctypes.c_uint32), ("method", ctypes.c_uint32),
        ("start_pfn", ctypes.c_uint64), ("nid", ctypes.c_uint32), ("zone_idx", ctypes.c_uint32),
        ("pgmap", ctypes.c_uint64), ("elapsed_ns", ctypes.c_uint64),
    ]


class SelftestResult(ctypes.Structure):
    _fields_ = [("cases", ctypes.c_uint64), ("failures", ctypes.c_uint64), ("first_size", ctypes.c_int64),
                ("first_src_off", ctypes.c_int64), ("first_dst_off", ctypes.c_int64)]


def library_path() -> str:
    spec = importlib.util.find_spec("nttrace._native")
    if spec is None or spec.origin is None:
        raise CapabilityError("the native reference library nttrace._native is not built (reinstall nttrace)")
    return spec.origin


@lru_cache(maxsize=1)
def lib() -> ctypes.CDLL:
    so = ctypes.CDLL(library_path())
    vp, sz, u64, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int
    sigs = {
        "nt_cpu_features": ([], ctypes.c_uint), "nt_have_nt_backend": ([], i32),
        "nt_hypervisor_signature": ([ctypes.c_char_p], i32),
        "nt_drain": ([], None),
        "nt_copy_generic": ([vp, vp, sz], None), "nt_copy_mixed": ([vp, vp, sz], None),
        "nt_copy_fixed_a": ([vp, vp, sz], i32), "nt_copy_fixed_b": ([vp, vp, sz], i32),
        "nt_page_method_supported": ([i32], i32), "nt_copy_page": ([i32, vp, vp], i32),
        "nt_demote_copy": ([vp, vp, sz, i32, sz, i32], i32), "nt_mbind_node": ([vp, sz, i32], i32),
        "nt_stream_fill": ([vp, sz, u64], None), "nt_movnti_fill": ([vp, sz, u64], None),
        "nt_flush_range": ([vp, sz], i32),
        MODEL_SYMBOL: ([ctypes.POINTER(MemmapArgs)], i32),
        "nt_memmap_refcount_stores": ([ctypes.POINTER(MemmapArgs)], ctypes.c_uint32),
        "nt_selftest_copy": ([i32, sz, sz, sz, sz, ctypes.POINTER(SelftestResult)], i32),
        "nt_selftest_fixed": ([i32, ctypes.POINTER(SelftestResult)], i32),
        "nt_bench_copy_ns": ([i32, vp, vp, sz, sz, u64], u64),
        "nt_bench_fixed_ns": ([i32, vp, vp, sz, u64], u64),
    }
    for name, (argtypes, restype) in sigs.items():
        fn = getattr(so, name)
        fn.argtypes, fn.restype = argtypes, restype
    return so


def cpu_features() -> dict[str, bool]:
    bits = lib().nt_cpu_features()
    return {name: bool(bits & bit) for name, bit in CPU_FEATURES.items()}


def hypervisor_signature() -> str | None:
    """CPUID leaf 0x40000000's vendor signature ("KVMKVMKVM", "TCGTCGTCGTCG",
    "Microsoft Hv", ...), or None when the CPU reports no hypervisor."""
    buf = ctypes.create_string_buffer(13)
    if lib().nt_hypervisor_signature(buf) != 1:
        return None
    return buf.raw[:12].rstrip(b"\0").decode("ascii", "replace")


def have_nt_backend() -> bool:
    return bool(lib().nt_have_nt_backend())


class Buffer:
    """A page-aligned anonymous mapping, pre-faulted."""

    def __init__(self, size: int, fill: int | None = 0x5A, node: int | None = None):
        self.size = size
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor = ctypes.c_char.from_buffer(self._map)
        self.addr = ctypes.addressof(self._anchor)
        if node is not None:
            rc = lib().nt_mbind_node(self.addr, size, node)
            if rc:
                raise CapabilityError(f"cannot bind buffer to NUMA node {node}: errno {-rc}")
        if fill is not None:
            ctypes.memset(self.addr, fill, size)  # pre-fault every page

    def bytes(self, offset: int = 0, length: int | None = None) -> bytes:
        return ctypes.string_at(self.addr + offset, self.size - offset if length is None else length)

    def close(self) -> None:
        del self._anchor
        self._map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


FLUSH_INSNS = (None, "clflushopt", "clflush")


def flush(buf: "Buffer", offset: int = 0, length: int | None = None) -> str | None:
    """Write back and evict buf[offset:offset+length] from every cache level;
    returns the instruction used ("clflushopt", "clflush"), None off x86."""
    n = buf.size - offset if length is None else length
    return FLUSH_INSNS[lib().nt_flush_range(buf.addr + offset, n)]


# A demotion's copy, as the kernel makes it without and with the NT series:
# name -> (page method, drain). Pages are copied in 512-page folios.
DEMOTION_COPIES = {"cached": ("memcpy", "none"), "nt": ("movnti_prefetchnta", "per_folio")}
FOLIO_PAGES = 512


def demotion_copy(dst: Buffer, src: Buffer, nbytes: int, how: str, method: str | None = None,
                  drain: str | None = None) -> None:
    """Copy nbytes of src to dst page by page in folios, as a demotion does:
    `how` is a DEMOTION_COPIES name, or method and drain are given."""
    m, d = DEMOTION_COPIES.get(how, (method, drain))
    rc = lib().nt_demote_copy(dst.addr, src.addr, nbytes // 4096, PAGE_METHODS.index(method or m), FOLIO_PAGES,
                              DRAIN[drain or d])
    if rc:
        raise ValueError(f"native demotion copy refused {how} ({method or m}, drain {drain or d})")


@dataclass
class MemmapRun:
    method: str
    nr: int
    desc_size: int
    elapsed_ns: int
    refcount_stores: int


def memmap_init(buf: Buffer, nr: int, desc_size: int = 64, pgmap_type: str = "FS_DAX", order: int = 0,
                method: str = "template_nt", start_pfn: int = 0x1000000, nid: int = 0, offset: int = 0) -> MemmapRun:
    """Initialise `nr` descriptors at buf+offset with the model; offset 0 is
    page aligned (the widest streaming stores), 8 forces plain MOVNTI."""
    if offset + nr * desc_size > buf.size:
        raise ValueError("buffer too small for the descriptors")
    args = MemmapArgs(buf.addr + offset, nr, desc_size, PGMAP_TYPES[pgmap_type], order, MEMMAP_METHODS.index(method),
                      start_pfn, nid, 4, 0xFFFF8881DEAD0000)
    rc = lib()[MODEL_SYMBOL](ctypes.byref(args))
    if rc:
        raise ValueError(f"memmap model rejected its arguments ({method}, size {desc_size}, order {order})")
    return MemmapRun(method, nr, desc_size, args.elapsed_ns, lib().nt_memmap_refcount_stores(ctypes.byref(args)))


def selftest_copy(primitive: str, exhaustive_max: int = 256, max_size: int = 4160, sample_stride: int = 61,
                  src_offsets: int = 64) -> SelftestResult:
    """Every size up to exhaustive_max, then every sample_stride-th, at every
    destination offset 0..63 and source offsets 0..src_offsets-1."""
    out = SelftestResult()
    if not 1 <= src_offsets <= 64:
        raise ValueError("src_offsets must be 1..64")
    if lib().nt_selftest_copy(PRIMITIVES.index(primitive), exhaustive_max, max_size, sample_stride, src_offsets,
                              ctypes.byref(out)):
        raise MemoryError("native selftest could not allocate")
    return out


def selftest_fixed(variant: str) -> SelftestResult:
    out = SelftestResult()
    if lib().nt_selftest_fixed({"A": 0, "B": 1}[variant], ctypes.byref(out)):
        raise MemoryError("native selftest could not allocate")
    return out
