# SPDX-License-Identifier: Apache-2.0
"""The loop's kernels and its order of boots.

A loop compares a series of kernels K0, K1, ..., Kn: K0 is the base and
each Ki a step on the one before it. Two kernels are the common case, a
series of two: `--base B --patched P` is the series base=B, patched=P.
Each kernel has a label (the name its runs, its step and its report row
carry): "base" and "patched" for two, or the labels `--series` gives
(LABEL=KERNEL), by default base, step1, step2, ...

The order: N rounds, each round one boot of every kernel in a random order
drawn from a recorded seed (drift over the hours of a loop then falls on
every kernel alike, and the order cannot follow the clock).

A slot is one planned boot: its number (1-based, in boot order), its round
and its side (the kernel's label).
"""
from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass

from nttrace.errors import UsageError

SIDES = ("base", "patched")        # the labels of a series of two
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,31}")


@dataclass(frozen=True)
class Slot:
    slot: int
    round: int
    side: str

    def as_json(self) -> dict:
        return asdict(self)

    @property
    def key(self) -> str:
        """The name its run file carries: 003-patched."""
        return f"{self.slot:03d}-{self.side}"


def make(rounds: int, seed: int, sides: tuple[str, ...] | list[str] = SIDES) -> list[Slot]:
    if rounds < 1:
        raise ValueError("at least one round")
    rng = random.Random(seed)
    out: list[Slot] = []
    for r in range(1, rounds + 1):
        order = list(sides)
        rng.shuffle(order)
        for side in order:
            out.append(Slot(len(out) + 1, r, side))
    return out


def from_json(rows: list[dict]) -> list[Slot]:
    return [Slot(int(r["slot"]), int(r["round"]), str(r["side"])) for r in rows]


def sides(sched: dict) -> list[str]:
    """The loop's kernels' labels in series order (K0, the base, first): the
    order of its schedule's kernels."""
    return list(sched["kernels"])


def config_diffs(sched: dict) -> dict[str, list[str]]:
    """{label: the options its config sets unlike the kernel's before it} of
    each kernel after the base (from the preflight's config_diffs, or from a
    config_diff list, base against patched)."""
    pre = sched.get("preflight") or {}
    if "config_diffs" in pre:
        return dict(pre["config_diffs"] or {})
    return {"patched": list(pre.get("config_diff") or [])} if "config_diff" in pre else {}


def letters(labels: list[str]) -> dict[str, str]:
    """The letter each kernel has in an order at a glance: B and P for a
    series of two, else 0, 1, 2, ... by position."""
    if list(labels) == list(SIDES):
        return {"base": "B", "patched": "P"}
    return {label: str(i) for i, label in enumerate(labels)}


def legend(labels: list[str]) -> str:
    """'B base, P patched' / '0 base, 1 step1, ...'."""
    return ", ".join(f"{letter} {label}" for label, letter in letters(labels).items())


def order_text(slots: list[Slot], labels: list[str] = SIDES) -> str:
    """'B P | P B | ...': the rounds at a glance."""
    mark = letters(labels)
    rounds: dict[int, list[str]] = {}
    for s in slots:
        rounds.setdefault(s.round, []).append(mark.get(s.side, s.side))
    return " | ".join(" ".join(v) for v in rounds.values())


def parse_series(text: str) -> list[tuple[str, str]]:
    """`--series [LABEL=]K0,[LABEL=]K1,...` as [(label, kernel spec)], K0
    first. A kernel without a label is `base` (K0) or `stepI` (Ki). At
    least two kernels; labels distinct, each a plain word (it names files).
    UsageError (exit 2) otherwise."""
    items = [part.strip() for part in text.split(",")]
    if any(not part for part in items):
        raise UsageError(f"ab start --series {text!r}: an empty kernel in the list")
    out = []
    for i, part in enumerate(items):
        label, eq, spec = part.partition("=")
        if not eq:
            label, spec = ("base" if i == 0 else f"step{i}"), part
        if not spec:
            raise UsageError(f"ab start --series: {part!r} names no kernel after its label")
        if not LABEL_RE.fullmatch(label):
            raise UsageError(f"ab start --series: label {label!r}: use 1-32 letters, digits, '_', '.', '+' or '-', "
                             "starting with a letter or digit")
        out.append((label, spec))
    if len(out) < 2:
        raise UsageError("ab start --series: give at least two kernels, the base first")
    labels = [label for label, _ in out]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise UsageError(f"ab start --series: label {twice[0]} is given twice; each kernel needs its own")
    return out
