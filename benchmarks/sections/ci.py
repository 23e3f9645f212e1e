# SPDX-License-Identifier: Apache-2.0
"""CI wall time: every benchmarks/ci-*.json, one row each (newest first),
the cached runs as a ratio to the newest cold run on their machine. A new run is a new raw file
(`python3 benchmarks/ci_run.py [--cold] --json benchmarks/ci-COLD|CACHED-MACHINE-DATE-COMMIT.json`),
nothing else."""
from __future__ import annotations

from pathlib import Path

from ._format import machine, mmss

RUNS = {p.stem: p.name for p in sorted(Path(__file__).resolve().parents[1].glob("ci-*.json"))}


def _built_in(run: dict) -> dict:
    """The kernels a CI run built itself (the others came from the cache)."""
    return {name: k for name, k in run.get("kernels", {}).items() if k["built_at"] >= run["started"]}


def _started(run: dict) -> str:
    return run.get("started") or run["read"]


def ci_runs(raw: dict) -> str:
    runs = sorted(raw.values(), key=_started, reverse=True)
    rows = ["| started (UTC) | machine | commit | caches | wall time | pytest | kernels built beside the tests: "
            "base / nt-v3 / nt-v2 | lab guests, summed |", "|---|---|---|---|--:|---|---|--:|"]
    for r in runs:
        if "started" not in r:      # CI's own run: its wall time and result only
            rows.append(f"| {r['read']} | {machine(r)} | {r['commit'][:7]} | unknown | **{mmss(r['wall_s'])}** | "
                        f"{r['result']} | not reported | not reported |")
            continue
        built = _built_in(r)
        kernels = " / ".join(mmss(built[k]["build_s"]) if k in built else "cached" for k in ("base", "nt-v3", "nt-v2"))
        guests = mmss(sum(r["guests_s"].values())) if "guests_s" in r else "not recorded"
        rows.append(f"| {r['started'][:16]} | {machine(r)} | {r['commit'][:7]} | "
                    f"{'emptied first' if r['cold'] else 'warm'} | **{mmss(r['wall_s'])}** | "
                    f"{r['pytest'].split(' in ')[0]} | {kernels} | {guests} |")
    cached = [r for r in runs if "started" in r and not r["cold"]]
    ratios = []
    for r in cached:
        cold = next((c for c in runs if "started" in c and c["cold"] and machine(c) == machine(r)), None)
        if cold:
            ratios.append(f"{r['commit'][:7]} / {cold['commit'][:7]} on the {machine(r)}: "
                          f"x{r['wall_s'] / cold['wall_s']:.2f}")
    if ratios:
        rows += ["", "Cached / the newest cold run on the same machine: " + "; ".join(ratios) + "."]
    rows += ["", "One run each. Command: `CI=true bash .ci/run` on a fresh clone, through "
                 "`python3 benchmarks/ci_run.py [--cold] --json FILE` (`--cold` empties the lab's caches first)."]
    return "\n".join(rows)


BLOCKS = {"ci-runs": (ci_runs, RUNS)}
