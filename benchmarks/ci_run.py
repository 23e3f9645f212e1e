# SPDX-License-Identifier: Apache-2.0
"""Time CI as CI runs it: `bash .ci/run` on a fresh clone of HEAD, and
write what it took to a raw file for BENCHMARKS.md.

    python3 benchmarks/ci_run.py --cold --json benchmarks/ci-cold-MACHINE-DATE-COMMIT.json
    python3 benchmarks/ci_run.py --json benchmarks/ci-cached-MACHINE-DATE-COMMIT.json

--cold empties the lab's caches first (kernels, the source package, the
guest image, perf's binding, QEMU's plugin header: everything
/var/cache/nttrace-* holds, or the NTTRACE_*_CACHE directories given), so
the run pays for all of it, as on a new machine. The file holds the wall time,
pytest's summary line, each lab kernel's build.json (its build time), the
image build's log time, each lab guest's time, and the host. One run:
BENCHMARKS.md says so.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHES = [Path(os.environ.get(var, default)) for var, default in (
    ("NTTRACE_KERNEL_CACHE", "/var/cache/nttrace-kernel"), ("NTTRACE_LAB_CACHE", "/var/cache/nttrace-lab"),
    ("NTTRACE_PERF_CACHE", "/var/cache/nttrace-perf"), ("NTTRACE_QEMU_CACHE", "/var/cache/nttrace-qemu"))]


def _cpu() -> str:
    m = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    return m.group(1) if m else platform.processor()


def kernels() -> dict:
    out = {}
    for info in sorted((CACHES[0] / "kernels").glob("*/build.json")):
        b = json.loads(info.read_text())
        out[b["variant"]] = {k: b.get(k) for k in ("key", "release", "build_s", "total_s", "jobs", "built_at")}
    return out


def guests(since: float) -> dict:
    """Each lab guest's time (its console's last uptime stamp, seconds) from
    this run: the kernel variants' kept results, the stock guests' in the
    base directories of the pytest sessions started since the run began
    (pytest numbers them; a guest's directory is its name and pytest's
    counter: lab0, systemd0, ...). A guest may boot in another session than
    the rest (one run put lab0 in the session before the others'); the
    earliest session that holds a guest's name is its. The report is written
    as the run ends, so no session run by hand can stand in for it."""
    keep = Path(os.environ.get("NTTRACE_LAB_KEEP", CACHES[1] / "kernels-last-run"))
    consoles = {p.parent.name: p for p in keep.glob("*/console.log")}
    sessions = [d for d in (Path(tempfile.gettempdir()) / f"pytest-of-{os.environ.get('USER', 'root')}").glob("pytest-*")
                if d.name[7:].isdigit() and d.stat().st_mtime >= since]
    stock: dict = {}
    for session in sorted(sessions, key=lambda d: int(d.name[7:])):
        for c in session.glob("*0/console.log"):
            stock.setdefault(c.parent.name[:-1], c)
    consoles.update(stock)
    out = {}
    for name, console in sorted(consoles.items()):
        if console.stat().st_mtime < since:
            continue            # an earlier run's
        stamps = re.findall(r"^\[\s*(\d+\.\d+)\]", console.read_text(errors="replace"), re.M)
        if stamps:
            out[name] = round(float(stamps[-1]), 1)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/ci_run.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cold", action="store_true", help="empty the lab's caches first")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    if args.cold:
        for c in CACHES:
            shutil.rmtree(c, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="nttrace-ci-"))
    work.chmod(0o755)   # as a checkout is: the tests run nttrace as nobody from it
    clone = work / "main"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    # the seeds sit beside the clone, as on CI
    seeds = REPO.parent / "shared"
    if seeds.exists():
        os.symlink(seeds, work / "shared")
    log = work / "ci.log"
    t0, started = time.monotonic(), time.time()
    with open(log, "w") as f:
        rc = subprocess.run(["bash", ".ci/run"], cwd=clone, stdout=f, stderr=subprocess.STDOUT,
                            env={**os.environ, "CI": "true"}).returncode
    wall = time.monotonic() - t0
    text = log.read_text(errors="replace")
    summary = next((line.strip("= ") for line in reversed(text.splitlines())
                    if re.search(r"\d+ (passed|failed)", line)), None)
    # pytest's --durations lines (PYTEST_ARGS=--durations=N in the environment): "12.34s call  tests/x.py::t"
    slowest = [{"s": float(m[1]), "when": m[2], "test": m[3]}
               for m in re.finditer(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)$", text, re.M)]
    command = "CI=true " + (f"PYTEST_ARGS='{os.environ['PYTEST_ARGS']}' " if os.environ.get("PYTEST_ARGS") else "")
    report = {"command": command + "bash .ci/run (fresh clone)" + (", caches emptied first" if args.cold else ""),
              "cold": args.cold, "commit": head, "rc": rc, "wall_s": round(wall, 1), "pytest": summary,
              "kernels": kernels(), "host": {"cpu": _cpu(), "cpus": os.cpu_count(), "kernel": platform.release()},
              "started": time.strftime("%F %T", time.gmtime(time.time() - wall)), "runs": 1, "log": str(log),
              "slowest": slowest, "guests_s": guests(started)}
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("rc", "wall_s", "pytest")}))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
