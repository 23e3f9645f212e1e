# SPDX-License-Identifier: Apache-2.0
"""perf.*: what the copies cost in counted events."""
from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

from nttrace.validate.checks import FAIL, PASS, SKIP, WARN, CheckResult, check

FIRST_TOUCH_PAGES = 16384


@check("perf.software", "software counters through the perf adapter: page faults of a native first touch")
def software(ctx) -> CheckResult:
    from nttrace.perf import counters
    cid = "perf.software"
    if not ctx.caps["perf:software"].available:
        return CheckResult(cid, SKIP, f"perf software events unavailable: {ctx.caps['perf:software'].detail}")
    n = FIRST_TOUCH_PAGES

    def first_touch():
        m = mmap.mmap(-1, n * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, n * 4096)
        return m

    specs = {k: counters.GENERIC_EVENTS[k] for k in ("page_faults", "task_clock")}
    m, readings = counters.around(first_touch, specs)
    m.close()
    pf = readings["page_faults"]
    ev = {k: r.as_json() for k, r in readings.items()}
    ev["pages"] = n
    if not pf.available:
        return CheckResult(cid, FAIL, f"page-faults could not be counted: {pf.error}", ev)
    err = abs(pf.value - n) / n
    ev["error_fraction"] = err
    status = PASS if err <= 0.05 else FAIL
    return CheckResult(cid, status, f"{pf.value:.0f} page faults for {n} first-touched pages "
                       f"({100 * err:.2f}% off) via the {pf.path} path", ev)


@check("perf.llc", "LLC misses of NT vs cached cold page copies (native)")
def llc(ctx) -> CheckResult:
    from nttrace.perf import counters
    from nttrace.reference import native
    cid = "perf.llc"
    if not ctx.caps["perf:hardware"].available:
        return CheckResult(cid, SKIP, f"no hardware PMU: {ctx.caps['perf:hardware'].detail}")
    specs = {k: counters.GENERIC_EVENTS[k] for k in ("llc_read_misses", "llc_write_misses", "cache_misses")}
    nbytes = 256 << 20
    results = {}
    with native.Buffer(nbytes, fill=1) as src, native.Buffer(nbytes, fill=2) as dst, \
            native.Buffer(nbytes // 2, fill=3) as evict:
        for name in native.DEMOTION_COPIES:
            ctypes.memset(evict.addr, 4, evict.size)
            _, r = counters.around(lambda: native.demotion_copy(dst, src, nbytes, name), specs)
            results[name] = {k: v.as_json() for k, v in r.items()}
    usable = [k for k in specs if results["cached"][k]["error"] is None and results["nt"][k]["error"] is None]
    if not usable:
        return CheckResult(cid, SKIP, "no LLC event opens on this CPU", results)
    key = usable[0]
    c, n = results["cached"][key]["value"], results["nt"][key]["value"]
    results["ratio_nt_over_cached"] = (n / c) if c else None
    summary = f"{key}: cached {c:.0f}, NT {n:.0f} over {nbytes >> 20} MiB of cold page copies"
    return CheckResult(cid, PASS if n <= c else WARN, summary, results)


@check("perf.device_reads", "memory-device read/write bytes of NT vs cached copies (uncore/CXL PMUs)")
def device_reads(ctx) -> CheckResult:
    from nttrace.perf import counters, memory_traffic, sysfs_pmu
    from nttrace.reference import native
    cid = "perf.device_reads"
    if not ctx.caps["perf:uncore"].available:
        return CheckResult(cid, SKIP, f"no uncore or CXL PMU: {ctx.caps['perf:uncore'].detail}")
    pmus = sysfs_pmu.discover(Path("/sys"))
    events, notes = memory_traffic.traffic_events(pmus)
    if not events:
        return CheckResult(cid, SKIP, "uncore PMUs present but none with named read/write byte events: " + "; ".join(notes))
    by_key = {f"{e.pmu}:{e.direction}": e for e in events}
    specs = {k: pmus[e.pmu].spec(e.event) for k, e in by_key.items()}
    cpus = {k: (pmus[e.pmu].cpus[:1] or [0]) for k, e in by_key.items()}
    nbytes = 256 << 20
    # Copy onto the memory the PMUs watch (a CXL expander is its own node).
    target = next((e.node for e in events if e.node), None)
    results = {"target_node": target}
    with native.Buffer(nbytes, fill=1) as src, native.Buffer(nbytes, fill=2, node=target) as dst:
        for name in native.DEMOTION_COPIES:
            readings = {}
            for key, spec in specs.items():
                with counters.counting({key: spec}, system_wide=True, cpus=cpus[key]) as r:
                    native.demotion_copy(dst, src, nbytes, name)
                readings.update(r)
            results[name] = {k: {"bytes": (r.value or 0) * by_key[k].bytes_per_count, **r.as_json()}
                             for k, r in readings.items()}
    results["notes"] = notes
    reads = {n: sum(v["bytes"] for k, v in results[n].items() if k.endswith(":read")) for n in ("cached", "nt")}
    results["read_bytes"] = reads
    summary = f"device reads over {nbytes >> 20} MiB copied: cached {reads['cached'] / 2**20:.0f} MiB, NT {reads['nt'] / 2**20:.0f} MiB"
    return CheckResult(cid, PASS if reads["nt"] <= reads["cached"] else WARN, summary, results)
