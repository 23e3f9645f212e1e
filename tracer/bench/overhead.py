# SPDX-License-Identifier: Apache-2.0
"""`nttrace bench overhead`: what the probes cost the work they observe.

The work: migrate_pages() moving pages, one of two ways, each the workload a
probe declares (nttrace.probe_framework.exercise: the migrate probe's and the copy probe's).
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

--method counted (counted()) measures instead what the kernel counts:
each program's run time per run with run-time statistics on
(nttrace.kernel.bpf_stats), plus the entry cost of its attach type, times
its runs, as a share of the workload's CPU time; with --cross-check, the
A/B and A/A above beside it, and whether they could resolve it.
"""
from __future__ import annotations

import json
import statistics
import sys

from nttrace.errors import EXIT_OK, CapabilityError, UsageError
from nttrace.probes import DEFAULT, demotion_probes
from nttrace.probes.copy import CopyProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.workloads import demotion


def _compaction(scratch_mib: int) -> tuple[int, float]:
    """(pages migrated, seconds of the compact_memory write) of one compaction of a fragmented scratch mapping."""
    run = MigrateProbe.exercise.run(scratch_mib, settle_s=0)
    return run["pgmigrate_success"], run["compact_s"]


def _demotion(scratch_mib: int) -> tuple[int, float]:
    """(pages demoted, seconds of the memory.reclaim write) of one scratch demotion."""
    run = CopyProbe.exercise.run(scratch_mib)
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
    compaction, the method its figures were taken with (a3f1339's BENCHMARKS.md; a
    compaction also changes what the next one finds to move)."""
    if warmup is None:
        warmup = WARMUP[work]
    from nttrace.capabilities import report as capabilities
    from nttrace.tracing.tracer import Tracer
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
    if getattr(args, "method", "ab") == "counted":
        if args.work != "compaction" or args.aa:
            raise UsageError("--method counted measures compaction with the probes attached: no --work demotion, no --aa")
        report = counted(runs=args.rounds * args.per_round, scratch_mib=args.scratch_mib,
                         cross_check_rounds=args.cross_check)
        if args.json:
            json.dump(report, sys.stdout, indent=2)
            print()
        else:
            print_counted(report)
        return EXIT_OK
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


# -- the counted method ----------------------------------------------------------
def _entry_cost(probe_cls, events: int, max_s: float) -> dict:
    """The empty reference program (bpf/bench_baseline.bpf.c) attached alone
    to the probe's tracepoints under its workload: its counted ns per run is
    what running any program there costs before the program's own work."""
    from nttrace import bpf as sources
    from nttrace.bench import probes as bench_probes
    tps = [f"{system}:{event}" for system, event in probe_cls.tracepoints]
    m = bench_probes.program_alone(sources.source("bench_baseline.bpf.c"),
                                   [(tp, bench_probes.REFERENCES["empty"]) for tp in tps],
                                   probe_cls.exercise.bench_round, events, max_s)
    return {"attach": "tracepoint", "ns_per_event": m["ns_per_event"], "programs": m["programs"]}


