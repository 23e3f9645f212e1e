"""probe.<name>: each probe exercised as it declares (nttrace.probes.exercise):
attached alone, its workload run, its count held to the kernel's own. One
check per probe in PROBES, made here from the declaration, so a new probe
needs no check of its own. Workloads change system state (compaction, a
module loaded, a cgroup reclaimed): a probe's check runs its workload only
when asked, `--exercise NAME`, and is skipped, saying so, otherwise.

The evidence (nttrace.validate.evidence.ExerciseEvidence) keeps each call
the probe recorded, so an A/B of probe.<name> compares per-call latencies."""
from __future__ import annotations

import inspect

from nttrace.probes import PROBES
from nttrace.probes.exercise import compare
from nttrace.validate.checks import CATALOG, FAIL, PASS, SKIP, Check, CheckResult
from nttrace.validate.evidence import ExerciseEvidence


def _runnable(exercise) -> bool:
    """A workload the check can run as declared: no argument it must be given."""
    params = inspect.signature(exercise.run).parameters.values()
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


def run_exercise(probe_cls, ctx) -> CheckResult:
    from nttrace.errors import UsageError
    from nttrace.probes.tracer import Tracer
    cid, name, ex = f"probe.{probe_cls.name}", probe_cls.name, probe_cls.exercise
    if name not in ctx.options.exercise:
        return CheckResult(cid, SKIP, f"its workload {ex.workload.split(' (')[0]}: run with --exercise {name}")
    with Tracer([name], caps=ctx.caps, meta=ctx.kernel) as tracer:
        if not tracer.attached(name):
            return CheckResult(cid, SKIP, f"{name} probe unavailable: {tracer.status[name].get('reason')}")
        try:
            run = ex.run()
        except UsageError as exc:      # the kernel or host lacks what the workload needs
            return CheckResult(cid, SKIP, str(exc))
        snapshot = tracer.snapshot()[name]     # at once: what ran after the workload is not its work
        tracer.poll(timeout_ms=200)
        records = tracer.records()
    obs = compare(name, ex, run, snapshot)
    ev = ExerciseEvidence(probe=name, workload=ex.workload, via=snapshot.get("via"), run=run, rows=snapshot["rows"],
                          seen=obs.seen, expected=obs.expected, source=obs.truth.source if obs.truth else None,
                          agrees=obs.agrees, calls=[r for r in records if r.get("latency_ns") is not None])
    if obs.agrees is False:
        return CheckResult(cid, FAIL, f"{name} probe counted {obs.describe()}", ev.to_json())
    if obs.agrees is None and not ev.calls and not obs.seen:     # no kernel count, and nothing seen
        return CheckResult(cid, FAIL, f"{ex.workload.split(' (')[0]} ran but the {name} probe saw nothing", ev.to_json())
    lat = ev.latencies_ms()
    timing = f"; {len(lat)} calls, fastest {min(lat):.3f} ms, median {sorted(lat)[len(lat) // 2]:.3f} ms" if lat else ""
    return CheckResult(cid, PASS, f"{name} probe: {obs.describe()}{timing}", ev.to_json())


for _probe in PROBES.values():
    if _probe.exercise is not None and _runnable(_probe.exercise):
        CATALOG.append(Check(f"probe.{_probe.name}", f"the {_probe.name} probe against the kernel's own count "
                             f"({_probe.exercise.workload.split(' (')[0]})",
                             lambda ctx, p=_probe: run_exercise(p, ctx), quick=False,
                             triggers=f"with --exercise {_probe.name}: {_probe.exercise.workload}"))
