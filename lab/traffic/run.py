# SPDX-License-Identifier: Apache-2.0
"""Boots the lab guest under the traffic plugin and reads what it counted.

    python3 -m lab.traffic.run OUT [--no-plugin] [--llc BYTES --ways N --line B --wc N]

The pmem device's range is found in the terms the plugin sees (QEMU 7.2's
qemu_plugin_hwaddr_phys_addr() is an offset in QEMU's RAMBlock list, not a
guest physical address) by starting QEMU once, stopped (-S), with the boot's
own memory and device arguments, and asking its monitor `info ramblock`.

The plugin models memory traffic, not time: every figure it gives is lines
and bytes moved between a modelled LLC and DRAM or the pmem device.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import lab
from lab.traffic import build as tbuild
from lab.traffic import symbols

PMEM_BLOCK = "nv0"     # lab.qemu_command's NVDIMM backend (memory-backend-file id=nv0)
LINE = 64
# The LLC a server has (geometry of the model's defaults: 32 MiB, 16 ways,
# 64-byte lines; 10 write-combining buffers, as Intel cores have fill buffers).
DEFAULT_GEOMETRY = {"llc": 32 << 20, "ways": 16, "line": 64, "wc": 10}
# A guest whose clock counts instructions, one vCPU: lab.ab's measuring guest.
CPU = lab.MEASURE_CPU
APPEND = "nttrace.traffic"
STEPS = ("memmap", "demotion")      # guest-traffic.sh's optional steps
# The two fast-string rules each window is counted under (model.h), by the
# key the plugin writes their counts under.
RULES = {"counts": "fast-string stores read for ownership, as ordinary stores do",
         "counts_fast_string_no_rfo": "fast-string stores that write a line whole read nothing (the SDM's "
                                      "fast-string operation)"}
SOURCE_FIELDS = ("fills_load", "fills_store", "writebacks", "nt_line_writes", "nt_partial_bytes", "evictions")
# A window's functions kept in full: every one that moved a device line, and
# this many more by their LLC fills from DRAM; the rest are summed in one row.
DRAM_ONLY_FUNCTIONS = 5


class TrafficError(RuntimeError):
    """The plugin's run or its output is not what it must be."""


# -- the RAMBlock list ----------------------------------------------------------
@dataclass(frozen=True)
class RamBlock:
    name: str
    offset: int
    used: int
    total: int


def parse_ramblocks(text: str) -> list[RamBlock]:
    """The rows of the monitor's `info ramblock`:
    `  Block Name  PSize  Offset  Used  Total` (QEMU 7.2), sizes in hex."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*(\S+)\s+\d+\s*[KMGT]?i?B\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s*$", line)
        if m:
            out.append(RamBlock(m[1], int(m[2], 16), int(m[3], 16), int(m[4], 16)))
    return out


def ramblock_command(boot: list[str]) -> list[str]:
    """The boot's QEMU command, stopped before the guest runs, its monitor on
    stdio and its serial nowhere: the same machine, memory and devices."""
    cmd = []
    skip = False
    for i, a in enumerate(boot):
        if skip:
            skip = False
            continue
        if a in ("-monitor", "-serial", "-plugin"):
            skip = True
            continue
        cmd.append(a)
    return [*cmd, "-S", "-monitor", "stdio", "-serial", "null"]


def query_ramblocks(boot: list[str], timeout: float = 60) -> list[RamBlock]:
    p = subprocess.run(ramblock_command(boot), input="info ramblock\nquit\n", capture_output=True, text=True,
                       timeout=timeout)
    blocks = parse_ramblocks(p.stdout)
    if not blocks:
        raise TrafficError(f"`info ramblock` gave no rows (QEMU exit {p.returncode}): {p.stdout[-1500:]}"
                           f"{p.stderr[-1500:]}")
    return blocks


def pmem_range(blocks: list[RamBlock]) -> RamBlock:
    found = [b for b in blocks if b.name == PMEM_BLOCK]
    if len(found) != 1:
        raise TrafficError(f"no single {PMEM_BLOCK} in the RAMBlock list: {[b.name for b in blocks]}")
    return found[0]


# -- the plugin's output --------------------------------------------------------
@dataclass
class Window:
    index: int
    counts: dict[str, dict[str, int]] | None
    pmem_offsets: dict[str, int] | None
    io_accesses: int
    closed_by: str
    label: str = ""
    plan: dict = field(default_factory=dict)
    counts_fast_string_no_rfo: dict[str, dict[str, int]] | None = None
    sources: dict | None = None
    cpu_s: dict[str, float] | None = None
    functions: list[dict] | None = None

    def rule(self, rule: str = "counts") -> dict[str, dict[str, int]]:
        """The window's counts under a fast-string rule (RULES)."""
        return self.counts if rule == "counts" else self.counts_fast_string_no_rfo

    def device_bytes(self, target: str = "pmem", line: int = LINE, rule: str = "counts") -> dict[str, int]:
        """Bytes the target moved: read (every fill, load or RFO, reads its
        line) and written (write-backs, full NT lines, partial NT bytes)."""
        return device_bytes(self.rule(rule)[target], line)


