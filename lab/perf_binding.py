# SPDX-License-Identifier: Apache-2.0
"""perf's Python binding built from the lab's Linux source (tools/perf), the
build whose `evsel.read()` can count: Debian 12's python3-perf (6.1) cannot,
so without this the adapter's binding path (nttrace.perf.counters) never runs.

    python3 -m lab.perf_binding          # build (or find) it; prints its directory
    python3 -m lab.perf_binding --compare [--rounds N] [--json]
        # the adapter's binding path against its syscall path on the same work

Cache ($NTTRACE_PERF_CACHE, default /var/cache/nttrace-perf): one directory
per key (the source package, the Python it is built for, the compiler, the
make flags), holding perf*.so, build.log and build.json; `complete` last.
The source comes from kernel_build.py's private apt state (the same .deb
the lab kernels are built from). Only the extension is built, with every
optional library off: it counts through libperf, which needs none of them.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from lab import kernel_build

HERE = Path(__file__).resolve().parent

CACHE = Path(os.environ.get("NTTRACE_PERF_CACHE", "/var/cache/nttrace-perf"))
PYTHON = "/usr/bin/python3"     # the interpreter the venv is made from (--system-site-packages)
FLAGS = ("NO_LIBPERL=1", "NO_LIBTRACEEVENT=1", "NO_LIBBPF=1", "NO_JEVENTS=1", "NO_LIBUNWIND=1", "NO_LIBDW=1",
         "NO_SLANG=1", "NO_GTK2=1", "NO_LIBNUMA=1", "NO_LIBCAP=1", "NO_BABELTRACE=1", "NO_LIBLLVM=1",
         "NO_CAPSTONE=1", "NO_DEMANGLE=1", "NO_LIBPFM4=1", "NO_SDT=1", "NO_BPF_SKEL=1")


class PerfBindingError(kernel_build.KernelBuildError):
    pass


def _python_facts() -> tuple[str, str]:
    import subprocess
    out = subprocess.run([PYTHON, "-c", "import sys, sysconfig; print(sys.version.split()[0]); "
                                        "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], out[1]


def key(deb: Path) -> str:
    version, suffix = _python_facts()
    return kernel_build.sha(json.dumps([deb.name, deb.stat().st_size, version, suffix,
                                         kernel_build.compiler_version(), FLAGS]).encode())[:16]


def build(timeout: float = 1800) -> Path:
    """The directory holding perf*.so (built, or found in the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    fetch_log = CACHE / "fetch.log"
    deb = kernel_build.fetch_source(fetch_log)
    d = CACHE / f"perf-{key(deb)}"
    if (d / "complete").exists():
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    log = d / "build.log"
    tree = kernel_build.unpacked_source(deb, log)
    out = d / "build"
    out.mkdir()
    _version, suffix = _python_facts()
    target = out / "python" / f"perf{suffix}"
    t0 = time.monotonic()
    try:
        kernel_build.run_step(["make", "-C", str(tree / "tools" / "perf"), f"O={out}", f"PYTHON={PYTHON}",
                           f"-j{kernel_build.JOBS}", *FLAGS, str(target)],
                          log, "perf-binding", "make tools/perf python extension", timeout=timeout)
    except kernel_build.KernelBuildError as exc:
        raise PerfBindingError("perf-binding", exc.step, log, "see the log") from None
    if not target.exists():
        raise PerfBindingError("perf-binding", "make", log, f"{target.name} was not produced")
    shutil.copy2(target, d / target.name)
    shutil.rmtree(out)      # objects: ~100 MB, not needed once the .so is made
    (d / "build.json").write_text(json.dumps({"source": deb.name, "seconds": round(time.monotonic() - t0, 1),
                                              "python": PYTHON, "module": target.name, "flags": FLAGS}, indent=1))
    (d / "complete").write_text("ok\n")
    return d


# The work both paths count, run in a child whose `perf` is the built one.
WORKER = r"""
import ctypes, json, mmap, sys, time
import perf
from nttrace.perf import counters
PAGES, SPIN_S, ROUNDS = (int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))
EVENTS = {k: counters.GENERIC_EVENTS[k] for k in ("page_faults", "task_clock")}

def work():
    m = mmap.mmap(-1, PAGES * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, PAGES * 4096)   # a fault a page
    end = time.thread_time() + SPIN_S
    while time.thread_time() < end:                                                 # task clock
        pass
    return m

rows = []
for r in range(ROUNDS):
    for path in (("binding", "syscall") if r % 2 == 0 else ("syscall", "binding")):
        with counters.Counters(EVENTS, force_path=path) as c:
            c.start()
            t0 = time.thread_time_ns()
            m = work()
            cpu_ns = time.thread_time_ns() - t0
            c.stop()
            got = c.readings()
        m.close()
        rows.append({"round": r, "path": c.path, "cpu_ns": cpu_ns,
                     **{k: v.as_json() for k, v in got.items()}})
print(json.dumps({"module": perf.__file__, "can_count": counters.binding_can_count(perf),
                  "pages": PAGES, "spin_s": SPIN_S, "rows": rows}))
"""


def compare(directory: Path, pages: int = 20000, spin_s: float = 0.2, rounds: int = 5,
            python: str | None = None) -> dict:
    """Both counting paths of nttrace.perf.counters on the same work, in
    alternating order, in a child that imports the built binding."""
    import subprocess
    python = python or sys.executable
    env = {**os.environ, "PYTHONPATH": f"{directory}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run([python, "-c", WORKER, str(pages), str(spin_s), str(rounds)], capture_output=True,
                       text=True, env=env, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"binding worker exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


def summarize(result: dict) -> dict[str, dict]:
    """Per path: runs, page faults (median, min, max) and the task clock over
    the thread's own CPU time (median)."""
    import statistics
    out = {}
    for path in ("binding", "syscall"):
        rows = [r for r in result["rows"] if r["path"] == path]
        pf = [r["page_faults"]["value"] for r in rows]
        tc = [r["task_clock"]["value"] / r["cpu_ns"] for r in rows]
        out[path] = {"n": len(rows), "faults_median": statistics.median(pf), "faults_min": min(pf),
                     "faults_max": max(pf), "task_clock_over_cpu": statistics.median(tc)}
    return out


def _summary(result: dict) -> str:
    lines = [f"perf binding {result['module']} (can count: {result['can_count']}); "
             f"{result['pages']} first-touched pages and {result['spin_s']} s of CPU a run"]
    for path, s in summarize(result).items():
        lines.append(f"  {path:8} page faults median {s['faults_median']:9.0f} (min {s['faults_min']:.0f}, "
                     f"max {s['faults_max']:.0f}), task-clock / thread CPU time median "
                     f"{s['task_clock_over_cpu']:.4f}, n={s['n']}")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", action="store_true", help="run both counting paths on the same work")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pages", type=int, default=20000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        d = build()
    except kernel_build.KernelBuildError as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        sys.exit(1)
    if not args.compare:
        print(d)
        sys.exit(0)
    result = compare(d, pages=args.pages, rounds=args.rounds)
    print(json.dumps(result, indent=1) if args.json else _summary(result))
