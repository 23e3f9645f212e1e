# SPDX-License-Identifier: Apache-2.0
"""The validation catalog: every check nttrace validate can run, with a
stable id. One module per family (env, native, kernel, perf, and exercises:
one probe.<name> check per exercised path, made from its probe's declared
exercise), the memmap latency check in its own; each check declares the
class of its evidence beside it (nttrace.validate.evidence)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Callable

from nttrace.errors import UsageError

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
# A series' verdict may also be NOISY: the evidence too spread to call it.
NOISY = "noisy"
SERIES_STATUSES = (PASS, WARN, NOISY)


@dataclass
class SeriesVerdict:
    """One patch series' verdict inside a check that judges several (each
    series its own line, status, reason and evidence)."""
    series: str        # stable key, the metrics' `series` label
    title: str         # what it is, for the table
    status: str        # PASS, WARN or NOISY
    summary: str       # the reason, in words
    evidence: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"series": self.series, "title": self.title, "status": self.status, "summary": self.summary,
                "evidence": self.evidence}


@dataclass
class CheckResult:
    id: str
    status: str
    summary: str
    evidence: dict = field(default_factory=dict)
    series: list[SeriesVerdict] = field(default_factory=list)

    def as_json(self) -> dict:
        out = {"id": self.id, "status": self.status, "summary": self.summary, "evidence": self.evidence}
        if self.series:
            out["series"] = [v.as_json() for v in self.series]
        return out


def overall(verdicts: list[SeriesVerdict]) -> str:
    """A check's status from its series' verdicts: WARN if any series warns,
    PASS if every one passes, else SKIP (some series could not be called)."""
    statuses = {v.status for v in verdicts}
    if WARN in statuses:
        return WARN
    if statuses == {PASS}:
        return PASS
    return SKIP


def tally(results: list[dict]) -> dict[str, int]:
    """{status: how many} of a report's checks (as JSON)."""
    return {s: sum(c["status"] == s for c in results) for s in (PASS, FAIL, WARN, SKIP)}


@dataclass
class Check:
    id: str
    title: str
    run: Callable  # (ValidateContext) -> CheckResult
    quick: bool = True
    triggers: str = ""  # what it changes on the system, if anything
    evidence: type | None = None   # its evidence's class (nttrace.validate.evidence), if other code reads it
    asks: str = ""      # the validate option its work waits for: "rebind", "demote", "exercise" (by its name)
    timed: bool = False   # its verdict judges timings (what a contended host distorts)

    def measures(self) -> bool:
        """Its evidence carries a figure an A/B tests (a primary one)."""
        return hasattr(self.evidence, "PRIMARY_REASON")

    def asked(self, rebind: str | None, demote: bool, exercise: tuple[str, ...]) -> bool:
        """These validate options let it do its work (not skip for want of being asked)."""
        if self.asks == "rebind":
            return bool(rebind)
        if self.asks == "demote":
            return demote
        if self.asks == "exercise":
            return self.id.split(".", 1)[1] in exercise
        return True


CATALOG: list[Check] = []


def check(id: str, title: str, quick: bool = True, triggers: str = "", evidence: type | None = None,
          asks: str = "", timed: bool = False):
    def register(fn):
        CATALOG.append(Check(id, title, fn, quick, triggers, evidence, asks, timed))
        return fn
    return register


def find(cid: str) -> Check | None:
    """The check that writes reports under `cid`."""
    return next((c for c in catalog() if cid == c.id), None)


# The catalog's order: by family (a check id's part before the dot), then in
# each family in its module's order. Not the order of import: a test or a
# tool that imports one family first must see the catalog the CLI prints.
FAMILY_ORDER = ("env", "native", "kernel", "perf", "probe")


def catalog() -> list[Check]:
    _load_families()
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    # within a family, in _load_families' module order, then as each module
    # registers them: the same whichever module a process imported first
    module = {f"{__name__}.{m}": i for i, m in enumerate(FAMILY_MODULES)}
    return sorted(CATALOG, key=lambda c: (rank.get(c.id.split(".", 1)[0], len(rank)),
                                          module.get(c.run.__module__, len(module))))


def select(patterns: list[str] | None, quick: bool) -> list[Check]:
    """The checks a run makes: those any of `patterns` selects (every one
    without patterns), less the slow ones with `quick`. A pattern that
    selects none of them is bad input, whatever the others select: a typo
    beside a good pattern is refused, never dropped (UsageError naming it;
    validate's and `ab start`'s --check both come here)."""
    runnable = [c for c in catalog() if c.quick or not quick]
    if not patterns:
        return runnable
    for p in patterns:
        if not any(_selects(p, c.id) for c in runnable):
            slow = [c.id for c in catalog() if _selects(p, c.id)]
            if slow:
                raise UsageError(f"--check {p} matches only slow checks ({', '.join(slow)}), which --quick leaves out")
            raise UsageError(f"--check {p} matches no check of `nttrace validate --list`")
    return [c for c in runnable if any(_selects(p, c.id) for p in patterns)]


def _selects(pattern: str, cid: str) -> bool:
    """A --check pattern: a glob, an id, or a family or id prefix that ends at
    a dot ("kernel" and "kernel." select the family; "probe.migrate" does
    not select probe.migrate_fn)."""
    if fnmatch.fnmatchcase(cid, pattern) or cid == pattern:
        return True
    prefix = pattern if pattern.endswith(".") else pattern + "."
    return cid.startswith(prefix)


FAMILY_MODULES = ("env", "native", "kernel", "memmap_latency", "perf", "exercises")


def _load_families() -> None:
    # Import for their @check registrations (catalog() orders them).
    from nttrace.validate.checks import env, native, kernel, memmap_latency, perf, exercises  # noqa: F401, I001  # isort: skip
