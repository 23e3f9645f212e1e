# SPDX-License-Identifier: Apache-2.0
"""perf counting without the host: a multiplexed count scaled to the time it
was enabled, and which perf bindings can count (the counters on this host:
tests/live/test_perf_counting.py)."""
import types

import pytest

from nttrace.perf import counters
from nttrace.perf.counters import Reading, scale


def test_binding_detection_sees_a_counting_api():
    evlist = type("evlist", (), {"enable": lambda self: None})
    fake = types.SimpleNamespace(evsel=type("evsel", (), {"read": lambda self, cpu, thread: None}), evlist=evlist)
    assert counters.binding_can_count(fake)
    assert not counters.binding_can_count(types.SimpleNamespace(evsel=type("evsel", (), {}), evlist=evlist))
    # read() without an evlist to enable it (an in-between build): not a counting API
    assert not counters.binding_can_count(types.SimpleNamespace(evsel=fake.evsel))


@pytest.mark.parametrize("raw,enabled,running,expected", [
    (1000, 100, 100, 1000.0),     # ran all the time
    (1000, 100, 50, 2000.0),      # multiplexed half the time: doubled
    (1000, 100, 25, 4000.0),
    (0, 100, 0, 0.0),             # never scheduled: nothing to extrapolate
    (7, 0, 0, 0.0),
])
def test_multiplex_scaling(raw, enabled, running, expected):
    assert scale(raw, enabled, running) == expected
    r = Reading("x", raw, enabled, running, "syscall")
    assert r.value == expected
    if enabled:
        assert r.running_fraction == running / enabled