def device_bytes(c: dict[str, int], line: int = LINE) -> dict[str, int]:
    """A target's counts (a window's or a function's) as bytes read and written."""
    return {"read": (c.get("fills_load", 0) + c.get("fills_store", 0)) * line,
            "written": (c.get("writebacks", 0) + c.get("nt_line_writes", 0)) * line + c.get("nt_partial_bytes", 0)}


@dataclass
class Output:
    model: dict
    pmem_ramblock: dict
    windows: list[Window]
    end: dict | None


def parse_output(text: str) -> Output:
    """The plugin's JSON lines: the model's line first, a line a window,
    the end line last (absent when QEMU was killed)."""
    lines = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    if not lines or "model" not in lines[0]:
        raise TrafficError("the plugin's output does not start with its model line")
    head = lines[0]
    windows, end = [], None
    for rec in lines[1:]:
        if "window" in rec:
            windows.append(Window(rec["window"], rec.get("counts"), rec.get("pmem_offsets"), rec.get("io_accesses", 0),
                                  rec["closed_by"], counts_fast_string_no_rfo=rec.get("counts_fast_string_no_rfo"),
                                  sources=rec.get("sources"), cpu_s=rec.get("cpu_s")))
        elif rec.get("end"):
            end = rec
        else:
            raise TrafficError(f"an unknown line in the plugin's output: {rec}")
    if [w.index for w in windows] != list(range(len(windows))):
        raise TrafficError(f"windows out of order: {[w.index for w in windows]}")
    return Output(head["model"], head["pmem_ramblock"], windows, end)


# -- who caused it ------------------------------------------------------------------
def functions_of(w: Window, name) -> list[dict]:
    """The window's charged instruction addresses (the plugin's "sources":
    [address, class, caller's call site, one counts list a rule]) summed by
    the function `name` gives the address, the function its caller's call
    site is in, and the instruction class: a row {"function", "caller",
    "class", rule key: {target: {field: count}}} for each rule, every field
    kept; rows by device lines moved, then DRAM fills."""
    src = w.sources
    fields, targets = src["fields"], src["targets"]
    rows: dict[tuple[str, str, str], dict] = {}
    for pc, cls, caller, *per_rule in src["rows"]:
        fn, by = name(pc), name(caller) if caller else ""
        row = rows.setdefault((fn, by, cls), {"function": fn, "caller": by, "class": cls, **{
            r: {t: dict.fromkeys(fields, 0) for t in targets} for r in RULES}})
        for r, values in zip(RULES, per_rule):
            for ti, t in enumerate(targets):
                for fi, f in enumerate(fields):
                    row[r][t][f] += values[ti * len(fields) + fi]
    return sorted(rows.values(), key=lambda r: (-device_lines(r), -fills(r, "dram"), r["function"], r["caller"],
                                                r["class"]))


def device_lines(row: dict, target: str = "pmem") -> int:
    """Lines a function moved on a target (read, written, a partial NT line
    counted one), under whichever rule counts more: a row of functions_of,
    or of a summary's table (compact: a rule not there counts as "counts")."""
    def moved(c: dict) -> int:
        return sum(v for f, v in c.items() if f not in ("evictions", "nt_partial_bytes")) + bool(
            c.get("nt_partial_bytes"))
    return max(moved(row.get(r, row["counts"]).get(target, {})) for r in RULES)


