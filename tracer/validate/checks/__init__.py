"""The validation catalog: every check nttrace validate can run, with a
stable id. One module per family (env, native, kernel, perf, and exercises:
one probe.<name> check per probe, made from its declared exercise)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Callable

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


@dataclass
class CheckResult:
    id: str
    status: str
    summary: str
    evidence: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"id": self.id, "status": self.status, "summary": self.summary, "evidence": self.evidence}


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


CATALOG: list[Check] = []


def check(id: str, title: str, quick: bool = True, triggers: str = ""):
    def register(fn):
        CATALOG.append(Check(id, title, fn, quick, triggers))
        return fn
    return register


def select(patterns: list[str] | None, quick: bool) -> list[Check]:
    _load_families()
    chosen = []
    for c in CATALOG:
        if patterns and not any(fnmatch.fnmatchcase(c.id, p) or c.id.startswith(p) for p in patterns):
            continue
        if quick and not c.quick:
            continue
        chosen.append(c)
    return chosen


def _load_families() -> None:
    # Import for their @check registrations: this import order is the catalog order.
    from nttrace.validate.checks import env, native, kernel, perf, exercises  # noqa: F401, I001  # isort: skip
