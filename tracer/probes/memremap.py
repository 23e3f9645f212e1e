# SPDX-License-Identifier: Apache-2.0
"""The memremap probe: memremap_pages() calls (bpf/memremap.bpf.c) by fentry
or kprobe: how long a driver waits to map ZONE_DEVICE memory, the pages its
ranges span, by pgmap type. The template series (v8) reports it for HMM's
DEVICE_PRIVATE memory: test_hmm's memremap of 64 GB chunks went from about
116.7 to 54.6 ms on its authors' host.

Its workload loads and unloads the HMM test driver (test_hmm.ko, built with
CONFIG_TEST_HMM=m: the lab's kernels have it; most distribution kernels do
not, and the exercise says so). Each load maps one 256 MiB DEVICE_PRIVATE
chunk for each of the driver's two devices, and the driver prints each
chunk's size: that line is the kernel's own count the probe's pages must
equal. Loading a module changes system state: validate runs it only when
asked (--exercise memremap).
"""
from __future__ import annotations

import ctypes
import re
import subprocess
import time

from nttrace import bpf as bpf_sources
from nttrace.errors import UsageError
from nttrace.kernel import PAGE
from nttrace.probe_framework import histogram
from nttrace.probe_framework.base import Availability, Probe, attach_functions, kernel_function_attach
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise, GroundTruth

SYMBOL = "memremap_pages"
MODULE = "test_hmm"
# test_hmm's own line for each chunk it maps (lib/test_hmm.c, dmirror_allocate_chunk)
CHUNK_LINE = re.compile(r"added new (\d+) MB chunk \(total \d+ chunks")
LABELS = (("pgmap_type", "pgmap_type"),)


def _modprobe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["modprobe", *args], capture_output=True, text=True, timeout=300)


def hmm_loads(loads: int = 5) -> dict:
    """Load and unload test_hmm `loads` times: each load memremaps its
    devices' DEVICE_PRIVATE chunks. Returns the pages the driver says it
    mapped (its own lines), the loads, and each load's wall time."""
    from nttrace.workloads.namespace_rebind import kmsg_during
    try:
        modules = open("/proc/modules").read()
    except OSError:
        raise UsageError(f"no {MODULE} module for this kernel: it loads no modules (no /proc/modules)") from None
    if re.search(rf"^{MODULE}\s", modules, re.M):
        raise UsageError(f"refusing to exercise memremap: {MODULE} is loaded already (unload it first)")
    if _modprobe("-n", MODULE).returncode != 0:
        raise UsageError(f"no {MODULE} module for this kernel (a kernel built with CONFIG_TEST_HMM=m has one)")
    pages, walls = 0, []
    for _ in range(loads):
        def once():
            t0 = time.monotonic()
            p = _modprobe(MODULE)
            took = time.monotonic() - t0
            if p.returncode != 0:
                raise RuntimeError(f"modprobe {MODULE}: {p.stderr.strip()}")
            return took
        took, log = kmsg_during(once)
        walls.append(took)
        pages += sum(int(mb) for mb in CHUNK_LINE.findall(log)) * (1 << 20) // PAGE
        p = _modprobe("-r", MODULE)
        if p.returncode != 0:
            raise RuntimeError(f"modprobe -r {MODULE}: {p.stderr.strip()}")
    return {"loads": loads, "load_wall_s": walls, "driver_pages": pages or None}


def mapped_pages(snapshot: dict) -> int:
    return sum(r["pages"] for r in snapshot["rows"])


HMM_LOADS = Exercise(
    workload=f"loads and unloads the HMM test driver ({MODULE}.ko), whose devices memremap DEVICE_PRIVATE chunks",
    run=hmm_loads, count=mapped_pages,
    truths=(GroundTruth("driver_pages", f"{MODULE}'s own 'added new N MB chunk' lines"),),
    no_bench="its workload loads a kernel module (CONFIG_TEST_HMM=m), which changes system state", lab=True)


