# SPDX-License-Identifier: Apache-2.0
"""Every probe in PROBES with a workload safe on any host, from its
declarations alone: attached by itself
where this kernel lets it attach, its declared safe workload (its
exercise's bench_round) run, and the rows it makes held to what it
declares: each column, metric value and label a key of every row, its
`trace` table printed under its name, and each metric family it declares
on the daemon's /metrics. A probe added to PROBES is tested here without a
line of this file changing; where it cannot attach (this host has no
kprobes, fentry, page_ref tracepoints or pmem) the skip says why, and the
lab's guests, which have them, run it."""
import io

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nttrace.errors import CapabilityError
from nttrace.exporters.prometheus_collector import ProbeCollector
from nttrace.probes import PROBES
from nttrace.tracing.tracer import Tracer
from nttrace.trace_cmd import print_table


def declared_keys(cls) -> list[str]:
    keys = [c.key for c in cls.columns] + [m.value for m in cls.metrics]
    return keys + [k for m in cls.metrics for _label, k in m.labels]


def has_key(row: dict, key: str) -> bool:
    """The row holds `key` ("a.b": row["a"]["b"]; a None "a" is a value the
    probe could not know, e.g. migrate_fn's page counts)."""
    head, _, rest = key.partition(".")
    return head in row and (not rest or row[head] is None or rest in row[head])


# The probes whose exercise declares a workload safe on any host; the others
# (a demotion, a module load: they change the system) are covered by their
# own live tests, in the lab, and are not parameters here rather than skips.
SAFE = [name for name, cls in PROBES.items() if cls.exercise is not None and cls.exercise.bench_round is not None]


def test_the_probes_left_out_say_why():
    for name in set(PROBES) - set(SAFE):
        ex = PROBES[name].exercise
        assert ex is not None and ex.no_bench, f"{name}: no safe workload and no reason declared (no_bench)"


@pytest.mark.needs("root", "bcc")
@pytest.mark.parametrize("name", SAFE)
def test_each_probe_makes_the_rows_it_declares(name):
    cls = PROBES[name]
    ex = cls.exercise
    tracer = Tracer([name], options={name: ex.bench_options}, handle_signals=False)
    try:
        tracer.attach()
    except CapabilityError:
        pytest.skip(f"{name} cannot attach on this host: {tracer.status[name].get('reason')}")
    try:
        for _round in range(20):
            ex.bench_round()
            snap = tracer.snapshot()[name]
            if snap["rows"]:
                break
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ProbeCollector(tracer))
        metrics = generate_latest(registry).decode()
    finally:
        tracer.detach()
    assert snap["status"] == "attached" and snap["rows"], f"{name}: its workload ran 20 times and it made no row"
    for row in snap["rows"]:
        missing = [k for k in declared_keys(cls) if not has_key(row, k)]
        assert not missing, f"{name}: a row without the declared keys {missing}: {row}"
    out = io.StringIO()
    print_table({name: snap}, 1.0, out)
    lines = out.getvalue().splitlines()
    assert f"  {name} (via {snap['via']})" in lines
    assert all(c.header in lines[lines.index(f"  {name} (via {snap['via']})") + 1] for c in cls.columns)
    families = {f.name for f in text_string_to_metric_families(metrics)}
    assert {m.name for m in cls.metrics} <= families, sorted({m.name for m in cls.metrics} - families)
