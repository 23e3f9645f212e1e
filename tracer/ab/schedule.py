# SPDX-License-Identifier: Apache-2.0
"""The loop's order of boots: N rounds, each round one boot of each side in a
random order drawn from a recorded seed (drift over the hours of a loop then
falls on both sides alike, and the order cannot follow the clock).

A slot is one planned boot: its number (1-based, in boot order), its round
and its side ("base" or "patched").
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass

SIDES = ("base", "patched")


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


def make(rounds: int, seed: int) -> list[Slot]:
    if rounds < 1:
        raise ValueError("at least one round")
    rng = random.Random(seed)
    out: list[Slot] = []
    for r in range(1, rounds + 1):
        sides = list(SIDES)
        rng.shuffle(sides)
        for side in sides:
            out.append(Slot(len(out) + 1, r, side))
    return out


def from_json(rows: list[dict]) -> list[Slot]:
    return [Slot(int(r["slot"]), int(r["round"]), str(r["side"])) for r in rows]


def order_text(slots: list[Slot]) -> str:
    """'B P | P B | ...': the rounds at a glance."""
    rounds: dict[int, list[str]] = {}
    for s in slots:
        rounds.setdefault(s.round, []).append("B" if s.side == "base" else "P")
    return " | ".join(" ".join(v) for v in rounds.values())
