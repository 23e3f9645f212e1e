# SPDX-License-Identifier: Apache-2.0
"""native.nt_benefit judges each patch series on its own: the template
series by its memmap model, the NT demotion RFC by its page copy. A verdict
is PASS or WARN only where the runs' interval clears the line; otherwise it
says, in words, that the runs are too spread to call."""
import pytest

from nttrace.reference.measurements import median_interval
from nttrace.validate import runner
from nttrace.validate.checks import NOISY, PASS, SKIP, WARN, SeriesVerdict, overall
from nttrace.validate.checks import native as native_checks


def test_the_median_interval_is_the_order_statistics_with_95_percent_coverage():
    xs = list(range(1, 12))                      # n = 11: x(2)..x(10), 1 - 2*12/2048
    lo, hi, cov = median_interval(xs[::-1])
    assert (lo, hi) == (2, 10) and cov == pytest.approx(1 - 24 / 2048)
    lo, hi, cov = median_interval(list(range(1, 6)))   # n = 5 cannot reach 95%: the range, and says so
    assert (lo, hi) == (1, 5) and cov == pytest.approx(1 - 2 / 32)
    lo, hi, cov = median_interval(list(range(1, 21)))  # n = 20: x(6)..x(15), coverage 0.959
    assert (lo, hi) == (6, 15) and cov >= 0.95


def _memmap(slow, movnti, widest=None, cached=None):
    n = len(slow)
    widest = widest or movnti
    cached = cached or [s * 0.6 for s in slow]
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    per_run = {"slow": slow, "template_movnti": movnti, "template_nt": widest, "template_cached": cached,
               "movnti_write_limit": [m * 0.98 for m in movnti], "nt_write_limit": [w * 0.98 for w in widest]}
    mm = {k + "_ms": med(v) for k, v in per_run.items()}
    mm.update(per_run_ms=per_run, descriptors=262144, descriptor_size=64, bytes=16 << 20,
              widest_nt_store="AVX-512 64-byte streaming store", runs=n)
    return mm