class MemremapProbe(Probe):
    name = "memremap"
    summary = "memremap_pages() calls, by pgmap type"
    handover = Probe.handover + ("_offsets",)
    source = "memremap.bpf.c"
    functions = (SYMBOL,)
    exercise = HMM_LOADS
    columns = (
        Column("PGMAP", "pgmap_type", 14), Column("CALLS", "calls", 6), Column("PAGES", "pages", 11),
        Column("NS/PAGE", "ns_per_page", 8, ".2f"), Column("P50 ms", "latency_ns.p50", 9, ".2f", 1e6),
        Column("MAX ms", "latency_ns.max", 9, ".2f", 1e6), Column("FAILED", "failed", 6),
    )
    metrics = (
        Metric("nttrace_memremap_duration_seconds", "memremap_pages() latency", "histogram", "latency_ns", LABELS),
        Metric("nttrace_memremap_pages", "pages mapped by memremap_pages() (the ranges it was given)", "counter",
               "pages", LABELS),
        Metric("nttrace_memremap_calls", "memremap_pages() calls", "counter", "calls", LABELS),
        Metric("nttrace_memremap_failures", "memremap_pages() calls that returned an error", "counter", "failed",
               LABELS),
    )

    def __init__(self, meta, caps, options=None, sysroot=None):
        super().__init__(meta, caps, options, sysroot)
        self._offsets: dict[str, int] | None = None

    def offsets(self) -> dict[str, int]:
        """struct dev_pagemap's type, nr_range and ranges, from BTF."""
        if self._offsets is None:
            if self.meta.btf is None:
                raise KeyError("the kernel metadata was not read from BTF")
            b = self.meta.btf
            self._offsets = {"NTTRACE_PGMAP_TYPE": b.member_offset("dev_pagemap", "type"),
                             "NTTRACE_PGMAP_NR_RANGE": b.member_offset("dev_pagemap", "nr_range"),
                             "NTTRACE_PGMAP_RANGES": b.member_offset("dev_pagemap", "ranges")}
        return self._offsets

    def availability(self) -> Availability:
        try:
            self.offsets()
        except (KeyError, OSError) as exc:
            return Availability(False, f"BTF lacks struct dev_pagemap's ranges (kernel without ZONE_DEVICE?): {exc}")
        return kernel_function_attach(self.caps, [SYMBOL])

    def defines(self) -> dict:
        return {f"NTTRACE_VIA_{(self.via or 'kprobe').upper()}": 1, **self.offsets()}

    def attach(self) -> None:
        refused = attach_functions(self, [(SYMBOL, "nttrace_memremap_entry", "nttrace_memremap_return")])
        if refused:
            raise RuntimeError(refused[SYMBOL])
        if self.emits_records():
            self.open_records("memremap_records", page_cnt=8)

    def emits_records(self) -> bool:
        return bool(self.options.get("records", True))

    def type_name(self, value: int) -> str:
        return self.meta.memory_type_name(value).removeprefix("MEMORY_DEVICE_")

    def _on_record(self, cpu, data, size):
        r = ctypes.cast(data, ctypes.POINTER(bpf_sources.struct_type(self.source, "memremap_record"))).contents
        self._records.append({
            "probe": self.name, "ts_ns": r.ts, "pid": r.pid, "latency_ns": r.latency_ns, "pages": r.pages,
            "pgmap_type": self.type_name(r.pgmap_type), "nid": r.nid, "failed": bool(r.failed),
            "ns_per_page": (r.latency_ns / r.pages) if r.pages else None})

    def snapshot(self) -> dict:
        rows = []
        for k, v in sorted(self.maps["memremap_stats"].items(), key=lambda kv: kv[0].value):
            s, buckets = histogram.latency_stats(v, ("calls", "pages", "failed"))
            rows.append({"pgmap_type": self.type_name(k.value), "calls": s["calls"], "pages": s["pages"],
                         "failed": s["failed"], "ns_per_page": (s["sum_ns"] / s["pages"]) if s["pages"] else None,
                         "latency_ns": histogram.Latency(s["calls"], s["sum_ns"], s["max_ns"], buckets)})
        lost = self.maps["memremap_lost"][ctypes.c_int(0)].value + self._lost_records
        return {"via": self.via, "rows": rows, "events_lost": lost}