def fills(row: dict, target: str, rule: str = "counts") -> int:
    c = row[rule][target]
    return c.get("fills_load", 0) + c.get("fills_store", 0)


def compact(rows: list[dict], keep: int = DRAM_ONLY_FUNCTIONS) -> list[dict]:
    """A window's function rows as a summary keeps them: each that moved a
    device line, then the `keep` with the most DRAM fills, then one row
    summing the rest; zero counts left out, and the no-RFO rule's counts only
    where they differ from the RFO rule's."""
    device = [r for r in rows if device_lines(r)]
    others = sorted((r for r in rows if not device_lines(r)), key=lambda r: (-fills(r, "dram"), r["function"],
                                                                           r["caller"]))
    kept, rest = device + others[:keep], others[keep:]
    if rest:
        total = {"function": f"({len(rest)} more functions, no device line)", "caller": "", "class": "",
                 "folded": len(rest),
                 **{r: {t: {} for t in ("dram", "pmem")} for r in RULES}}
        for row in rest:
            for r in RULES:
                for t, c in row[r].items():
                    for f, v in c.items():
                        total[r][t][f] = total[r][t].get(f, 0) + v
        kept.append(total)
    out = []
    for row in kept:
        lean = {r: {t: {f: v for f, v in c.items() if v} for t, c in row[r].items()} for r in RULES}
        d = {"function": row["function"], "caller": row["caller"], "class": row["class"],
             **({"folded": row["folded"]} if "folded" in row else {}), "counts": lean["counts"]}
        if lean["counts_fast_string_no_rfo"] != lean["counts"]:
            d["counts_fast_string_no_rfo"] = lean["counts_fast_string_no_rfo"]
        out.append(d)
    return out


def attribute(out: Output, symbolizer: symbols.Symbolizer) -> None:
    """Each window's function table (functions_of, compacted), where the
    plugin charged addresses."""
    for w in out.windows:
        if w.sources is not None:
            w.functions = compact(functions_of(w, symbolizer.name))


def label(out: Output, plan: list[dict]) -> None:
    """Names each window by the guest's own account of it (in order)."""
    if len(plan) != len(out.windows):
        raise TrafficError(f"the guest ran {len(plan)} windows, the plugin saw {len(out.windows)}")
    for w, p in zip(out.windows, plan):
        w.label, w.plan = p["label"], p


# -- first principles -----------------------------------------------------------
STRINGS = ("pages_rep_movsb", "string_movsb_dram_pmem", "string_movsq_dram_pmem", "string_stosb_pmem",
           "string_stosq_pmem", "string_movsb_dram_pmem_misaligned")
WARM = ("warm_cached_pmem_pmem", "warm_nt_pmem_pmem")
PARTIAL = "nt_partial_pmem"


