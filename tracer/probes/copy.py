# SPDX-License-Identifier: Apache-2.0
"""The copy probe: calls and bytes of folio_copy, folio_mc_copy,
folio_mc_copy_nt and copy_mc_page_nt (bpf/copy.bpf.c).

Each routine attaches on its own: by fentry where BTF describes it and
ftrace has a site in it (`available_filter_functions`), else by kprobe. One
that neither can trace is reported under "untraceable" with the reason, and
the others still count: copy_mc_page_nt (RFC v3) is assembly, described by
BTF from its C declaration but with no __fentry__ site, and it refuses
kprobes."""
from __future__ import annotations

from nttrace.kernel.btf import Btf
from nttrace.kernel.tracefs import ftrace_sites
from nttrace.probe_framework.base import (
    Availability,
    Probe,
    attach_functions,
    kernel_function_attach,
)
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise, GroundTruth, copied_pages
from nttrace.workloads import demotion

# (symbol, kind, nt): folio routines take (dst, src) folios; page routines copy 4 KiB.
ROUTINES = [
    ("folio_copy", "FOLIO", False),
    ("folio_mc_copy", "FOLIO", False),
    ("folio_mc_copy_nt", "FOLIO", True),
    ("copy_mc_page_nt", "PAGE", True),
]


def folio_layout(btf: Btf) -> dict[str, int]:
    """Offsets for folio_order() from BTF: 6.1 has folio._folio_order,
    later kernels keep the order in the low byte of folio._flags_1. 6.1's
    folio has a _flags_1 too (the first tail page's flags, not the order),
    so _folio_order is looked for first."""
    out = {"NTTRACE_FOLIO_FLAGS": btf.member_offset("folio", "flags"),
           "NTTRACE_PG_HEAD": btf.enum("pageflags")["PG_head"]}
    for member in ("_folio_order", "_flags_1"):
        try:
            out["NTTRACE_FOLIO_ORDER"] = btf.member_offset("folio", member)
            return out
        except KeyError:
            continue
    raise KeyError("struct folio has neither _flags_1 nor _folio_order")


LABELS = (("routine", "routine"), ("nt", "nt"))


# every demoted page is copied once by one of the routines
DEMOTION = Exercise(
    workload="reclaims a scratch cgroup's memory into the lower tier (validate --demote)", run=demotion.demote_scratch,
    count=copied_pages, truths=(GroundTruth("pgdemote", "/proc/vmstat pgdemote_* delta"),),
    no_bench="its workload is a demotion, which needs a lower memory tier and changes system state")


class CopyProbe(Probe):
    name = "copy"
    summary = "the kernel's folio/page copy routines, by routine"
    handover = Probe.handover + ("present", "_layout", "routes", "no_fentry", "untraceable")
    source = "copy.bpf.c"
    functions = tuple(r[0] for r in ROUTINES)
    exercise = DEMOTION
    folio_layout = staticmethod(folio_layout)   # what it reads of struct folio, from a BTF
    columns = (Column("ROUTINE", "routine", 18), Column("NT", "nt", 3), Column("VIA", "via", 7),
               Column("CALLS", "calls", 9), Column("BYTES", "bytes", 14))
    metrics = (
        Metric("nttrace_kernel_copy_bytes", "Bytes copied by the kernel's folio/page copy routines", "counter",
               "bytes", LABELS),
        Metric("nttrace_kernel_copy_calls", "Calls of the kernel's folio/page copy routines", "counter", "calls", LABELS),
    )

    def __init__(self, meta, caps, options=None, sysroot=None):
        super().__init__(meta, caps, options, sysroot)
        self.present = [r for r in ROUTINES if caps[f"ksym:{r[0]}"].available]
        self._layout = None
        self.routes: dict[str, str] = {}        # routine -> fentry or kprobe, set with the program
        self.no_fentry: dict[str, str] = {}     # routine -> why it goes by kprobe although the probe runs by fentry
        self.untraceable: dict[str, str] = {}   # routine -> why it could not be attached

    def layout(self) -> dict[str, int]:
        if self._layout is None:
            if self.meta.btf is None:
                raise KeyError("the kernel metadata was not read from BTF")
            self._layout = folio_layout(self.meta.btf)
        return self._layout

    def availability(self) -> Availability:
        if not self.present:
            return Availability(False, "none of " + ", ".join(r[0] for r in ROUTINES) + " in /proc/kallsyms")
        try:
            self.layout()
        except (KeyError, OSError) as exc:
            return Availability(False, f"BTF lacks the folio layout: {exc}")
        return kernel_function_attach(self.caps, [r[0] for r in self.present])

    def fentry_refusal(self, sym: str, sites: set[str] | None) -> str | None:
        """Why fentry cannot take the routine, or None: BTF must describe it
        and ftrace must be able to hook it (`sites` None: the list is
        unreadable, BTF decides). One fentry program that cannot attach
        fails the whole load, and with it every routine's fentry."""
        if self.meta.btf is None or not self.meta.btf.has_func(sym):
            return "no BTF"
        if sites is not None and sym not in sites:
            return "no ftrace site (not in available_filter_functions)"
        return None

    def defines(self) -> dict:
        # Routes are decided when the program is generated and kept: the
        # kernel metadata drops its BTF once the programs load.
        self.no_fentry = {}
        if self.via == "fentry":
            sites = ftrace_sites(self.sysroot.tracefs())
            self.no_fentry = {sym: why for sym, _kind, _nt in self.present
                              if (why := self.fentry_refusal(sym, sites)) is not None}
        self.routes = {sym: "fentry" if self.via == "fentry" and sym not in self.no_fentry else "kprobe"
                       for sym, _kind, _nt in self.present}
        entries = " ".join(f"COPY_{kind}_{self.routes[sym].upper()}({i}, {sym})"
                           for i, (sym, kind, _nt) in enumerate(self.present))
        return {**self.layout(), "NTTRACE_COPY_ROUTINES": entries}

    def by_kprobe(self, symbol: str) -> bool:
        return self.routes.get(symbol) == "kprobe"

    def attach(self) -> None:
        refused = attach_functions(self, [(sym, f"nttrace_copy_{sym}", None) for sym, _k, _nt in self.present])
        self.untraceable = {sym: (f"{self.no_fentry[sym]}, and " if sym in self.no_fentry else "") + why
                            for sym, why in refused.items()}
        if len(self.untraceable) == len(self.present):
            raise RuntimeError("no copy routine could be traced: "
                               + "; ".join(f"{k}: {v}" for k, v in self.untraceable.items()))

    def notes(self) -> list[str]:
        return super().notes() + [f"{sym} not traced: {why}" for sym, why in self.untraceable.items()]

    def snapshot(self) -> dict:
        table = self.maps["copy_stats"]
        rows = []
        for i, (sym, _kind, nt) in enumerate(self.present):
            if sym in self.untraceable:
                continue
            s = table[i]
            rows.append({"routine": sym, "nt": nt, "via": self.routes.get(sym, self.via), "calls": s.calls, "bytes": s.bytes})
        out = {"via": self.via, "rows": rows}
        if self.untraceable:
            out["untraceable"] = dict(self.untraceable)
        return out
