# SPDX-License-Identifier: Apache-2.0
"""The memmap probe: memmap_init_zone_device() calls (bpf/memmap.bpf.c), by
fentry or kprobe; or, with target="native", the native reference's memmap
model by uprobe (the same maps and records, to validate the latency
machinery on hosts without kprobes)."""
from __future__ import annotations

import ctypes

from nttrace import bpf as bpf_sources
from nttrace.probe_framework import histogram
from nttrace.probe_framework.base import (
    Availability,
    Probe,
    attach_functions,
    kernel_function_attach,
)
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise, GroundTruth
from nttrace.workloads import namespace_rebind

SYMBOL = "memmap_init_zone_device"
LABELS = (("pgmap_type", "pgmap_type"), ("node", "nid"))


def native_model_round() -> None:
    """500 calls of the native memmap model (64 descriptors each): the
    memmap program's benchmark workload, by uprobe (target native)."""
    from nttrace.reference import native
    with native.Buffer(64 * 64, fill=0) as buf:
        for _ in range(500):
            native.memmap_init(buf, 64, 64, "FS_DAX", 0, "template_nt")


def initialised_pages(snapshot: dict) -> int:
    return sum(r["pages"] for r in snapshot["rows"])


REBIND = Exercise(
    workload="rebinds a pmem namespace's driver (validate --rebind NAMESPACE)", run=namespace_rebind.rebind,
    count=initialised_pages,
    truths=(GroundTruth("kernel_line_pages", "memmap_init_zone_device()'s own pr_debug line"),),
    bench_round=native_model_round, bench_options={"target": "native"})


