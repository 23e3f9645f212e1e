# SPDX-License-Identifier: Apache-2.0
"""probe.<name>: one check per exercised path, made from its probe's declared
exercise (nttrace.probe_framework.exercise): the probe attached alone, its workload
run, its count held to the kernel's own. One check per probe in PROBES whose
workload runs as declared, so a new probe needs no check of its own.

Workloads change system state (compaction, a module loaded, a cgroup
reclaimed). Compaction and memcg reclaim are short and change little:
their checks run unasked (UNASKED), in --quick too. Every other check
runs its workload only when asked, `--exercise NAME`, and is skipped,
saying so, otherwise. Where the probe cannot attach, the check still runs
the workload when the kernel keeps its own count of that work, and reports
that count (SKIP: nothing to hold it to).

The evidence (ExerciseEvidence) keeps each call the probe recorded, so an
A/B of probe.<name> compares per-call latencies; a path whose rows say more
than a count (the compaction's MR_COMPACTION calls and modes, the memcg
reclaim's episodes) has its own evidence class below, which judges them."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields

from nttrace.probes import PROBES
from nttrace.probe_framework.exercise import Observation, compare
from nttrace.probes.migrate import MigrateProbe, compaction_rows
from nttrace.probes.reclaim import ReclaimProbe
from nttrace.validate.checks import CATALOG, FAIL, PASS, SKIP, Check, CheckResult
from nttrace.validate.evidence import Figure, spread


@dataclass
class ExerciseEvidence:
    """probe.<name>: the probe's workload run once while it was attached
    alone: what the workload returned (the kernel's count among it), the
    probe's rows and count, whether they agree, and each call it recorded."""
    PRIMARY_REASON = ("the fastest call of a run, as for the memmap rebinds: the path's own cost, which "
                      "contention slows in some calls of a run but rarely in all")
    probe: str = ""
    workload: str = ""
    via: str | None = None
    run: dict = field(default_factory=dict)
    rows: list[dict] | None = field(default_factory=list)    # None: the probe did not attach
    seen: int | None = None
    expected: int | None = None
    source: str | None = None
    agrees: bool | None = None
    calls: list[dict] = field(default_factory=list)

    def latencies_ms(self) -> list[float]:
        return [c["latency_ns"] / 1e6 for c in self.calls if c.get("latency_ns") is not None]

    def fault(self) -> str | None:
        """What the path's rows lack, beyond the count (None: nothing)."""
        return None

    def describe(self, obs: Observation) -> str:
        """The path as the probe saw it, its count against the kernel's."""
        return obs.describe()

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("probe", "workload", "via", "run", "rows", "seen", "expected",
                                              "source", "agrees", "calls")}

    @classmethod
    def from_json(cls, d: dict) -> "ExerciseEvidence":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        return [*self.latency_figures(), Figure("pages", "pages the probe counted", self.seen),
                Figure("agrees", f"agrees with {self.source or 'the kernel'}",
                       None if self.agrees is None else ("yes" if self.agrees else "no"))]

    def latency_figures(self) -> list[Figure]:
        """The calls' latencies, from the probe's per-call records; the
        fastest is the figure an A/B tests."""
        ms = self.latencies_ms()
        sp = spread(ms) or {}
        samples = ms if len(ms) >= 2 else None
        tag = f" (n={len(ms)})" if ms else ""
        return [Figure("calls.min_ms", f"calls{tag}, fastest ms", sp.get("min"), samples, "min", role="primary"),
                Figure("calls.median_ms", f"calls{tag}, median ms", sp.get("median"), samples, "median",
                       role="secondary"),
                Figure("calls.max_ms", f"calls{tag}, slowest ms", sp.get("max"), samples, "max")]


@dataclass
class CompactionEvidence(ExerciseEvidence):
    """probe.migrate: compaction's migrations, MR_COMPACTION rows, whose
    pages /proc/vmstat counts too."""

    def compaction(self) -> list[dict]:
        return compaction_rows(self.rows or [])

    def compaction_calls(self) -> int:
        return sum(r.get("calls") or 0 for r in self.compaction())

    def modes(self) -> list[str]:
        return sorted({f"{r['mode']}={r['mode_value']}" if r.get("mode_value") is not None else r["mode"]
                       for r in self.compaction()})

    def fault(self) -> str | None:
        if not self.compaction_calls():
            return "compaction ran but the migrate probe saw no MR_COMPACTION call"
        return None

    def describe(self, obs: Observation) -> str:
        modes = ", ".join(sorted({r["mode"] for r in self.compaction()}))
        return f"{self.compaction_calls()} MR_COMPACTION calls ({modes}), pages: {obs.describe()}"

    def figures(self) -> list[Figure]:
        return [Figure("compaction_modes", "compaction migrate modes", ", ".join(self.modes()) or None),
                Figure("compaction_calls", "compaction calls", self.compaction_calls() if self.rows else None),
                *super().figures()]


