# SPDX-License-Identifier: Apache-2.0
"""Rotate-order rounds of migrate-tracepoint program variants (C files holding nttrace_migrate_start/_done), each attached alone: the floor a probe is held to. Usage: probe_floor.py ROUNDS EVENTS A.c B.c ... (ratios to the first)."""
import json, statistics, sys
from pathlib import Path
from nttrace.bench import probes as bp
from nttrace.capabilities import report as capabilities
from nttrace.probes.migrate import MigrateProbe as M
from nttrace.kernel import metadata as km
from nttrace.kernel.sysroot import Sysroot
START, DONE = M.tracepoints
root = Sysroot("/")
probe = M(km.load(root), capabilities.report(root, live_probes=False))
defines = "".join(f"#define {k} {v}\n" for k, v in probe.defines().items())
files = sys.argv[3:]
rounds, events = int(sys.argv[1]), int(sys.argv[2])
subjects = {Path(f).stem: defines + '#include "common.h"\n' + Path(f).read_text() for f in files}
att = [(":".join(START), "nttrace_migrate_start"), (":".join(DONE), "nttrace_migrate_done")]
names = list(subjects)
out = []
with bp.bpf_stats():
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        row = {}
        for n in order:
            m = bp.program_alone(subjects[n], att, M.exercise.bench_round, events, 120)
            row[n] = m["ns_per_event"]
        out.append(row)
        print(r, {k: round(v) for k, v in row.items()}, {k: round(row[k] / row[names[0]], 2) for k in names}, flush=True)
print("median ratio to", names[0], {k: round(statistics.median(x[k] / x[names[0]] for x in out), 3) for k in names})
json.dump(out, open("probe-floor-rounds.json", "w"))
