# SPDX-License-Identifier: Apache-2.0
"""perf counting on this host (software events, real); the adapter's
arithmetic is in tests/unit/test_perf_scaling.py."""
import ctypes
import mmap
import os
import time

import pytest

from nttrace.perf import counters


@pytest.mark.needs("perf-software")
def test_page_faults_around_a_native_first_touch_match_n():
    n = 20000

    def first_touch():
        m = mmap.mmap(-1, n * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        ctypes.memset(addr, 1, n * 4096)  # one fault per page
        return m

    m, readings = counters.around(first_touch, {"page_faults": counters.GENERIC_EVENTS["page_faults"]})
    m.close()
    r = readings["page_faults"]
    assert r.available, r.error
    assert abs(r.value - n) <= 0.05 * n, f"{r.value} faults for {n} pages"
    assert r.running_fraction == 1.0


@pytest.mark.needs("perf-software")
def test_task_clock_is_positive_and_bounded_by_wall_time():
    t0, cpu0 = time.monotonic(), time.thread_time()
    with counters.counting({"task_clock": counters.GENERIC_EVENTS["task_clock"]}) as readings:
        # spin for 0.2 s of this thread's CPU, not of wall time: on a busy
        # two-core CI host (guests and kernel builds beside the suite) 0.2 s
        # of wall time has given the thread as little as 96 ms
        while time.thread_time() - cpu0 < 0.2:
            pass
    wall_ns = (time.monotonic() - t0) * 1e9
    tc = readings["task_clock"]
    assert 0 < tc.value <= wall_ns * os.cpu_count()
    assert tc.value >= 0.15e9  # it ran for 0.2 s of CPU while counted


@pytest.mark.needs("perf-software")
def test_system_wide_task_clock_covers_every_cpu():
    with counters.counting({"task_clock": counters.GENERIC_EVENTS["cpu_clock"]}, system_wide=True) as r:
        time.sleep(0.2)
    reading = r["task_clock"]
    assert len(reading.per_cpu) == len(os.sched_getaffinity(0))
    assert reading.value > 0


@pytest.mark.needs("perf-software")   # it opens a counter on this host
def test_which_path_ran_on_this_host():
    import perf  # Debian's linux-perf module
    can = hasattr(perf.evsel, "read") and hasattr(getattr(perf, "evlist", None), "enable")
    assert counters.binding_can_count(perf) is can
    with counters.Counters({"pf": counters.GENERIC_EVENTS["page_faults"]}) as c:
        assert c.path == ("binding" if can else "syscall")


@pytest.mark.needs("perf-software")
def test_hardware_counter_absence_is_reported_with_errno():
    with counters.counting({"cycles": counters.GENERIC_EVENTS["cycles"],
                            "pf": counters.GENERIC_EVENTS["page_faults"]}) as r:
        pass
    assert r["pf"].available
    if not r["cycles"].available:  # as on hosts without a hardware PMU
        assert "perf_event_open(cycles)" in r["cycles"].error
        assert r["cycles"].value is None