@dataclass
class MemcgReclaimEvidence(ExerciseEvidence):
    """probe.reclaim: a scratch memory cgroup's reclaim, its memcg episodes,
    whose pages the cgroup counts too."""

    def memcg(self) -> dict:
        return next((r for r in self.rows or [] if r.get("kind") == "memcg"), {})

    def fault(self) -> str | None:
        if not self.memcg().get("episodes"):
            return f"{self.run.get('interface')} ran but the probe saw no memcg reclaim episode"
        return None

    def describe(self, obs: Observation) -> str:
        memcg, run = self.memcg(), self.run
        return (f"{memcg['episodes']} memcg reclaim episodes by {run['interface']} (cgroup v{run['cgroup_version']}), "
                f"p50 {memcg['latency_ns']['p50'] / 1e3:.0f} us, pages: {obs.describe()}")

    def figures(self) -> list[Figure]:
        return [Figure("memcg_episodes", "memcg reclaim episodes", self.memcg().get("episodes")), *super().figures()]

    def latency_figures(self) -> list[Figure]:
        """The reclaim probe keeps no per-call records: the memcg episodes'
        latency histogram gives them, its median the figure an A/B tests."""
        lat = self.memcg().get("latency_ns") or {}
        ms = {k: None if lat.get(k) is None else lat[k] / 1e6 for k in ("p50", "p99", "max")}
        n = lat.get("count") or 0
        return [Figure("episodes.p50_ms", f"memcg episodes (n={n}), median ms", ms["p50"], None, "median",
                       role="primary"),
                Figure("episodes.p99_ms", f"memcg episodes (n={n}), p99 ms", ms["p99"], None, "p99"),
                Figure("episodes.max_ms", f"memcg episodes (n={n}), slowest ms", ms["max"], None, "max")]


# the paths whose rows say more than a count, each with its evidence
EVIDENCE = {MigrateProbe: CompactionEvidence, ReclaimProbe: MemcgReclaimEvidence}
# the workloads a check runs unasked: short, and changing little
UNASKED = (MigrateProbe, ReclaimProbe)


def _runnable(exercise) -> bool:
    """A workload the check can run as declared: no argument it must be given."""
    params = inspect.signature(exercise.run).parameters.values()
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


def run_exercise(probe_cls, ctx) -> CheckResult:
    from contextlib import ExitStack

    from nttrace.errors import CapabilityError, UsageError
    from nttrace.tracing.tracer import Tracer
    from nttrace.workloads.demotion import DemotionUnavailable
    from nttrace.workloads.scratch_cgroup import NoMemoryCgroup
    cid, name, ex = f"probe.{probe_cls.name}", probe_cls.name, probe_cls.exercise
    what = ex.workload.split(" (")[0]
    if probe_cls not in UNASKED and name not in ctx.options.exercise:
        return CheckResult(cid, SKIP, f"its workload {what}: run with --exercise {name}")
    evidence_cls = EVIDENCE.get(probe_cls, ExerciseEvidence)
    with ExitStack() as attached:
        try:
            # per-call records asked for: the calls' latencies are the check's primary figure
            tracer = attached.enter_context(Tracer([name], {name: probe_cls.options_for([name], True)},
                                                   caps=ctx.caps, meta=ctx.kernel))
            unavailable = None if tracer.attached(name) else tracer.status[name].get("reason")
        except CapabilityError as exc:          # the Tracer's: no probe could attach, and why
            tracer, unavailable = None, str(exc)
        if unavailable is not None and not ex.truths:     # and the kernel keeps no count of the work
            return CheckResult(cid, SKIP, f"{name} probe unavailable: {unavailable}")
        try:
            run = ex.run()
        except (UsageError, NoMemoryCgroup, DemotionUnavailable) as exc:   # the host lacks what the workload needs
            return CheckResult(cid, SKIP, str(exc) + (f"; and the {name} probe is unavailable: {unavailable}"
                                                      if unavailable is not None else ""))
        if unavailable is None:
            snapshot = tracer.snapshot()[name]     # at once: what ran after the workload is not its work
            tracer.poll(timeout_ms=200)
            records = tracer.records()
        else:
            snapshot, records = {"rows": None}, []
    obs = compare(name, ex, run, snapshot)
    ev = evidence_cls(probe=name, workload=ex.workload, via=snapshot.get("via"), run=run, rows=snapshot["rows"],
                      seen=obs.seen, expected=obs.expected, source=obs.truth.source if obs.truth else None,
                      agrees=obs.agrees, calls=[r for r in records if r.get("latency_ns") is not None])
    if unavailable is not None:     # what the kernel counted, held to no probe
        counted = f"{obs.truth.source} {obs.expected}" if obs.truth else "no count the workload returned"
        return CheckResult(cid, SKIP, f"{name} probe unavailable: {unavailable}; its workload ran ({what}): "
                           f"{counted}", ev.to_json())
    if obs.agrees is False:
        return CheckResult(cid, FAIL, f"{name} probe counted {obs.describe()}", ev.to_json())
    if fault := ev.fault():
        return CheckResult(cid, FAIL, fault, ev.to_json())
    if obs.agrees is None and not ev.calls and not obs.seen:     # no kernel count, and nothing seen
        return CheckResult(cid, FAIL, f"{what} ran but the {name} probe saw nothing", ev.to_json())
    lat = ev.latencies_ms()
    timing = f"; {len(lat)} calls, fastest {min(lat):.3f} ms, median {sorted(lat)[len(lat) // 2]:.3f} ms" if lat else ""
    return CheckResult(cid, PASS, f"{name} probe: {ev.describe(obs)}{timing}", ev.to_json())


for _probe in PROBES.values():
    if _probe.exercise is not None and _runnable(_probe.exercise):
        _unasked = _probe in UNASKED
        CATALOG.append(Check(f"probe.{_probe.name}", f"the {_probe.name} probe against the kernel's own count "
                             f"({_probe.exercise.workload.split(' (')[0]})",
                             lambda ctx, p=_probe: run_exercise(p, ctx), quick=_unasked,
                             triggers=_probe.exercise.workload if _unasked
                             else f"with --exercise {_probe.name}: {_probe.exercise.workload}",
                             evidence=EVIDENCE.get(_probe, ExerciseEvidence),
                             asks="" if _unasked else "exercise"))
