"""`nttrace bench overhead`: what the probes cost the work they observe.

The work: migrate_pages() moving pages, one of two ways, each the workload a
probe declares (nttrace.probes.exercise: the migrate probe's and the copy probe's).
* compaction (any host): each measurement fragments a scratch mapping
  (untimed), then times the write to /proc/sys/vm/compact_memory, which
  compacts every zone in the writing task before it returns, and divides the
  pages migrated (/proc/vmstat pgmigrate_success) by that time.
* demotion (a host with a lower memory tier and cgroup v2: the lab's
  guest): a scratch cgroup's process touches its memory (untimed), then
  `memory.reclaim` of all of it is timed; pages are the pgdemote_* delta.
  The default probe set is then the one `validate --demote` uses.
Rounds interleave the two conditions,
"probes" (the daemon's default probe set attached) and "none", in
alternating order, so drift in the machine's speed falls on both; the report
gives each round's throughputs and their ratio, and the medians.
"""
from __future__ import annotations

import json
import statistics
import sys

from nttrace.errors import EXIT_OK, CapabilityError
from nttrace.probes import DEFAULT, by_role, demotion_probes
from nttrace.workloads import demotion


def _compaction(scratch_mib: int) -> tuple[int, float]:
    """(pages migrated, seconds of the compact_memory write) of one compaction of a fragmented scratch mapping."""
    run = by_role("migrations").exercise.run(scratch_mib, settle_s=0)
    return run["pgmigrate_success"], run["compact_s"]


def _demotion(scratch_mib: int) -> tuple[int, float]:
    """(pages demoted, seconds of the memory.reclaim write) of one scratch demotion."""
    run = by_role("page copies").exercise.run(scratch_mib)
    return run["pgdemote"], run["reclaim_s"]


WORKS = {"compaction": _compaction, "demotion": _demotion}
WARMUP = {"compaction": 0, "demotion": 1}   # untimed runs a condition, by default (run())


def _condition(one, n: int, scratch_mib: int, warmup: int) -> dict:
    """`warmup` untimed runs of the work, then n timed ones."""
    for _ in range(warmup):
        one(scratch_mib)
    runs = [one(scratch_mib) for _ in range(n)]
    pages, seconds = sum(r[0] for r in runs), sum(r[1] for r in runs)
    return {"pages": int(pages), "seconds": seconds, "pages_per_s": pages / seconds if seconds else None,
            "runs": [[int(p), s] for p, s in runs]}


def usable(work: str, caps) -> None:
    """Raise CapabilityError when this host cannot do the work."""
    if work == "demotion":
        if not caps["numa:tiers"].available:
            raise CapabilityError(f"bench overhead --work demotion: no lower memory tier ({caps['numa:tiers'].detail})")
        try:
            demotion.cgroup2_root()
        except demotion.DemotionUnavailable as exc:
            raise CapabilityError(f"bench overhead --work demotion: {exc}") from None


def run(rounds: int = 7, per_round: int = 3, scratch_mib: int = 256, probes: list[str] | None = None,
        aa: bool = False, work: str = "compaction", warmup: int | None = None) -> dict:
    """aa: both conditions without probes (an A/A run): the ratios' spread
    is the method's noise floor on this host. warmup: untimed runs at the
    start of each condition, after the probes attach or detach, so that what
    attaching costs once (text patching, the kernel's deferred freeing of
    the last condition's programs) falls outside the timing. Default: 1 for
    demotion (in the lab's TCG guest, demotions timed right after a detach
    and a new attach took 4x as long, in 5 of 6 such rounds); 0 for
    compaction, the method its figures in BENCHMARKS.md were taken with (a
    compaction also changes what the next one finds to move)."""
    if warmup is None:
        warmup = WARMUP[work]
    from nttrace.probes import capabilities
    from nttrace.probes.tracer import Tracer
    caps = capabilities.report()
    usable(work, caps)
    if not probes and work == "demotion":
        probes = demotion_probes(caps)
    probes = [] if aa else (probes or list(DEFAULT))
    one = WORKS[work]
    one(scratch_mib)   # warm-up, not counted: the first compaction after a while moves far more
    out_rounds = []
    attached: dict = {}
    for r in range(rounds):
        order = ["probes", "none"] if r % 2 == 0 else ["none", "probes"]
        row: dict = {"order": order}
        for cond in order:
            if cond == "probes" and probes:
                with Tracer(probes, caps=caps) as t:
                    attached = {n: s.get("via", s.get("reason")) for n, s in t.status.items()}
                    row[cond] = _condition(one, per_round, scratch_mib, warmup)
            else:
                row[cond] = _condition(one, per_round, scratch_mib, warmup)
        a, b = row["probes"]["pages_per_s"], row["none"]["pages_per_s"]
        row["ratio"] = a / b if a and b else None
        out_rounds.append(row)

    def med(key):
        vals = [x[key]["pages_per_s"] for x in out_rounds if x[key]["pages_per_s"]]
        return statistics.median(vals) if vals else None
    ratios = [x["ratio"] for x in out_rounds if x["ratio"]]
    ratio = statistics.median(ratios) if ratios else None
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else None
    workload = (f"compaction of a fragmented {scratch_mib} MiB scratch mapping, {per_round} per condition and round, "
                "timed around the compact_memory write" if work == "compaction" else
                f"demotion of a {scratch_mib} MiB scratch cgroup by memory.reclaim, {per_round} per condition and round, "
                "timed around the memory.reclaim write; pages from pgdemote_*")
    workload += f"; {warmup} untimed at the start of each condition"
    return {"work": work, "workload": workload,
            "aa": aa, "warmup": warmup,
            "probes": probes, "attached": attached, "rounds": out_rounds,
            "median_pages_per_s": {"probes": med("probes"), "none": med("none")},
            "median_ratio": ratio, "ratio_quartiles": quartiles,
            "slowdown_pct": (100.0 * (1 - ratio)) if ratio else None}


def main(args) -> int:
    report = run(rounds=args.rounds, per_round=args.per_round, scratch_mib=args.scratch_mib, aa=args.aa,
                 work=args.work, warmup=args.warmup)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return EXIT_OK
    print(f"workload: {report['workload']}")
    print("A/A: no probes in either condition (the method's noise floor)" if report["aa"] else
          f"probes attached: {', '.join(f'{k} ({v})' for k, v in report['attached'].items())}")
    for i, row in enumerate(report["rounds"]):
        cells = "  ".join(f"{c} {row[c]['pages_per_s']:,.0f} pages/s" for c in row["order"])
        print(f"  round {i + 1}: {cells}  probes/none {row['ratio']:.3f}" if row["ratio"] else f"  round {i + 1}: {cells}")
    m = report["median_pages_per_s"]
    if report["median_ratio"]:
        q = report["ratio_quartiles"]
        spread = f", quartiles {q[0]:.3f}..{q[2]:.3f}" if q else ""
        print(f"median: probes {m['probes']:,.0f}, none {m['none']:,.0f} pages/s; per-round ratio probes/none "
              f"{report['median_ratio']:.3f}{spread} ({report['slowdown_pct']:+.1f}% slower with the probes)")
    return EXIT_OK
