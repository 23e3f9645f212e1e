# SPDX-License-Identifier: Apache-2.0
"""The loop's schedule: N rounds, both kernels once in each, in an order the
seed fixes (and the seed is recorded)."""
import pytest

from nttrace.ab import schedule


def test_each_round_holds_both_kernels_in_the_seeded_order():
    for seed in range(20):
        slots = schedule.make(5, seed)
        assert [s.slot for s in slots] == list(range(1, 11))
        for r in range(1, 6):
            assert sorted(s.side for s in slots if s.round == r) == ["base", "patched"]
        assert schedule.make(5, seed) == slots             # the seed is the order
    orders = {schedule.order_text(schedule.make(5, seed)) for seed in range(20)}
    assert len(orders) > 5                                 # not one fixed order


def test_fewer_than_one_round_is_refused():
    with pytest.raises(ValueError):
        schedule.make(0, 1)


def test_the_order_reads_round_by_round():
    slots = [schedule.Slot(1, 1, "base"), schedule.Slot(2, 1, "patched"), schedule.Slot(3, 2, "patched"),
             schedule.Slot(4, 2, "base")]
    assert schedule.order_text(slots) == "B P | P B"
    assert schedule.from_json([s.as_json() for s in slots]) == slots
    assert slots[2].key == "003-patched"
