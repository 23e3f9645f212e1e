# SPDX-License-Identifier: Apache-2.0
"""`nttrace bench probes`: what each probe's BPF programs cost per event,
from the kernel's own accounting (BPF run-time statistics: run_time_ns /
run_cnt per program, read with bpftool), while the probe's benchmark
workload (its Exercise's bench_round: compaction cycles for the migrate
tracepoints, memcg reclaims for vmscan, calls of the native memmap model for
the memmap program by uprobe) drives its attach points. Every probe gets a
row: measured, or unavailable with the reason (its attach points are not on
this host, or its workload needs hardware or changes system state). A
uprobe figure is the program's run time only, not the uprobe trap around it.

The migrate probe is measured in rounds, each attaching one thing at a time
to the same tracepoints under the same workload: the probe, an empty
program, and a program that only reads the clock (bpf/bench_baseline.bpf.c),
in an order that rotates from round to round. One at a time, because the
first program on a tracepoint pays for the caches the workload left cold and
any program after it runs warm: references attached beside the probe look
cheaper than they are. The clock-only program is the floor for a latency
probe, which must read the clock on every event; the ratio to it is the
figure that carries across noisy machines.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from nttrace.errors import EXIT_OK, CapabilityError
from nttrace.kernel import bpf_stats as kernel_bpf_stats

REFERENCES = {"empty": "nttrace_bench_empty", "clock_only": "nttrace_bench_ktime"}


def bpftool_progs() -> dict[int, dict]:
    try:
        out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CapabilityError(f"bpftool prog show failed: {exc}") from None
    return {p["id"]: p for p in json.loads(out or "[]")}


class bpf_stats:
    """Run-time statistics on for the block (nttrace.kernel.bpf_stats: the
    BPF_ENABLE_STATS descriptor, the sysctl only where the command is
    missing), let go after; CapabilityError where they cannot be turned on."""

    def __enter__(self):
        self.hold = kernel_bpf_stats.enable()
        if not self.hold.on:
            raise CapabilityError(f"cannot turn BPF run-time statistics on: {self.hold.reason}")
        return self

    def __exit__(self, *exc):
        self.hold.close()


def _drive(ids: set[int], drive, min_events: int, max_s: float, each: bool = True) -> tuple[int, list[dict]]:
    """Run the workload until every program in `ids` ran min_events times
    (each=False: until they ran min_events times together; for a probe whose
    programs watch events the workload need not cause, like kswapd's), or
    max_s passed; return the rounds and each program's counters."""
    deadline = time.monotonic() + max_s
    enough = min if each else sum
    rounds = 0
    while True:
        drive()
        rounds += 1
        now = bpftool_progs()
        if enough(now.get(i, {}).get("run_cnt", 0) for i in ids) >= min_events or time.monotonic() > deadline:
            break
    progs = []
    for i in sorted(ids):
        p = now.get(i, {})
        cnt, ns = p.get("run_cnt", 0), p.get("run_time_ns", 0)
        progs.append({"id": i, "name": p.get("name", str(i)), "run_cnt": cnt, "run_time_ns": ns,
                      "ns_per_event": (ns / cnt) if cnt else None})
    return rounds, progs


def _per_event(progs: list[dict]) -> float | None:
    cnt = sum(p["run_cnt"] for p in progs)
    return sum(p["run_time_ns"] for p in progs) / cnt if cnt else None


def _probe_alone(probe: str, options: dict, drive, min_events: int, max_s: float, each: bool = True) -> dict:
    from nttrace.tracing.tracer import Tracer
    before = set(bpftool_progs())
    t = Tracer([probe], options={probe: options})
    try:
        t.attach()
    except CapabilityError:  # alone, a probe that cannot attach leaves the tracer with nothing attached
        return {"status": "unavailable", "reason": t.status[probe].get("reason")}
    try:
        ours = set(bpftool_progs()) - before
        rounds, progs = _drive(ours, drive, min_events, max_s, each)
    finally:
        t.detach()
    return {"status": "measured", "workload_rounds": rounds, "programs": progs, "ns_per_event": _per_event(progs)}


def program_alone(text: str, attachments: list[tuple[str, str]], drive, min_events: int, max_s: float) -> dict:
    """Compile `text`, attach it alone ((tracepoint, function) pairs), and
    run the workload until each tracepoint saw min_events runs."""
    from nttrace.probe_framework.base import load_bpf
    before = set(bpftool_progs())
    b = load_bpf(text.encode())
    try:
        for tp, fn_name in attachments:
            b.attach_tracepoint(tp=tp, fn_name=fn_name)
        ids = set(bpftool_progs()) - before
        # bcc loads a function once for all its tracepoints: such a program
        # sees every tracepoint's events, and needs as many runs as separate
        # programs would together.
        rounds, progs = _drive(ids, drive, min_events * len(attachments) // max(1, len(ids)), max_s)
    finally:
        b.cleanup()
    return {"workload_rounds": rounds, "programs": progs, "ns_per_event": _per_event(progs)}


def migrate(rounds: int, events: int, max_s: float) -> dict:
    """The migrate probe against the references, one at a time per round."""
    from nttrace import bpf as sources
    from nttrace.probes.migrate import MigrateProbe
    baseline = sources.source("bench_baseline.bpf.c")
    drive = MigrateProbe.exercise.bench_round
    tracepoints = [f"{system}:{event}" for system, event in MigrateProbe.tracepoints]
    subjects = ["probe", *REFERENCES]
    per_round = []
    last_probe = None
    for r in range(rounds):
        order = subjects[r % len(subjects):] + subjects[:r % len(subjects)]
        row = {"order": order}
        for subject in order:
            if subject == "probe":
                m = _probe_alone(MigrateProbe.name, {}, drive, events, max_s)
                if m["status"] != "measured":
                    return m
                last_probe = m
            else:
                m = program_alone(baseline, [(tp, REFERENCES[subject]) for tp in tracepoints], drive, events, max_s)
            row[subject] = m["ns_per_event"]
            row[f"{subject}_programs"] = m["programs"]
        row["ratio_to_clock_only"] = row["probe"] / row["clock_only"] if row["probe"] and row["clock_only"] else None
        per_round.append(row)

    def median(key):
        values = [r[key] for r in per_round if r[key] is not None]
        return statistics.median(values) if values else None
    return {
        "status": "measured", "rounds": per_round, "events_per_subject": events,
        "programs": last_probe["programs"], "workload_rounds": last_probe["workload_rounds"],
        "ns_per_event": median("probe"),
        "reference_ns_per_event": {name: median(name) for name in REFERENCES},
        "ratio_to_clock_only": median("ratio_to_clock_only"),
    }


def alone(probe, events: int, max_s: float) -> dict:
    """A probe attached alone under its benchmark workload."""
    ex = probe.exercise
    if ex is None or ex.bench_round is None:
        return {"status": "unavailable", "reason": ex.no_bench if ex else "the probe declares no exercise"}
    m = _probe_alone(probe.name, ex.bench_options, ex.bench_round, events, max_s, each=False)
    return {**m, "workload": (ex.bench_round.__doc__ or "").split("\n\n")[0].replace("\n    ", " ").strip()}


def run(events: int = 2000, rounds: int = 3, max_s: float = 60.0) -> dict:
    """Every probe: the migrate probe against its references, round by
    round; each other one alone under its workload."""
    from nttrace.probes import PROBES
    from nttrace.probes.migrate import MigrateProbe
    with bpf_stats():
        return {name: migrate(rounds, events, max_s) if probe is MigrateProbe else alone(probe, events, max_s)
                for name, probe in PROBES.items()}


def _ns(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(args) -> int:
    report = run(events=args.events, rounds=args.rounds)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return EXIT_OK
    for name, r in report.items():
        if r["status"] != "measured":
            print(f"{name:<14} unavailable: {r['reason']}")
            continue
        if "rounds" in r:
            print(f"{name:<14} {_ns(r['ns_per_event'])} ns/event, median of {len(r['rounds'])} rounds "
                  f"(each subject attached alone, {r['events_per_subject']}+ events)")
            for i, row in enumerate(r["rounds"]):
                cells = "  ".join(f"{s} {_ns(row[s])}" for s in row["order"])
                print(f"  round {i + 1}: {cells}  probe/clock_only {_ratio(row['ratio_to_clock_only'])}")
            refs = r["reference_ns_per_event"]
            print(f"  references (same tracepoints, alone): empty {_ns(refs['empty'])}, "
                  f"clock only {_ns(refs['clock_only'])} ns/event; "
                  f"probe/clock_only {_ratio(r['ratio_to_clock_only'])}")
        else:
            print(f"{name:<14} {_ns(r['ns_per_event'])} ns/event on average over {r['workload_rounds']} workload rounds "
                  f"({r['workload']})")
        for p in r["programs"]:
            print(f"  {p['name']:<22} run_cnt {p['run_cnt']:>8} run_time {p['run_time_ns']:>10} ns  "
                  f"{_ns(p['ns_per_event'])} ns/event")
    return EXIT_OK
