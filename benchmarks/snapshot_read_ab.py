# SPDX-License-Identifier: Apache-2.0
"""A/B of how a migrate snapshot reads its maps: through the descriptors a
loader handed over (bpf(2) by ctypes, as the daemon reads them) against
bcc's tables (as `nttrace trace` reads them). One process holds both sets of
programs, attached to the same tracepoints, so both count the same
compaction; prints us per snapshot per round and checks the counts agree.

    .venv/bin/python benchmarks/snapshot_read_ab.py --rounds 5 [--json FILE]
"""
import argparse
import json
import os
import platform
import time

from nttrace.ab import statistics
from nttrace.ab.text import shift_line
from nttrace.daemon import loader
from nttrace.workloads import triggers
from nttrace.capabilities.report import Capability
from nttrace.kernel.metadata import KernelMetadata
from nttrace.probes.migrate import MigrateProbe
from nttrace.tracing.tracer import Tracer

NAME = MigrateProbe.name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--snapshots", type=int, default=200)
    ap.add_argument("--json", help="write the rounds to this raw file for BENCHMARKS.md")
    args = ap.parse_args()
    opts = {NAME: {"records": False}}
    loaded = loader.load([NAME], opts)
    caps = {k: Capability.from_json(v) for k, v in loaded.caps.items()}
    meta = KernelMetadata.from_json(loaded.meta)
    readers = {
        "handover": Tracer([NAME], opts, caps=caps, meta=meta, handle_signals=False).attach(handed=loaded.probes),
        "bcc": Tracer([NAME], opts, caps=caps, meta=meta, handle_signals=False).attach(),
    }
    try:
        triggers.compaction(32)
        per = {name: [] for name in readers}
        for r in range(args.rounds):
            for name in (list(readers) if r % 2 == 0 else list(readers)[::-1]):
                t0 = time.perf_counter()
                for _ in range(args.snapshots):
                    readers[name].snapshot()
                per[name].append((time.perf_counter() - t0) / args.snapshots * 1e6)
        rows = {name: [(x["mode"], x["reason"], x["calls"], x["succeeded"]) for x in t.snapshot()[NAME]["rows"]]
                for name, t in readers.items()}
        assert rows["handover"] == rows["bcc"], rows
        for name, us in per.items():
            print(f"{name:9} us/snapshot {' '.join(f'{u:.0f}' for u in us)}")
        print(shift_line("bcc", per["bcc"], "handover", per["handover"], " us"))
        print(f"same rows: {rows['bcc']}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"command": "benchmarks/snapshot_read_ab.py --rounds %d --snapshots %d" % (args.rounds, args.snapshots),
                           "taken": time.strftime("%F %T UTC", time.gmtime()),
                           "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
                           "us_per_snapshot": per, "rows": rows["bcc"],
                           "handover_against_bcc": statistics.shift(per["bcc"], per["handover"])}, f, indent=1)
    finally:
        for t in readers.values():
            t.detach()
        loaded.close()   # what the handover Tracer did not take


if __name__ == "__main__":
    main()
