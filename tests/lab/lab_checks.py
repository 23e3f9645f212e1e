"""Assertions the lab tests share (the stock guest and the lab's kernels)."""
from __future__ import annotations

import math


def checks(report: dict) -> dict:
    return {c["id"]: c for c in report.get("checks", [])}


def memmap_matches_the_kernels_line(result: dict, pgmap: str, shift: int, runs: int,
                                    report_key: str = "report", lines_key: str = "kernel_debug_lines") -> dict:
    """The memmap probe's calls against memmap_init_zone_device()'s own
    pr_debug line, call by call; returns the check's evidence."""
    rep = result[report_key]
    c = checks(rep)["kernel.memmap_latency"]
    assert rep["_rc"] == 0 and c["status"] == "pass", (c, rep.get("_stderr"))
    ev = c["evidence"]
    calls = ev["calls"]
    assert len(calls) == runs + 1 and ev["runs"] == runs
    assert ev["pgmap_type"] == pgmap and ev["vmemmap_shift"] == shift
    assert ev["first_bind_ms"] > 0 and ev["rebind_avg_ms"] > 0
    kernel = result[lines_key]
    assert len(kernel) == len(calls), (len(kernel), len(calls))
    # The kernel's line counts jiffies (ms = ticks * 1000 / HZ): every value
    # is a multiple of the tick. Against a periodic tick a call of D ms reads
    # as D - tick < ms < D + tick. Under TCG a guest tick can also arrive
    # late (never early), so the kernel may undercount: by the bound
    # (5% or one tick) for nine calls in ten, by at most one more tick for any.
    tick_ms = math.gcd(*(k["ms"] for k in kernel if k["ms"]))  # 1000 / HZ, 4 ms at HZ=250
    assert tick_ms in (1, 2, 3, 4, 10), tick_ms
    beyond = []
    for mine, theirs in zip(calls, kernel):
        # the kernel counts what it initialises: nr_pages less the altmap (map=dev)
        assert mine["pages_initialised"] == theirs["pages"] <= mine["nr_pages"]
        ours_ms = mine["latency_ns"] / 1e6
        assert theirs["ms"] - tick_ms < ours_ms <= theirs["ms"] + 2 * tick_ms, (ours_ms, theirs)
        # the probe's own jiffies (entry to return) tell the same tick count
        assert abs(mine["jiffies"] * tick_ms - theirs["ms"]) <= 2 * tick_ms, (mine, theirs)
        if abs(ours_ms - theirs["ms"]) > max(0.05 * theirs["ms"], tick_ms):
            beyond.append((round(ours_ms, 2), theirs["ms"], mine["jiffies"]))
    assert len(beyond) <= max(1, len(calls) // 10), beyond
    return ev
