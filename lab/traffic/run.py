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

PMEM_BLOCK = "nv0"     # lab.qemu_command's NVDIMM backend (memory-backend-file id=nv0)
LINE = 64
# The LLC a server has (geometry of the model's defaults: 32 MiB, 16 ways,
# 64-byte lines; 10 write-combining buffers, as Intel cores have fill buffers).
DEFAULT_GEOMETRY = {"llc": 32 << 20, "ways": 16, "line": 64, "wc": 10}
# A guest whose clock counts instructions, one vCPU: lab.ab's measuring guest.
CPU = lab.MEASURE_CPU
APPEND = "nttrace.traffic"
STEPS = ("memmap", "demotion")      # guest-traffic.sh's optional steps


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
    counts: dict[str, dict[str, int]]
    pmem_offsets: dict[str, int] | None
    io_accesses: int
    closed_by: str
    label: str = ""
    plan: dict = field(default_factory=dict)

    def device_bytes(self, target: str = "pmem", line: int = LINE) -> dict[str, int]:
        """Bytes the target moved: read (every fill, load or RFO, reads its
        line) and written (write-backs, full NT lines, partial NT bytes)."""
        c = self.counts[target]
        return {"read": (c["fills_load"] + c["fills_store"]) * line,
                "written": (c["writebacks"] + c["nt_line_writes"]) * line + c["nt_partial_bytes"]}


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
            windows.append(Window(rec["window"], rec["counts"], rec.get("pmem_offsets"), rec["io_accesses"],
                                  rec["closed_by"]))
        elif rec.get("end"):
            end = rec
        else:
            raise TrafficError(f"an unknown line in the plugin's output: {rec}")
    if [w.index for w in windows] != list(range(len(windows))):
        raise TrafficError(f"windows out of order: {[w.index for w in windows]}")
    return Output(head["model"], head["pmem_ramblock"], windows, end)


def label(out: Output, plan: list[dict]) -> None:
    """Names each window by the guest's own account of it (in order)."""
    if len(plan) != len(out.windows):
        raise TrafficError(f"the guest ran {len(plan)} windows, the plugin saw {len(out.windows)}")
    for w, p in zip(out.windows, plan):
        w.label, w.plan = p["label"], p


# -- first principles -----------------------------------------------------------
def expected_pmem(label_: str, nbytes: int, line: int = LINE) -> dict[str, int]:
    """What the pmem device must see for the traffic guest's copies, from
    first principles (8-byte loads and stores; the LLC empty at the open, the
    copy smaller than it, dirty lines written back at the close):
      cached copy (nt_copy_movq_unrolled): every source line filled by a
      load, every destination line filled by its first store (the read for
      ownership) and written back;
      NT copy (nt_copy_generic): every source line filled, no destination
      fill, every destination line written once, whole, from a WC buffer; the
      routine loads its last source word once more, before the body (its
      tail), so it makes one load more than it has words, and no fill more."""
    lines, words = nbytes // line, nbytes // 8
    pm_src = label_.endswith("pmem_pmem")
    if label_.startswith("cached_"):
        src = {"loads": words, "fills_load": lines} if pm_src else {"loads": 0, "fills_load": 0}
        return {**src, "stores": words, "nt_stores": 0, "fills_store": lines, "writebacks": lines,
                "nt_line_writes": 0, "nt_partial_writes": 0, "nt_partial_bytes": 0, "nt_invalidates": 0}
    if label_.startswith("nt_"):
        src = {"loads": words + 1, "fills_load": lines} if pm_src else {"loads": 0, "fills_load": 0}
        return {**src, "stores": 0, "nt_stores": words, "fills_store": 0, "writebacks": 0,
                "nt_line_writes": lines, "nt_partial_writes": 0, "nt_partial_bytes": 0, "nt_invalidates": 0}
    raise ValueError(f"no first-principles counts for {label_}")


COPIES = ("cached_pmem_pmem", "nt_pmem_pmem", "cached_dram_pmem", "nt_dram_pmem")


