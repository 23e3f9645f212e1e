# SPDX-License-Identifier: Apache-2.0
"""What makes a probe see work, and the kernel's own count of that work that
the probe's count must agree with. Each probe declares its Exercise
(`Probe.exercise`); checks, `bench probes`, `bench overhead`, the lab's
scenarios and the tests take the workload, the ground truth and its
tolerance from there, and compare() holds a probe's count against the
kernel's.

The tolerances live here and only here: a probe that counts what the kernel
counts agrees exactly; where the kernel's count is a bound rather than the
same count (a cgroup's memory.stat pgsteal counts the pages its reclaim
stole while the probe counts what the reclaim episodes returned; cgroup v1's
drop in charged memory also holds the kernel memory reclaim frees), the
slack says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from nttrace.kernel import PAGE


@dataclass(frozen=True)
class Tolerance:
    """How far a probe's count may sit from the kernel's: at most
    max(rel x the kernel's count, floor)."""
    rel: float = 0.0
    floor: int = 0

    def holds(self, seen: int, truth: int) -> bool:
        return abs(seen - truth) <= max(self.rel * truth, self.floor)

    def describe(self) -> str:
        if not self.rel and not self.floor:
            return "exactly"
        return f"within {self.rel:.0%} (at least {self.floor})"


EXACT = Tolerance()
# memory.stat pgsteal against the reclaim episodes' nr_reclaimed (cgroup v2)
PGSTEAL = Tolerance(0.02, 32)
# the drop in a v1 cgroup's charged memory, which also holds freed kernel memory
USAGE_DROP = Tolerance(0.05, 32)


@dataclass(frozen=True)
class GroundTruth:
    """The kernel's count: `key` of what the workload returns, `source` as a
    report names it."""
    key: str
    source: str
    tolerance: Tolerance = EXACT


@dataclass(frozen=True)
class Exercise:
    """A probe's workload and ground truth.

    run(**options) does the work once and returns the kernel's counts (the
    truths' keys among them); count(snapshot) is the probe's count of the
    same thing. truths are tried in order: the first whose key the run
    returned (not None) is the one compared. Without truths, no_truth says
    why the kernel keeps no such count. bench_round is a short run that is
    safe on any host with the probe's attach points (None: the work needs
    hardware or changes system state, and `bench probes` says so), with
    bench_options for the probe."""
    workload: str
    run: Callable[..., dict]
    count: Callable[[dict], int] | None = None
    truths: tuple[GroundTruth, ...] = ()
    no_truth: str = ""
    bench_round: Callable[[], object] | None = None
    bench_options: dict = field(default_factory=dict)
    no_bench: str = ""
    # run by the lab's guests (their `exercise_<probe>` scenario, validate's
    # probe.<name> check): a workload the guest kernel has and nothing else
    # of the suite exercises
    lab: bool = False

    def truth(self, run: dict) -> tuple[GroundTruth, int] | None:
        for t in self.truths:
            if run.get(t.key) is not None:
                return t, int(run[t.key])
        return None


@dataclass
class Observation:
    """One exercise of one probe: the workload's return, the probe's
    snapshot, and how the two counts compare."""
    probe: str
    run: dict
    snapshot: dict
    seen: int | None = None
    truth: GroundTruth | None = None
    expected: int | None = None

    @property
    def agrees(self) -> bool | None:
        """None when there is nothing to compare."""
        if self.truth is None or self.seen is None:
            return None
        return self.truth.tolerance.holds(self.seen, self.expected)

    def describe(self) -> str:
        if self.agrees is None:
            return "no kernel count to compare"
        verb = "=" if self.seen == self.expected else ("~" if self.agrees else "!=")
        return (f"{self.seen} {verb} {self.truth.source} {self.expected}"
                + ("" if self.truth.tolerance is EXACT else f" ({self.truth.tolerance.describe()})"))


def compare(probe: str, exercise: Exercise, run: dict, snapshot: dict) -> Observation:
    obs = Observation(probe, run, snapshot)
    if exercise.count is not None and snapshot.get("rows") is not None:
        obs.seen = exercise.count(snapshot)
    found = exercise.truth(run)
    if found is not None:
        obs.truth, obs.expected = found
    return obs


# -- the workloads' counts, as the probes' exercises read them ------------------
def migrated_pages(snapshot: dict) -> int:
    return sum(r["succeeded"] or 0 for r in snapshot["rows"])


def memcg_reclaimed(snapshot: dict) -> int:
    return next(r["reclaimed"] for r in snapshot["rows"] if r["kind"] == "memcg")


def copied_pages(snapshot: dict) -> int:
    return sum(r["bytes"] for r in snapshot["rows"]) // PAGE