def counted(runs: int = 21, scratch_mib: int = 256, probes: list[str] | None = None,
            entry_events: int = 2000, cross_check_rounds: int = 0) -> dict:
    """Overhead as the kernel counts it: with the probes attached and
    run-time statistics on, each compaction's Δrun_time_ns and Δrun_cnt per
    program; each program's cost per run plus the entry cost of its attach
    type (the empty program's, measured alone first), times its runs, as a
    share of the compact_memory write's CPU time (the compacting thread's).
    cross_check_rounds: also the interleaved A/B and A/A (run()) with that
    many rounds, to say whether they can resolve the counted share."""
    from nttrace.kernel import bpf_stats
    from nttrace.tracing.tracer import Tracer
    probes = probes or list(DEFAULT)
    with bpf_stats.enable() as hold:
        held = hold.method or "another holder (the sysctl on)"
        if not hold.on and bpf_stats.sysctl_value() != 1:
            raise CapabilityError(f"bench overhead --method counted: BPF run-time statistics are off and "
                                  f"cannot be turned on ({hold.reason})")
        entry = _entry_cost(MigrateProbe, entry_events, 120.0)
        per_run = []
        with Tracer(probes) as t:
            attached = {n: s.get("via", s.get("reason")) for n, s in t.status.items()}
            MigrateProbe.exercise.run(scratch_mib, settle_s=0)     # warm-up, as run() does
            for _ in range(runs):
                before = t.program_stats()
                w = MigrateProbe.exercise.run(scratch_mib, settle_s=0)
                after = t.program_stats()
                progs = {}
                for probe, fns in after.items():
                    for fn, st in fns.items():
                        b = before.get(probe, {}).get(fn)
                        dn, dc = st.run_time_ns - (b.run_time_ns if b else 0), st.run_cnt - (b.run_cnt if b else 0)
                        progs[f"{probe}/{fn}"] = {"run_time_ns": dn, "run_cnt": dc}
                per_run.append({"pages": w["pgmigrate_success"], "compact_s": w["compact_s"],
                                "compact_cpu_s": w["compact_cpu_s"], "programs": progs})
    entry_ns = entry["ns_per_event"] or 0.0
    names = sorted({k for r in per_run for k in r["programs"]})
    totals = {k: {"run_time_ns": sum(r["programs"].get(k, {}).get("run_time_ns", 0) for r in per_run),
                  "run_cnt": sum(r["programs"].get(k, {}).get("run_cnt", 0) for r in per_run)} for k in names}
    for v in totals.values():
        v["ns_per_run"] = v["run_time_ns"] / v["run_cnt"] if v["run_cnt"] else None
        v["with_entry_ns"] = (v["ns_per_run"] + entry_ns) if v["ns_per_run"] is not None else None
    shares = []
    for r in per_run:
        cost = sum(p["run_time_ns"] + p["run_cnt"] * entry_ns for p in r["programs"].values())
        r["cost_ns"] = cost
        r["share_pct"] = 100.0 * cost / (r["compact_cpu_s"] * 1e9) if r["compact_cpu_s"] > 0 else None
        if r["share_pct"] is not None:
            shares.append(r["share_pct"])
    cpu_s = sum(r["compact_cpu_s"] for r in per_run)
    wall_s = sum(r["compact_s"] for r in per_run)
    cost_ns = sum(r["cost_ns"] for r in per_run)
    runs_total = sum(v["run_cnt"] for v in totals.values())
    done = [k for k in names if k.endswith(MigrateProbe.programs[-1][2])]
    calls = sum(totals[k]["run_cnt"] for k in done) if done else None
    out = {"method": "counted", "probes": probes, "attached": attached, "stats": held,
           "workload": f"compaction of a fragmented {scratch_mib} MiB scratch mapping, {runs} runs, the probes "
                       "attached throughout; CPU time is the compacting thread's over the compact_memory write",
           "entry_cost": entry, "runs": per_run, "programs": totals,
           "events_per_s": runs_total / wall_s if wall_s else None,
           "calls_per_s": calls / wall_s if calls and wall_s else None,
           "ns_per_call": cost_ns / calls if calls else None,
           "cost_per_s_us": cost_ns / wall_s / 1e3 if wall_s else None,
           "share_pct": 100.0 * cost_ns / (cpu_s * 1e9) if cpu_s else None,
           "share_pct_per_run": {"median": statistics.median(shares), "min": min(shares), "max": max(shares)}
           if shares else None}
    if cross_check_rounds:
        ab = run(rounds=cross_check_rounds, scratch_mib=scratch_mib, probes=probes)
        aa = run(rounds=cross_check_rounds, scratch_mib=scratch_mib, aa=True)
        q = aa["ratio_quartiles"]
        floor_pct = 100.0 * (q[2] - q[0]) / 2 if q else None
        out["cross_check"] = {"ab": ab, "aa": aa, "aa_half_iqr_pct": floor_pct,
                              "resolvable": bool(floor_pct is not None and out["share_pct"] is not None
                                                 and out["share_pct"] > floor_pct)}
    return out


def print_counted(r: dict) -> None:
    print(f"workload: {r['workload']}")
    print(f"probes attached: {', '.join(f'{k} ({v})' for k, v in r['attached'].items())}; statistics by {r['stats']}")
    e = r["entry_cost"]
    print(f"entry cost of a {e['attach']} program (the empty program alone): {e['ns_per_event']:.0f} ns/run")
    for name, p in r["programs"].items():
        per = "-" if p["ns_per_run"] is None else f"{p['ns_per_run']:.0f} ns/run, {p['with_entry_ns']:.0f} with entry"
        print(f"  {name:<36} runs {p['run_cnt']:>8}  {per}")
    if r["share_pct"] is not None:
        s = r["share_pct_per_run"]
        print(f"{r['ns_per_call']:.0f} ns per migrate_pages() call at {r['calls_per_s']:,.0f} calls/s "
              f"({r['events_per_s']:,.0f} program runs/s): {r['cost_per_s_us']:,.0f} us of CPU a second, "
              f"{r['share_pct']:.3f}% of the workload's CPU time (per run {s['min']:.3f}..{s['max']:.3f}%, "
              f"median {s['median']:.3f}%, n={len(r['runs'])})")
    c = r.get("cross_check")
    if c:
        print(f"cross-check, interleaved A/B: {c['ab']['slowdown_pct']:+.1f}% slower with the probes; the A/A's "
              f"half interquartile range {c['aa_half_iqr_pct']:.1f}%: "
              + ("resolves" if c["resolvable"] else "cannot resolve") + f" a {r['share_pct']:.3f}% overhead")
