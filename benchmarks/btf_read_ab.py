# SPDX-License-Identifier: Apache-2.0
"""A/B of reading the kernel's BTF for what a `nttrace validate` asks of it:
the reader as it was at REV (every type parsed into Python objects up front)
against the current one (one walk over the type section, a type decoded when
a query reaches it), with the floor beside them (reading the file and its
header, nothing decoded). Rounds alternate the order; each reads the file
anew (from the page cache) and asks the same questions: kernel metadata's
enums and offsets, the copy probe's folio layout, migrate_pages' parameters.
Also the memory each holds afterwards (tracemalloc).

    .venv/bin/python benchmarks/btf_read_ab.py --before daf412f --rounds 7 [--json FILE]
"""
import argparse
import gc
import importlib.util
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from nttrace.ab import statistics
from nttrace.ab.text import shift_line
from nttrace.kernel import btf as current
from nttrace.kernel import metadata
from nttrace.probes.copy import CopyProbe

REPO = Path(__file__).resolve().parents[1]
PATH = Path("/sys/kernel/btf/vmlinux")


def _module_at(rev: str):
    text = subprocess.run(["git", "show", f"{rev}:tracer/kernel/btf.py"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout
    f = Path(tempfile.mkdtemp()) / "btf_before.py"
    f.write_text(text)
    spec = importlib.util.spec_from_file_location("btf_before", f)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["btf_before"] = mod   # its dataclass looks itself up there
    spec.loader.exec_module(mod)
    return mod


def ask(mod) -> tuple:
    """What validate's metadata and probes ask of BTF; the answers, to compare."""
    b = mod.Btf.from_file(PATH)
    params = b.func_params("migrate_pages") if b.has_func("migrate_pages") else []
    return b, (metadata.facts_from_btf(b), CopyProbe.folio_layout(b), params, b.struct_size("page"))


def floor(_mod=None) -> tuple:
    data = PATH.read_bytes()
    return None, struct.unpack_from("<HBBI", data, 0)


def held_mib(fn, mod) -> float:
    gc.collect()
    tracemalloc.start()
    kept = fn(mod)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return round(size / 2**20, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="commit whose tracer/kernel/btf.py is 'before'")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the rounds to this raw file for BENCHMARKS.md")
    args = ap.parse_args()
    before = _module_at(args.before)
    sides = {"before": (ask, before), "after": (ask, current), "floor": (floor, None)}
    answers = {name: ask(mod)[1] for name, (fn, mod) in sides.items() if fn is ask}
    assert answers["before"] == answers["after"], "the two readers disagree"
    per = {name: [] for name in sides}
    for r in range(args.rounds):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            fn, mod = sides[name]
            gc.collect()
            t0 = time.perf_counter()
            fn(mod)
            per[name].append(round(time.perf_counter() - t0, 4))
    memory = {name: held_mib(fn, mod) for name, (fn, mod) in sides.items()}
    types = len(current.Btf.from_file(PATH)._offs) - 1
    for name, s in per.items():
        print(f"{name:7} s {' '.join(f'{x:.3f}' for x in s)}  held {memory[name]} MiB")
    print(shift_line("before", per["before"], "after", per["after"], " s"))
    print(shift_line("floor", per["floor"], "after", per["after"], " s"))
    print("same answers from both readers")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": f"benchmarks/btf_read_ab.py --before {args.before} --rounds {args.rounds}",
                       "taken": time.strftime("%F %T UTC", time.gmtime()), "before": args.before,
                       "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": sys.version.split()[0]},
                       "btf_bytes": PATH.stat().st_size, "types": types,
                       "seconds": per, "held_mib": memory,
                       "after_against_before": statistics.shift(per["before"], per["after"])}, f, indent=1)


if __name__ == "__main__":
    main()
