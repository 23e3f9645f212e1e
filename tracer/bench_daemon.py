"""`nttrace bench daemon`: start-up to READY, resident memory, idle CPU
share, and scrape latency under a bounded loopback load, for the daemon
with its default probe set. Every request goes to 127.0.0.1; the load is a
fixed number of requests from a fixed number of threads."""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from nttrace.daemon_process import DaemonProcess

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run(requests: int = 2000, concurrency: int = 4, idle_s: float = 10.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="nttrace-bench-") as tmp:
        d = DaemonProcess(Path(tmp))
        try:
            ready_s = d.wait_message("READY=1", timeout=120)
            pid = d.proc.pid
            cpu0, t0 = _cpu_seconds(pid), time.monotonic()
            time.sleep(idle_s)
            idle_share = (_cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
            rss_idle = _rss_kib(pid)
            url = f"http://127.0.0.1:{d.port}/metrics"
            latencies: list[float] = []
            lock = threading.Lock()
            per_thread = requests // concurrency

            def worker():
                mine = []
                for _ in range(per_thread):
                    t = time.perf_counter()
                    with urllib.request.urlopen(url, timeout=10) as r:
                        r.read()
                    mine.append(time.perf_counter() - t)
                with lock:
                    latencies.extend(mine)

            threads = [threading.Thread(target=worker) for _ in range(concurrency)]
            w0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - w0
            rss_loaded = _rss_kib(pid)
            peak = re.search(r"its peak (\d+) MiB", d.read_log())
        finally:
            d.stop()
            d.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    return {"probes": ["migrate"], "ready_s": ready_s, "idle_cpu_share": idle_share, "idle_s": idle_s,
            "rss_kib_idle": rss_idle, "rss_kib_after_load": rss_loaded,
            "loader_peak_mib": int(peak.group(1)) if peak else None,
            "scrapes": len(latencies), "concurrency": concurrency, "scrapes_per_s": len(latencies) / wall,
            "scrape_ms": {"p50": q[49] * 1e3, "p99": q[98] * 1e3, "max": latencies[-1] * 1e3}}


def main(args) -> int:
    r = run(requests=args.requests, concurrency=args.concurrency, idle_s=args.idle)
    if args.json:
        json.dump(r, sys.stdout, indent=2)
        print()
        return 0
    print(f"start to READY      {r['ready_s']:.2f} s")
    print(f"idle CPU share      {100 * r['idle_cpu_share']:.2f}% of one CPU over {r['idle_s']:.0f} s")
    print(f"resident memory     {r['rss_kib_idle'] / 1024:.1f} MiB idle, {r['rss_kib_after_load'] / 1024:.1f} MiB after load")
    if r["loader_peak_mib"] is not None:
        print(f"loader's peak       {r['loader_peak_mib']} MiB (bcc and LLVM, gone once it has handed over)")
    s = r["scrape_ms"]
    print(f"scrapes             {r['scrapes']} from {r['concurrency']} threads, {r['scrapes_per_s']:.0f}/s; "
          f"p50 {s['p50']:.2f} ms, p99 {s['p99']:.2f} ms, max {s['max']:.2f} ms")
    return 0