def expected_pmem(label_: str, nbytes: int, line: int = LINE, rule: str = "counts", dst_offset: int = 0) -> dict[str, int]:
    """What the pmem device must see for the traffic guest's copies, from
    first principles (the LLC empty at the open, the copy smaller than it,
    dirty lines written back at the close):
      cached copy (nt_copy_movq_unrolled, 8-byte loads and stores): every
      source line filled by a load, every destination line filled by its
      first store (the read for ownership) and written back;
      NT copy (nt_copy_generic): every source line filled, no destination
      fill, every destination line written once, whole, from a WC buffer; the
      routine loads its last source word once more, before the body (its
      tail), so it makes one load more than it has words, and no fill more;
      fast strings (rep movsb/movsq/stosb/stosq, TCG's one access an
      element, a byte or 8): under the RFO rule every destination line read
      for ownership and written back; under the no-RFO rule only the lines
      not written whole (a destination dst_offset bytes into a line: its
      first and last) are read;
      partial NT lines (8 bytes of each line by MOVNTI): each line written
      partially, 8 bytes, nothing read;
      a warm cache (a resident set of RESIDENT bytes of the device loaded a
      line at a time, then a copy as above): the resident lines' fills and
      loads added.
    Evictions are bounded, not exact (eviction_mismatches)."""
    lines, words = nbytes // line, nbytes // 8
    zero = {"loads": 0, "stores": 0, "nt_stores": 0, "fills_load": 0, "fills_store": 0, "writebacks": 0,
            "nt_line_writes": 0, "nt_partial_writes": 0, "nt_partial_bytes": 0, "nt_invalidates": 0,
            "string_stores": 0, "string_full_lines": 0}
    if label_ in WARM:
        resident = RESIDENT // line
        inner = expected_pmem(label_.replace("warm_", ""), nbytes, line)
        return {**inner, "loads": inner["loads"] + resident, "fills_load": inner["fills_load"] + resident}
    if label_.startswith("string_") or label_ == "pages_rep_movsb":
        element = 8 if label_.endswith(("movsq_dram_pmem", "stosq_pmem")) else 1
        first, last = dst_offset // line, (dst_offset + nbytes - 1) // line
        touched = last - first + 1
        whole = sum(1 for n in range(first, last + 1) if n * line >= dst_offset and (n + 1) * line <= dst_offset + nbytes)
        no_rfo = rule == "counts_fast_string_no_rfo"
        return {**zero, "string_stores": nbytes // element, "writebacks": touched,
                "fills_store": touched - whole if no_rfo else touched, "string_full_lines": whole if no_rfo else 0}
    if label_ == PARTIAL:
        return {**zero, "nt_stores": nbytes // 8, "nt_partial_writes": nbytes // 8, "nt_partial_bytes": nbytes}
    pm_src = label_.endswith("pmem_pmem")
    if label_.startswith("cached_"):
        src = {"loads": words, "fills_load": lines} if pm_src else {"loads": 0, "fills_load": 0}
        return {**zero, **src, "stores": words, "fills_store": lines, "writebacks": lines}
    if label_.startswith("nt_"):
        src = {"loads": words + 1, "fills_load": lines} if pm_src else {"loads": 0, "fills_load": 0}
        return {**zero, **src, "nt_stores": words, "nt_line_writes": lines}
    raise ValueError(f"no first-principles counts for {label_}")


RESIDENT = 16 << 20         # guest.c's resident set
COPIES = ("cached_pmem_pmem", "nt_pmem_pmem", "cached_dram_pmem", "nt_dram_pmem")
EXACT = (*COPIES, *STRINGS, PARTIAL, *WARM)


def eviction_mismatches(w: Window) -> list[str]:
    """The device's evictions in the guest's windows from first principles.
    No window's device lines alone overfill a set of the model (the 16 MiB
    copies' source and destination fill its 16 ways exactly), but the
    kernel's own DRAM lines in the window, and a DRAM source's, can push
    out one device line each: so the device's evictions are at most the
    window's DRAM fills. The warm windows add the resident set (8 lines in
    each set) before the copy: an ordinary copy's 8 source and 8
    destination lines a set (24 for 16 ways) evict every resident line,
    bounded above as before; an NT copy's 8 source lines a set (16) evict
    none but the DRAM lines' share."""
    evicted, dram = w.counts["pmem"].get("evictions", 0), sum(
        w.counts["dram"].get(k, 0) for k in ("fills_load", "fills_store"))
    low = RESIDENT // LINE if w.label == "warm_cached_pmem_pmem" else 0
    if not low <= evicted <= low + dram:
        return [f"{w.label} pmem evictions: {evicted}, expected {low}..{low + dram} (the window's DRAM fills: {dram})"]
    return []


def first_principles_mismatches(out: Output) -> list[str]:
    """'window field: counted N, expected M' for each pmem count of the
    guest's copies, fast strings, partial NT lines and warm windows, under
    each fast-string rule the output has, that is not what first principles
    give (writebacks_at_close is not asserted: how many of the write-backs
    wait for the close depends on what else the window brought into the
    LLC; evictions are bounded by eviction_mismatches); and for a DRAM
    source, the DRAM side must have read at least the source's lines."""
    bad = []
    for w in out.windows:
        if w.label not in EXACT:
            continue
        for rule in RULES:
            counts = w.rule(rule)
            if counts is None:
                continue
            want = expected_pmem(w.label, w.plan["bytes"], rule=rule, dst_offset=w.plan["dst_offset"] % 64)
            name = w.label + ("" if rule == "counts" else " (no-RFO rule)")
            for k, v in want.items():
                if counts["pmem"].get(k, 0) != v:
                    bad.append(f"{name} pmem {k}: counted {counts['pmem'].get(k, 0)}, expected {v}")
        bad += eviction_mismatches(w)
        if "_dram_" in w.label and w.counts["dram"]["fills_load"] < w.plan["bytes"] // LINE:
            bad.append(f"{w.label} dram fills_load: {w.counts['dram']['fills_load']} < the source's lines")
    if [w.label for w in out.windows if w.label in COPIES] != list(COPIES):
        bad.append(f"the copies' windows are not all there: {[w.label for w in out.windows]}")
    return bad


# What the kernel's own DRAM lines in a window decide, not the path: which
# write-backs wait for the close, and which device lines must leave a full set.
NOT_THE_PATHS = ("writebacks_at_close", "evictions")


def aa_differences(a: Output, b: Output) -> list[str]:
    """What two runs of one kernel counted differently on the device, window
    by window ('window field: A, B'), under each fast-string rule. The DRAM
    counts are not compared: a window holds whatever the kernel did in it
    too (interrupts, timers), and under icount with sleep=on when that work
    comes follows the host's I/O; nor are NOT_THE_PATHS, which those DRAM
    lines in the LLC decide."""
    if len(a.windows) != len(b.windows):
        return [f"{len(a.windows)} windows against {len(b.windows)}"]
    out = []
    for wa, wb in zip(a.windows, b.windows):
        for rule in RULES:
            ca, cb = wa.rule(rule), wb.rule(rule)
            if ca is None or cb is None:
                continue
            for k, v in ca["pmem"].items():
                if k not in NOT_THE_PATHS and cb["pmem"].get(k, 0) != v:
                    out.append(f"{wa.label or wa.index}{'' if rule == 'counts' else ' (no-RFO rule)'} {k}: "
                               f"{v}, {cb['pmem'].get(k, 0)}")
    return out


def function_differences(a: list[dict], b: list[dict]) -> list[str]:
    """What two windows' function tables (summary form) charged differently
    to each function on the device ('function (class) field: A, B'), its
    callers together (an interrupt's timing, which follows the host under
    icount's sleep=on, decides which caller a few lines are charged to),
    evictions aside (NOT_THE_PATHS)."""
    def device(rows):
        out: dict[tuple[str, str], dict[str, int]] = {}
        for r in rows:
            d = out.setdefault((r["function"], r["class"]), {})
            for f, v in r["counts"].get("pmem", {}).items():
                if f not in NOT_THE_PATHS:
                    d[f] = d.get(f, 0) + v
        return {k: v for k, v in out.items() if v}
    da, db = device(a), device(b)
    out = []
    for key in sorted(set(da) | set(db)):
        fa, fb = da.get(key, {}), db.get(key, {})
        for f in sorted(set(fa) | set(fb)):
            if fa.get(f, 0) != fb.get(f, 0):
                out.append(f"{key[0]} ({key[1]}) {f}: {fa.get(f, 0)}, {fb.get(f, 0)}")
    return out


def repeat_differences(out: Output) -> list[str]:
    """The A/A of the kernel's windows within one boot: the guest runs each
    memmap rebind twice, and the two windows of each must count the same
    device traffic, in total under both rules and function by function
    (evictions and which write-backs wait for the close aside:
    NOT_THE_PATHS); 'label: difference' for each that does not."""
    by_label: dict[str, list[Window]] = {}
    for w in out.windows:
        if w.label.startswith("rebind_"):
            by_label.setdefault(w.label, []).append(w)
    bad = []
    for label, ws in by_label.items():
        if len(ws) != 2:
            bad.append(f"{label}: {len(ws)} windows, not 2")
            continue
        bad += [f"{label} (repeat): {d}" for d in aa_differences(Output(out.model, out.pmem_ramblock, ws[:1], None),
                                                                 Output(out.model, out.pmem_ramblock, ws[1:], None))]
        if ws[0].functions is not None and ws[1].functions is not None:
            bad += [f"{label} (repeat): {d}" for d in function_differences(ws[0].functions, ws[1].functions)]
    return bad


def probe_offset(device: dict, plan: dict) -> int:
    """The probe store's offset in the NVDIMM, from the guest's own account:
    the dax device's physical start less the region's, plus the store's
    offset in the dax device."""
    return int(device["dax_start"], 16) - int(device["region_start"], 16) + plan["dst_offset"]


# -- the run --------------------------------------------------------------------
@dataclass
class TrafficRun:
    results: Path
    output: Output | None
    guest: dict
    device: dict
    pmem: RamBlock
    elapsed_s: float
    run: "lab.LabRun"
    symbols: dict | None = None     # where the function names came from

    def window(self, label_: str) -> Window:
        assert self.output is not None
        for w in self.output.windows:
            if w.label == label_:
                return w
        raise KeyError(label_)


def plugin_spec(plugin: Path, out: Path, pmem: RamBlock, geometry: dict, model: bool = True) -> str:
    return (f"{plugin},out={out},pmem={pmem.offset:#x}:{pmem.total:#x},mttcg=0,"
            + ",".join(f"{k}={v}" for k, v in geometry.items()) + ("" if model else ",model=0"))


def run(results: Path, plugin: bool = True, geometry: dict | None = None, kernel=None,
        timeout: float = 1800, steps: tuple[str, ...] = (), model: bool = True) -> TrafficRun:
    """One boot of the traffic guest (one vCPU, icount), under the plugin
    unless plugin=False, and with its model off (the windows' CPU time
    only) when model=False: the cost's baselines; `steps`: and these of
    guest-traffic.sh's (STEPS), each in windows of its own."""
    if set(steps) - set(STEPS):
        raise ValueError(f"unknown traffic steps {sorted(set(steps) - set(STEPS))} (known: {', '.join(STEPS)})")
    built = tbuild.build()
    results.mkdir(parents=True, exist_ok=True)
    tdir = results / "traffic"
    tdir.mkdir(exist_ok=True)
    for stale in tdir.iterdir():
        stale.unlink()
    (tdir / "traffic-guest").write_bytes(built.guest.read_bytes())
    (tdir / "traffic-guest").chmod(0o755)
    nvdimm = tdir / "ramblock-nvdimm.img"
    with open(nvdimm, "wb") as f:
        f.truncate(2 << 30)
    try:
        boot = lab.qemu_command(lab.image(), results, nvdimm, 0, APPEND, kernel, cpu=CPU)
        pmem = pmem_range(query_ramblocks(boot))
    finally:
        nvdimm.unlink(missing_ok=True)
    out_path = tdir / "plugin.jsonl"
    spec = plugin_spec(built.plugin, out_path, pmem, {**DEFAULT_GEOMETRY, **(geometry or {})}, model) \
        if plugin else None
    t0 = time.monotonic()
    r = lab.run(results, timeout=timeout, append=APPEND + (f"={','.join(steps)}" if steps else ""), kernel=kernel, cpu=CPU,
                plugin=spec)
    elapsed = time.monotonic() - t0
    rc = (results / "guest-run.rc").read_text().strip()
    if rc != "0" or not (tdir / "guest.json").exists():
        raise TrafficError(f"the traffic guest failed (exit {rc})\n{r.tail()}")
    guest = json.loads((tdir / "guest.json").read_text())
    if (tdir / "windows.jsonl").exists():
        guest["windows"] += [json.loads(ln) for ln in (tdir / "windows.jsonl").read_text().splitlines() if ln]
    device = json.loads((tdir / "device.json").read_text())
    output, named_by = None, None
    if plugin:
        output = parse_output(out_path.read_text())
        label(output, guest["windows"])
        if any(w.sources is not None for w in output.windows):
            try:
                symbolizer = symbols.for_boot(tdir / "kallsyms", kernel)
            except (symbols.SymbolError, OSError, subprocess.SubprocessError) as exc:
                raise TrafficError(f"the plugin's instruction addresses cannot be named: {exc}") from None
            attribute(output, symbolizer)
            named_by = {"source": symbolizer.source, "kaslr_slide": symbolizer.kaslr_slide}
    return TrafficRun(results, output, guest, device, pmem, elapsed, r, named_by)


def summary(t: TrafficRun) -> dict:
    """What a run found, as JSON: the model, the plugin's cost's inputs, each
    window: its counts under both fast-string rules, the device's bytes, its
    CPU time and its function table (compact())."""
    host = t.run.host_conditions
    # QEMU's own CPU time over the boot (lab.run's record of the host): the
    # plugin's cost is this with it against without it
    d = {"elapsed_s": round(t.elapsed_s, 1), "qemu_cpu_s": host.get("own_cpu_s"), "host": host.get("state"),
         "pmem_ramblock": vars(t.pmem), "device": t.device}
    if t.output:
        d["model"] = t.output.model
        d["end"] = t.output.end
        if t.symbols:
            d["symbols"] = t.symbols
        d["windows"] = [window_summary(w) for w in t.output.windows]
    return d


SUMMARY = "traffic-summary.json"


def write_summary(results: Path, s: dict) -> Path:
    """A run's summary as results/traffic-summary.json: one line a window
    (a boot's summary is read by programs; its windows' function tables
    make it long)."""
    head = {k: v for k, v in s.items() if k != "windows"}
    text = json.dumps(head, indent=1)
    if "windows" in s:
        rows = ",\n".join(json.dumps(w, separators=(",", ":")) for w in s["windows"])
        text = text[:-2] + f',\n "windows": [\n{rows}\n ]\n}}'
    path = results / SUMMARY
    path.write_text(text + "\n")
    return path


def window_summary(w: Window) -> dict:
    out = {"label": w.label, "cpu_s": w.cpu_s}
    if w.counts is None:         # model=0: the window's time only
        return out
    out.update(counts=w.counts, pmem_device_bytes=w.device_bytes(), pmem_offsets=w.pmem_offsets)
    if w.counts_fast_string_no_rfo is not None:
        out.update(counts_fast_string_no_rfo=w.counts_fast_string_no_rfo,
                   pmem_device_bytes_fast_string_no_rfo=w.device_bytes(rule="counts_fast_string_no_rfo"))
    if w.plan.get("pages"):
        out.update(pages=w.plan["pages"], pmem_device_bytes_per_page={
            k: round(v / w.plan["pages"], 2) for k, v in w.device_bytes().items()})
    if w.functions is not None:
        out["functions"] = w.functions
    return out


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.traffic.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="results directory")
    ap.add_argument("--no-plugin", action="store_true", help="the same boot without the plugin (its cost)")
    ap.add_argument("--steps", default="", help="and these of guest-traffic.sh's steps, comma-separated: "
                    "memmap (namespace rebinds, fsdax and devdax), demotion (64 MiB reclaimed to node 1)")
    ap.add_argument("--kernel", metavar="VARIANT", help="a lab kernel (kernel_build.py), default the stock one")
    for k, v in DEFAULT_GEOMETRY.items():
        ap.add_argument(f"--{k}", type=int, default=v, help=f"model geometry (default {v})")
    args = ap.parse_args(argv)
    try:
        kernel = None
        if args.kernel:
            from lab import kernel_build
            kernel = kernel_build.build(kernel_build.variant(args.kernel))
        t = run(Path(args.out), plugin=not args.no_plugin, steps=tuple(x for x in args.steps.split(",") if x), kernel=kernel,
                geometry={k: getattr(args, k) for k in DEFAULT_GEOMETRY})
    except ValueError as exc:
        print(f"lab.traffic.run: {exc}", file=sys.stderr)
        return 2
    except (TrafficError, lab.LabError, tbuild.BuildError, AssertionError) as exc:
        print(f"lab.traffic.run: {exc}", file=sys.stderr)
        return 1
    s = summary(t)
    write_summary(Path(args.out), s)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
