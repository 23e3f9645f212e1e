# SPDX-License-Identifier: Apache-2.0
"""A check's evidence as a typed record, read back from a report. Each check
whose evidence other code reads (the A/B, its HTML page, the lab's checks)
declares its class beside it (`@check(..., evidence=...)`), with one
`to_json`, one `from_json` and the figures a reviewer compares, computed
there, once, from what the check recorded. `of()` finds a report entry's
class through the catalog: the check that wrote it, by its id.

`from_json` reads every format nttrace has written (tests/fixtures/recorded
holds reports of each).

`figures()` is what `validate --baseline/--current` compares (the A/B,
nttrace.ab.compare): each Figure has a role (nttrace.ab.statistics.ROLES):
one `primary` figure per scenario carries the test at alpha; `secondary`
ones are tested with the report's multiplicity correction; `descriptive`
ones are shown, never tested. An evidence class with a primary figure says
why it chose it (PRIMARY_REASON).

Checks without a class keep their evidence as a dict (`Untyped`): all their
numbers are descriptive figures.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass
class Figure:
    metric: str
    label: str
    value: object                          # a number, a string or None
    samples: list[float] | None = None     # what the value summarises, within the run
    stat: str | None = None                # how: median, mean, min, max
    role: str = "descriptive"              # nttrace.ab.statistics.ROLES; categories never tested


def spread(values: list[float]) -> dict | None:
    """min/median/max/mean of a series (None when it is empty)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values),
            "mean": statistics.mean(values)}


@dataclass
class Untyped:
    """A check whose evidence nothing else reads: kept as the check wrote it;
    each of its numbers a descriptive figure."""
    data: dict

    def to_json(self) -> dict:
        return self.data

    @classmethod
    def from_json(cls, d: dict) -> "Untyped":
        return cls(dict(d))

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        return [Figure(k, k, v) for k, v in _numbers(self.data)]


def _numbers(evidence, prefix=""):
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            yield from _numbers(value, f"{prefix}{key}.")
    elif isinstance(evidence, (int, float)) and not isinstance(evidence, bool):
        yield prefix.rstrip("."), float(evidence)


def kind(check_id: str) -> type:
    """The evidence class of the check that writes `check_id` (Untyped for
    a check that declares none, or one nttrace no longer has)."""
    from nttrace.validate import checks
    found = checks.find(check_id)
    return found.evidence if found is not None and found.evidence is not None else Untyped


def of(check: dict):
    """The typed evidence of one check as a report holds it (JSON)."""
    ev = check.get("evidence") or {}
    if not isinstance(ev, dict):
        ev = {}
    return kind(str(check.get("id", ""))).from_json(ev)


def primary_reason(check_id: str) -> str:
    """Why `check_id`'s primary figure is the one tested."""
    return getattr(kind(check_id), "PRIMARY_REASON", "") or "the scenario’s own cost"