def _pages(v3, memcpy_gbps=5.0, **others):
    rows = [{"primitive": "memcpy", "gbps_median": memcpy_gbps, "vs_memcpy_runs": [1.0] * len(v3)},
            {"primitive": "movnti_prefetchnta/per_folio", "gbps_median": memcpy_gbps * sorted(v3)[len(v3) // 2],
             "vs_memcpy_runs": v3}]
    for name, ratios in others.items():
        rows.append({"primitive": name.replace("__", "/"), "gbps_median": memcpy_gbps, "vs_memcpy_runs": ratios})
    return {"bytes": 8 << 20, "folio_pages": 512, "rows": rows}


def test_a_template_clearly_shorter_than_the_slow_path_passes_with_its_reason():
    v = native_checks.memmap_verdict(_memmap([3.0 + 0.01 * i for i in range(11)], [0.8 + 0.01 * i for i in range(11)]))
    assert v.status == PASS and v.series == "zone_device_template"
    assert "shorter than the slow path" in v.summary and "n=11" in v.summary and "would speed" in v.summary
    assert "99% interval" in v.summary
    assert v.evidence["template_movnti_shorter_pct"]["low"] >= native_checks.MEMMAP_MIN_GAIN_PCT


def test_a_template_no_shorter_than_the_slow_path_warns():
    v = native_checks.memmap_verdict(_memmap([3.0] * 11, [3.05 + 0.01 * i for i in range(11)]))
    assert v.status == WARN and "longer than the slow path" in v.summary and "would not speed" in v.summary


@pytest.mark.parametrize("shorter_pct", [
    [83, 3, 67, 2, 50, 7, 77, 5, 33, 10, 60],     # median 33%, above the line
    [-5, 25, -2, 20, 0, 15, 2, 30, 4, 8, 6],      # median 6%, below it
])
def test_a_spread_memmap_series_is_noisy_not_a_verdict(shorter_pct):
    movnti = [3.0 * (1 - p / 100) for p in shorter_pct]
    v = native_checks.memmap_verdict(_memmap([3.0] * 11, movnti))
    assert v.status == NOISY and v.summary.startswith("too noisy to call") and "spans the 10% line" in v.summary


def test_nt_page_copies_slower_than_memcpy_warn_that_the_series_would_slow_demotion():
    pc = _pages([0.70 + 0.005 * i for i in range(11)], movnti_prefetchnta__per_page=[0.62] * 11,
                movnti_prefetchnta__none=[0.75] * 11, avx512_stream__per_folio=[1.4] * 11)
    v = native_checks.demotion_verdict(pc)
    assert v.status == WARN and v.series == "nt_demotion"
    assert "NT page copies" in v.summary and "% slower than memcpy" in v.summary
    assert "would slow demotion here" in v.summary
    assert "drained per page x0.62" in v.summary and "undrained as v2 x0.75" in v.summary and "AVX-512" in v.summary


def test_nt_page_copies_as_fast_as_memcpy_pass():
    v = native_checks.demotion_verdict(_pages([1.10 + 0.01 * i for i in range(11)]))
    assert v.status == PASS and "faster than memcpy" in v.summary and "would not slow" in v.summary


@pytest.mark.parametrize("ratios,median", [
    ([1.3, 0.5, 1.1, 0.6, 0.92, 0.7, 1.2, 0.8, 0.85, 0.9, 1.0], "x0.90"),   # median below the line
    ([1.3, 0.7, 1.1, 1.05, 1.02, 0.8, 1.2, 1.08, 0.6, 1.25, 1.4], "x1.08"),  # median above it
])
def test_spread_page_copies_are_too_noisy_to_call(ratios, median):
    # whichever side the median is on, an interval that spans the line gives no verdict
    v = native_checks.demotion_verdict(_pages(ratios))
    assert v.status == NOISY and v.summary.startswith("too noisy to call") and median in v.summary


@pytest.mark.parametrize("statuses,want", [((PASS, PASS), PASS), ((PASS, WARN), WARN), ((NOISY, WARN), WARN),
                                          ((PASS, NOISY), SKIP), ((NOISY, NOISY), SKIP)])
def test_the_checks_status_from_its_series(statuses, want):
    assert overall([SeriesVerdict(str(i), "t", s, "") for i, s in enumerate(statuses)]) == want


def test_the_table_prints_a_line_per_series():
    report = {"version": "0", "kernel": {"source": "btf", "nt_revision": "none"}, "machine": {"kind": "vm"},
              "summary": {"pass": 0, "fail": 0, "warn": 1, "skip": 0},
              "checks": [{"id": "native.nt_benefit", "status": "warn", "summary": "both", "evidence": {},
                          "series": [{"series": "a", "title": "template series", "status": "pass", "summary": "fast"},
                                     {"series": "b", "title": "NT demotion", "status": "warn", "summary": "slow"}]}]}
    import io
    out = io.StringIO()
    runner.print_table(report, out)
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["PASS", "native.nt_benefit", "template", "series:", "fast"]
    assert lines[2].split() == ["WARN", "native.nt_benefit", "NT", "demotion:", "slow"]
    out = io.StringIO()
    runner.print_markdown(report, out)
    assert "| PASS | native.nt_benefit | template series: fast |" in out.getvalue()


# A clock as coarse as the thread CPU clock of a guest whose sched_clock
# counts jiffies (no usable TSC, as in a TCG guest): 4 ms steps at HZ=250.
JIFFY_NS = 4_000_000


def _jiffy_clock():
    import time
    return time.monotonic_ns() // JIFFY_NS * JIFFY_NS


def test_a_memmap_run_with_cells_timed_at_0_ns_says_it_cannot_be_timed():
    # what a coarse clock gives: some cells 0 ns, the rest one tick
    slow = [0.0, 4.0, 0.0, 4.0, 4.0, 0.0, 4.0, 0.0, 4.0, 4.0, 0.0]
    movnti = [4.0, 0.0, 0.0, 4.0, 0.0, 0.0, 4.0, 0.0, 0.0, 4.0, 0.0]
    mm = _memmap(slow, movnti)
    mm["per_run_ms"]["movnti_write_limit"] = [0.0] * 11
    mm["movnti_write_limit_ms"] = 0.0
    v = native_checks.memmap_verdict(mm)
    assert v.status == NOISY and v.status not in (PASS, WARN)
    assert v.summary.startswith("cannot be timed on this clock") and "0 ns" in v.summary and "no verdict" in v.summary
    assert v.evidence["untimed_cells"]["movnti_write_limit"] == 11


def test_memmap_cells_of_a_few_clock_ticks_are_not_a_verdict():
    # every cell non-zero but only 1 or 2 ticks of a 4 ms clock: a ratio of ticks, not of times
    mm = _memmap([8.0] * 11, [4.0] * 11)
    mm["clock_tick_ms"] = JIFFY_NS / 1e6
    v = native_checks.memmap_verdict(mm)
    assert v.status == NOISY and "cannot be timed on this clock" in v.summary and "seen to step 4 ms" in v.summary
    assert "55 of 55 memmap cells lasted under 10 of its steps (slow 11/11," in v.summary
    mm["clock_tick_ms"] = 0.001    # the same times on a 1 us clock are a verdict (50% shorter)
    assert native_checks.memmap_verdict(mm).status == PASS


def test_a_clock_that_steps_in_microseconds_but_stood_still_during_a_cell_is_named():
    # the lab's TCG guest (TSC marked unstable): the thread CPU clock steps
    # 2 us, yet a 32 MiB memmap cell measured 0 ns
    mm = _memmap([26.0 + 0.1 * i for i in range(15)], [5.0 + 0.1 * i for i in range(14)] + [0.0],
                 widest=[35.0] * 15)
    mm["per_run_ms"]["movnti_write_limit"] = [3.5] * 15
    mm.update(clock="thread_cpu", clock_tick_ms=0.002)
    v = native_checks.memmap_verdict(mm)
    assert v.status == NOISY
    assert v.summary == ("cannot be timed on this clock (thread_cpu, seen to step 2 us): 1 of 75 memmap cells "
                         "measured 0 ns (template_movnti 1/15); no verdict")


def test_page_copies_timed_at_0_ns_say_they_cannot_be_timed():
    pc = _pages([1.0] * 11)
    for row in pc["rows"]:
        row["ns_runs"] = [0, 4_000_000] * 5 + [0]
    pc["clock_tick_ms"] = JIFFY_NS / 1e6
    v = native_checks.demotion_verdict(pc)
    assert v.status == NOISY and v.summary.startswith("cannot be timed on this clock") and "page-copy" in v.summary


def test_the_quick_plans_cells_on_a_jiffy_clock_give_no_verdict_and_raise_nothing(monkeypatch):
    # The reproduction: the real memmap model and page copies, their cells
    # far shorter than 4 ms, timed by a 4 ms thread CPU clock.
    from nttrace.reference import measurements, native
    if not native.have_nt_backend():
        pytest.skip("no NT backend on this CPU (needs x86-64 SSE2)")
    monkeypatch.setitem(measurements.CLOCKS, "thread_cpu", _jiffy_clock)
    plan = measurements.Plan.quick(None)
    plan.memmap_descriptors, plan.page_copy_bytes, plan.cold_runs = 4096, 1 << 20, 7
    mm = measurements.memmap_model(plan)
    pc = measurements.page_copy(plan)
    assert mm["clock_tick_ms"] >= JIFFY_NS / 1e6 and pc["clock_tick_ms"] >= JIFFY_NS / 1e6
    verdicts = [native_checks.memmap_verdict(mm), native_checks.demotion_verdict(pc)]
    for v in verdicts:
        assert v.status == NOISY and "cannot be timed on this clock" in v.summary, v.summary
    assert overall(verdicts) == SKIP
