# SPDX-License-Identifier: Apache-2.0
"""The traffic plugin's cost on a lab boot: the stock guest booted with the
scenarios given (default lab.ab's memmap set), on lab.ab's measuring CPU
(one vCPU, icount), once without the plugin and once with it loaded and no
window opened (what every instrumented boot pays outside its windows).
The figure is QEMU's own CPU time over the boot (lab.run's record of the
host, `own_cpu_s`), which a loaded host changes less than the wall time;
both are written, with how loaded the host was.

    python3 -m lab.traffic.cost OUT [--scenarios memmap]
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from lab import ab, lab
from lab.traffic import build as tbuild
from lab.traffic import run as trun


def boot(results: Path, scenarios: list[str], plugin: bool) -> dict:
    spec = None
    if plugin:
        built = tbuild.build()
        nvdimm = results / "ramblock-nvdimm.img"
        results.mkdir(parents=True, exist_ok=True)
        with open(nvdimm, "wb") as f:
            f.truncate(2 << 30)
        try:
            cmd = lab.qemu_command(lab.image(), results, nvdimm, 0, "", cpu=trun.CPU)
            pmem = trun.pmem_range(trun.query_ramblocks(cmd))
        finally:
            nvdimm.unlink(missing_ok=True)
        spec = trun.plugin_spec(built.plugin, results / "plugin.jsonl", pmem, trun.DEFAULT_GEOMETRY)
    r = lab.run(results, scenarios=scenarios, cpu=trun.CPU, plugin=spec)
    h = r.host_conditions
    return {"plugin": plugin, "qemu_cpu_s": h.get("own_cpu_s"), "wall_s": round(r.elapsed_s, 1),
            "host": h.get("state"), "others_share": h.get("others_share"), "loadavg_start": h.get("loadavg_start")}


def run_record(argv: list[str], commit: str, started: str) -> dict:
    """How the run is named and repeated, as lab.ab records it: the command,
    when it ran, the machine, the commit at its start (and at its end when
    the tree changed)."""
    from nttrace.kernel import conditions
    return {"command": "python3 -m lab.traffic.cost " + " ".join(argv), "date": started[:10], "started": started,
            "finished": time.strftime("%F %T"), "machine": conditions.cpu_policy()["cpu"], "cpus": os.cpu_count(),
            "commit": ab.run_commit(commit)}


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.traffic.cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--scenarios", default="memmap", help="as lab.ab takes them (default memmap)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    scenarios = ab.scenarios_of(args.scenarios)
    commit, started = ab.checkout_commit(), time.strftime("%F %T")
    try:
        rows = [boot(out / "without", scenarios, False), boot(out / "with", scenarios, True)]
    except (lab.LabError, trun.TrafficError, tbuild.BuildError) as exc:
        print(f"lab.traffic.cost: {exc}", file=sys.stderr)
        return 1
    ratio = rows[1]["qemu_cpu_s"] / rows[0]["qemu_cpu_s"] if rows[0]["qemu_cpu_s"] else None
    result = {"scenarios": scenarios, "cpu": trun.CPU.describe(), "boots": rows,
              "qemu_cpu_ratio": round(ratio, 3) if ratio else None, **run_record(argv, commit, started)}
    (out / "cost.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
