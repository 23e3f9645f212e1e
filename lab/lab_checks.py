# SPDX-License-Identifier: Apache-2.0
"""Assertions the lab tests share (the stock guest and the lab's kernels),
and the helpers the host's and the guest's scripts both use: polling, and a
guest scenario's result file."""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path


def wait_until(pred, timeout: float, step: float = 0.2):
    """pred()'s first truthy value within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def write_result(path: Path, main) -> None:
    """Run a guest scenario's main() and write what it returned, or the
    error that stopped it with its traceback, to `path` as JSON: the host's
    test reads either."""
    try:
        result = main()
    except Exception as exc:  # noqa: BLE001 - the host reads the error
        import traceback
        result = {"error": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(path).write_text(json.dumps(result, indent=1, default=str))


def checks(report: dict) -> dict:
    return {c["id"]: c for c in report.get("checks", [])}


def tick_ms_of_config(config: str) -> int:
    """The kernel's tick in ms (1000 / CONFIG_HZ) from the .config it was
    built with: the lab's kernels carry theirs."""
    hz = re.search(r"^CONFIG_HZ=(\d+)$", config, re.M)
    assert hz, "CONFIG_HZ missing from the kernel's config"
    return 1000 // int(hz[1])


def kernel_tick_ms(lines: list[dict]) -> int:
    """The tick of a kernel whose config is not at hand (the stock guest's):
    every value its line prints is a multiple of it, so over 30 calls the
    gcd finds it. It cannot when every call prints the same count (under
    icount a call takes the same number of instructions each time); such
    lines say nothing of the tick, and the caller must pass it."""
    values = {k["ms"] for k in lines if k["ms"]}
    assert len(values) > 1, f"every call printed {values}: the tick cannot be told from the lines"
    tick = math.gcd(*values)
    assert tick in (1, 2, 3, 4, 10), tick
    return tick


# The largest burst of catching-up jiffies measured past the kernel's last
# read (a slow host, nt-v3 fsdax, HZ=1000); a run's clock check allows one.
CATCH_UP_TICKS = 8
# The fewest calls whose median the clock check holds to two ticks. A run
# of four (the page_ref run's three rebinds and first bind) can lie wholly
# inside one stretch of a starved guest: 4, 2, 0, 2 and 4, 4, 5, 0 ticks
# over are measured (nt-v3 devdax, page_ref on), the monotonic clock
# agreeing with the probe's jiffies, while the 31-call runs of the same
# probe in the same boots keep their medians at 0.
MEDIAN_MIN_CALLS = 10


def memmap_matches_the_kernels_line(result: dict, pgmap: str, shift: int, runs: int,
                                    report_key: str = "report", lines_key: str = "kernel_debug_lines",
                                    tick_ms: int | None = None) -> dict:
    """The memmap probe's calls against memmap_init_zone_device()'s own
    pr_debug line, call by call; returns the check's evidence.

    Two clocks are compared. The kernel's line counts jiffies between its
    own start and end; the probe reads jiffies at entry and return too, and
    must tell the same count (the same interval, the same clock): no call
    more than a tick short of the kernel's count (the probe reads before the
    kernel's start and after its end), the median call within two ticks of
    it (in a run of MEDIAN_MIN_CALLS or more), and over the run no more than
    two extra ticks a call and one burst (CATCH_UP_TICKS, the largest seen). Under emulation (single-threaded
    TCG) jiffies stall and then catch up in
    bursts, and a burst that lands between the kernel's last read and the
    return adds ticks to the probe's count alone: 4-8 of them on four calls
    of 31 on a slow host (nt-v3, fsdax, HZ=1000).
    Such a burst is a property of the guest's clock, not of the interval, so
    it is bounded over the run, not call by call; a probe that timed a
    longer interval would move the median call.

    The probe's latency comes from the monotonic clock, which a stall does
    not stop: a call can take 17.6 ms while jiffies do not move at all, and
    four calls in a run of 31 can be 3.0-3.2 ms shorter than their 19-24
    ticks (base kernel, devdax, a slow host). Bursts cancel over a run, so the run's
    total latency is held to 10% of the kernel's total beyond what the
    kernel's count itself can be off (a tick a call: at HZ=250 the stock
    guest's line says 20 ms for calls of 22.5-23.5 ms, 10.2% short over 31
    calls), and each call to max(20%, 4 ms, 2 ticks) for nine
    calls in ten. On real hardware the clocks agree far closer.
    """
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
    tick_ms = tick_ms or kernel_tick_ms(kernel)
    # (probe's jiffies, probe's ms, kernel's ms) call by call, for the messages
    seen = [(m["jiffies"], round(m["latency_ns"] / 1e6, 2), k["ms"]) for m, k in zip(calls, kernel)]
    beyond, ticks_off = [], []
    for mine, theirs in zip(calls, kernel):
        # the kernel counts what it initialises: nr_pages less the altmap (map=dev)
        assert mine["pages_initialised"] == theirs["pages"] <= mine["nr_pages"]
        off = mine["jiffies"] * tick_ms - theirs["ms"]
        # never short by more than a tick: the probe's interval holds the kernel's
        assert off >= -tick_ms, (mine, theirs)
        ticks_off.append(off // tick_ms)
        ours_ms = mine["latency_ns"] / 1e6
        if abs(ours_ms - theirs["ms"]) > max(0.2 * theirs["ms"], 4, 2 * tick_ms):
            beyond.append((round(ours_ms, 2), theirs["ms"], mine["jiffies"]))
    assert len(beyond) <= max(1, len(calls) // 10), (beyond, seen)
    # a shorter run can lie wholly inside one stall (MEDIAN_MIN_CALLS)
    if len(calls) >= MEDIAN_MIN_CALLS:
        assert sorted(ticks_off)[len(ticks_off) // 2] <= 2, ("median call's extra ticks", seen)
    assert sum(ticks_off) <= 2 * len(calls) + CATCH_UP_TICKS, ("extra ticks over the run", sum(ticks_off), seen)
    ours_total = sum(m["latency_ns"] for m in calls) / 1e6
    kernel_total = sum(k["ms"] for k in kernel)
    # each call's interval lies within a tick of the kernel's count of it
    quantum = len(calls) * tick_ms
    assert 0.9 * (kernel_total - quantum) <= ours_total <= 1.1 * (kernel_total + quantum), \
        (ours_total, kernel_total, tick_ms, seen)
    return ev


def reclaim_matches_the_cgroups_count(report: dict) -> dict:
    """probe.reclaim in a guest with cgroup v2: memory.reclaim's
    episodes seen by the reclaim probe, their pages equal to the cgroup's
    own pgsteal delta (v2 counts what its reclaim stole)."""
    assert report["_rc"] == 0, report.get("_stderr")
    c = checks(report)["probe.reclaim"]
    assert c["status"] == "pass", c
    ev = c["evidence"]
    run, memcg = ev["run"], next(r for r in ev["rows"] if r["kind"] == "memcg")
    assert run["cgroup_version"] == 2 and run["interface"] == "memory.reclaim", run
    from nttrace.probes.reclaim import ReclaimProbe
    pgsteal = ReclaimProbe.exercise.truths[0]   # v2's own count, and its tolerance
    assert ev["source"] == pgsteal.source and run[pgsteal.key] > 0
    assert memcg["episodes"] >= 1 and pgsteal.tolerance.holds(memcg["reclaimed"], run[pgsteal.key]), ev
    assert memcg["latency_ns"]["count"] == memcg["episodes"]
    return ev