def first_principles_mismatches(out: Output) -> list[str]:
    """'window field: counted N, expected M' for each pmem count of the
    copies that is not what first principles give (writebacks_at_close is
    not asserted: how many of the write-backs wait for the close depends on
    what else the window brought into the LLC); and for a DRAM source, the
    DRAM side must have read at least the source's lines."""
    bad = []
    for w in out.windows:
        if w.label not in COPIES:
            continue
        want = expected_pmem(w.label, w.plan["bytes"])
        for k, v in want.items():
            if w.counts["pmem"][k] != v:
                bad.append(f"{w.label} pmem {k}: counted {w.counts['pmem'][k]}, expected {v}")
        if "_dram_" in w.label and w.counts["dram"]["fills_load"] < w.plan["bytes"] // LINE:
            bad.append(f"{w.label} dram fills_load: {w.counts['dram']['fills_load']} < the source's lines")
    if [w.label for w in out.windows if w.label in COPIES] != list(COPIES):
        bad.append(f"the copies' windows are not all there: {[w.label for w in out.windows]}")
    return bad


def aa_differences(a: Output, b: Output) -> list[str]:
    """What two runs of one kernel counted differently on the device, window
    by window ('window field: A, B'). The DRAM counts are not compared: a
    window holds whatever the kernel did in it too (interrupts, timers),
    and under icount with sleep=on when that work comes follows the host's
    I/O; nor is writebacks_at_close, which of the write-backs wait for the
    close, since the kernel's DRAM lines in the LLC decide that."""
    if len(a.windows) != len(b.windows):
        return [f"{len(a.windows)} windows against {len(b.windows)}"]
    out = []
    for wa, wb in zip(a.windows, b.windows):
        for k, v in wa.counts["pmem"].items():
            if k != "writebacks_at_close" and wb.counts["pmem"][k] != v:
                out.append(f"{wa.label or wa.index} {k}: {v}, {wb.counts['pmem'][k]}")
    return out


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

    def window(self, label_: str) -> Window:
        assert self.output is not None
        for w in self.output.windows:
            if w.label == label_:
                return w
        raise KeyError(label_)


def plugin_spec(plugin: Path, out: Path, pmem: RamBlock, geometry: dict) -> str:
    return (f"{plugin},out={out},pmem={pmem.offset:#x}:{pmem.total:#x},mttcg=0,"
            + ",".join(f"{k}={v}" for k, v in geometry.items()))


def run(results: Path, plugin: bool = True, geometry: dict | None = None, kernel=None,
        timeout: float = 1800, steps: tuple[str, ...] = ()) -> TrafficRun:
    """One boot of the traffic guest (one vCPU, icount), under the plugin
    unless plugin=False (the cost's baseline); `steps`: and these of
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
    spec = plugin_spec(built.plugin, out_path, pmem, {**DEFAULT_GEOMETRY, **(geometry or {})}) if plugin else None
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
    output = None
    if plugin:
        output = parse_output(out_path.read_text())
        label(output, guest["windows"])
    return TrafficRun(results, output, guest, device, pmem, elapsed, r)


def summary(t: TrafficRun) -> dict:
    """What a run found, as JSON: the model, the plugin's cost's inputs, each window."""
    host = t.run.host_conditions
    # QEMU's own CPU time over the boot (lab.run's record of the host): the
    # plugin's cost is this with it against without it
    d = {"elapsed_s": round(t.elapsed_s, 1), "qemu_cpu_s": host.get("own_cpu_s"), "host": host.get("state"),
         "pmem_ramblock": vars(t.pmem), "device": t.device}
    if t.output:
        d["model"] = t.output.model
        d["end"] = t.output.end
        d["windows"] = [{"label": w.label, "counts": w.counts, "pmem_device_bytes": w.device_bytes(),
                         "pmem_offsets": w.pmem_offsets,
                         **({"pages": w.plan["pages"], "pmem_device_bytes_per_page":
                             {k: round(v / w.plan["pages"], 2) for k, v in w.device_bytes().items()}}
                            if w.plan.get("pages") else {})} for w in t.output.windows]
    return d


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
    (Path(args.out) / "traffic-summary.json").write_text(json.dumps(s, indent=1))
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
