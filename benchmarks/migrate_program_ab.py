# SPDX-License-Identifier: Apache-2.0
"""A/B of migrate probe programs: each C file given is compiled with the
defines nttrace would give it on this kernel, attached alone to the migrate
tracepoints, and driven by compaction; the order rotates every round.
Prints ns/event per round (kernel.bpf_stats_enabled), then each program
against the first given (nttrace.ab's test, interval and verdict).

    git show 7923064:bpf/migrate.bpf.c > /tmp/migrate-old.bpf.c
    .venv/bin/python benchmarks/migrate_program_ab.py --rounds 5 \\
        /tmp/migrate-old.bpf.c bpf/migrate.bpf.c

--clock-only adds the floor for a latency probe, measured the same way: a
program that only reads the clock, as bpf/bench_baseline.bpf.c's does.
"""
import argparse
import json
from pathlib import Path

from nttrace.ab import statistics
from nttrace.ab.text import shift_line
from nttrace.bench import probes as bench_probes
from nttrace.capabilities import report as capabilities
from nttrace.kernel import metadata as kernel_meta
from nttrace.probes.migrate import MigrateProbe

START, DONE = MigrateProbe.tracepoints
from nttrace.kernel.sysroot import Sysroot

CLOCK_ONLY = """
BPF_ARRAY(sink, u64, 1);
static __always_inline int clock_only(void)
{
	int zero = 0;
	u64 *v = sink.lookup(&zero);

	if (v)
		*v = bpf_ktime_get_ns();
	return 0;
}
int nttrace_migrate_start(void *ctx) { return clock_only(); }
int nttrace_migrate_done(void *ctx) { return clock_only(); }
"""


def measure(text: str, events: int) -> float:
    attachments = [(":".join(START), "nttrace_migrate_start"), (":".join(DONE), "nttrace_migrate_done")]
    return bench_probes.program_alone(text, attachments, MigrateProbe.exercise.bench_round, events, 120)["ns_per_event"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--clock-only", action="store_true")
    args = ap.parse_args()
    root = Sysroot("/")
    probe = MigrateProbe(kernel_meta.load(root), capabilities.report(root, live_probes=False))
    defines = "".join(f"#define {k} {v}\n" for k, v in probe.defines().items())
    subjects = {str(p): defines + p.read_text() for p in args.programs}
    if args.clock_only:
        subjects["clock_only"] = CLOCK_ONLY
    names = list(subjects)
    results = {n: [] for n in names}
    with bench_probes.bpf_stats():
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                results[n].append(measure(subjects[n], args.events))
            print(f"round {r + 1}: " + "  ".join(f"{n} {results[n][-1]:.0f}" for n in order), flush=True)
    for n in names[1:]:
        print(shift_line(names[0], results[names[0]], n, results[n], " ns"))
    print(json.dumps({n: {"rounds": v, **({} if n == names[0] else {"against_first": statistics.shift(results[names[0]], v)})}
                      for n, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