class MemmapProbe(Probe):
    name = "memmap"
    summary = "memmap_init_zone_device() calls (ZONE_DEVICE memmap init), by pgmap type and node"
    handover = Probe.handover + ("target", "page_ref", "page_ref_note")
    source = "memmap.bpf.c"
    functions = (SYMBOL,)
    exercise = REBIND
    columns = (
        Column("PGMAP", "pgmap_type", 10), Column("NODE", "nid", 4), Column("CALLS", "calls", 6),
        Column("PAGES", "pages", 11), Column("NS/PAGE", "ns_per_page", 8, ".2f"),
        Column("P50 ms", "latency_ns.p50", 9, ".2f", 1e6), Column("MAX ms", "latency_ns.max", 9, ".2f", 1e6),
    )
    metrics = (
        Metric("nttrace_memmap_init_duration_seconds", "memmap_init_zone_device() latency", "histogram",
               "latency_ns", LABELS),
        Metric("nttrace_memmap_init_pages", "struct pages initialised by memmap_init_zone_device()", "counter",
               "pages", LABELS),
        Metric("nttrace_memmap_init_calls", "memmap_init_zone_device() calls", "counter", "calls", LABELS),
    )

    @classmethod
    def options_for(cls, names: list[str], record: bool) -> dict:
        return {"page_ref_sets": "page_ref" in names}   # template-path inference when page_ref is traced too

    def __init__(self, meta, caps, options=None, sysroot=None):
        super().__init__(meta, caps, options, sysroot)
        self.target = self.options.get("target", "kernel")
        self.page_ref = bool(self.options.get("page_ref_sets"))
        self.page_ref_note = ""

    def availability(self) -> Availability:
        if self.target == "native":
            if not self.caps["uprobe"].available:
                return Availability(False, self.caps["uprobe"].detail)
            if not self.caps["bcc"].available:
                return Availability(False, self.caps["bcc"].detail)
            return Availability(True, attach_via="uprobe")
        missing = [k for k in ("dev_pagemap.type", "dev_pagemap.vmemmap_shift") if k not in self.meta.offsets]
        if missing:
            return Availability(False, f"BTF has no {', '.join(missing)} (kernel without ZONE_DEVICE)")
        if self.page_ref and not self.caps["tracepoint:page_ref:page_ref_set"].available:
            # Time the calls anyway; say why there is no template-path inference.
            self.page_ref = False
            self.page_ref_note = "no template-path inference: " + self.caps["tracepoint:page_ref:page_ref_set"].detail
        return kernel_function_attach(self.caps, [SYMBOL])

    def defines(self) -> dict:
        d = {f"NTTRACE_VIA_{(self.via or 'kprobe').upper()}": 1, "NTTRACE_PAGE_REF": int(self.page_ref)}
        altmap = ("NTTRACE_ALTMAP_BASE_PFN", "NTTRACE_ALTMAP_RESERVE", "NTTRACE_ALTMAP_FREE")
        if self.target == "native":
            d.update(NTTRACE_PGMAP_TYPE=0, NTTRACE_PGMAP_VMEMMAP_SHIFT=0, NTTRACE_ZONE_NODE=-1)
            d.update({k: -1 for k in altmap})
            return d
        off = self.meta.offsets
        d["NTTRACE_PGMAP_TYPE"] = off["dev_pagemap.type"]
        d["NTTRACE_PGMAP_VMEMMAP_SHIFT"] = off["dev_pagemap.vmemmap_shift"]
        d["NTTRACE_ZONE_NODE"] = off.get("zone.node", -1)
        have_altmap = all(f"dev_pagemap.altmap.{m}" in off for m in ("base_pfn", "reserve", "free"))
        for k, m in zip(altmap, ("base_pfn", "reserve", "free")):
            d[k] = off[f"dev_pagemap.altmap.{m}"] if have_altmap else -1
        return d

    def attach(self) -> None:
        if self.target == "native":
            from nttrace.reference import native
            self.via = self.availability().attach_via
            b = self.load()
            path = native.library_path()
            b.attach_uprobe(name=path, sym=native.MODEL_SYMBOL, fn_name="nttrace_memmap_entry")
            b.attach_uretprobe(name=path, sym=native.MODEL_SYMBOL, fn_name="nttrace_memmap_return")
        else:
            refused = attach_functions(self, [(SYMBOL, "nttrace_memmap_entry", "nttrace_memmap_return")])
            if refused:
                raise RuntimeError(refused[SYMBOL])
            if self.page_ref:
                self.bpf.attach_tracepoint(tp="page_ref:page_ref_set", fn_name="nttrace_memmap_page_ref_set")
        if self.emits_records():
            self.open_records("memmap_records", page_cnt=16)

    def emits_records(self) -> bool:
        # calls are rare: each one is a record, unless the reader (the daemon) takes none
        return bool(self.options.get("records", True))

    def _on_record(self, cpu, data, size):
        r = ctypes.cast(data, ctypes.POINTER(bpf_sources.struct_type(self.source, "memmap_record"))).contents
        rec = {
            "probe": "memmap", "target": self.target, "ts_ns": r.ts, "pid": r.pid, "latency_ns": r.latency_ns,
            "nr_pages": r.nr_pages, "pages_initialised": r.nr_init, "start_pfn": r.start_pfn,
            "pgmap_type": self.type_name(r.pgmap_type), "vmemmap_shift": r.vmemmap_shift, "nid": r.nid, "jiffies": r.jiffies,
            "ns_per_page": (r.latency_ns / r.nr_init) if r.nr_init else None,
        }
        if self.page_ref:
            rec["page_ref_sets"] = r.page_ref_sets
            rec["page_ref_sets_per_page"] = (r.page_ref_sets / r.nr_init) if r.nr_init else None
            rec["template_path"] = infer_template_path(r.page_ref_sets, r.nr_init)
        self._records.append(rec)

    def notes(self) -> list[str]:
        return super().notes() + ([self.page_ref_note] if self.page_ref_note else [])

    def type_name(self, value: int) -> str:
        return self.meta.memory_type_name(value).removeprefix("MEMORY_DEVICE_")

    def snapshot(self) -> dict:
        stats = {(k.pgmap_type, k.nid): histogram.latency_stats(v, ("calls", "pages", "page_ref_sets"))
                 for k, v in self.maps["memmap_stats"].items()}
        rows = []
        for (ptype, nid), (s, buckets) in sorted(stats.items()):
            rows.append({
                "pgmap_type": self.type_name(ptype), "nid": nid, "calls": s["calls"], "pages": s["pages"],
                "ns_per_page": (s["sum_ns"] / s["pages"]) if s["pages"] else None,
                "latency_ns": histogram.Latency(s["calls"], s["sum_ns"], s["max_ns"], buckets),
                **({"page_ref_sets": s["page_ref_sets"]} if self.page_ref else {}),
            })
        lost = self.maps["memmap_lost"][ctypes.c_int(0)].value + self._lost_records
        out = {"via": self.via, "rows": rows, "events_lost": lost}
        if self.page_ref_note:
            out["page_ref"] = self.page_ref_note
        return out


# The template path (v8 4/9..9/9) still runs the per-page code once per
# template it seeds: the first head page, and the first tail of each compound
# page (vmemmap_shift 9: one in 512). Each such page sets its refcount once
# or twice; every other page is a copy of the template and fires nothing.
TEMPLATE_MAX_SETS_PER_PAGE = 1 / 64


def infer_template_path(page_ref_sets: int, nr_pages: int) -> str:
    """Which memmap path a call took, from its page_ref_set events per
    initialised page: the per-page ("slow") path sets every page's refcount
    (>= 1 event a page); the template path only its seed pages."""
    if nr_pages == 0:
        return "unknown"
    per_page = page_ref_sets / nr_pages
    if per_page >= 1:
        return "slow"
    if per_page <= TEMPLATE_MAX_SETS_PER_PAGE:
        return "template"
    return "mixed"
