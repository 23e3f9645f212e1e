# SPDX-License-Identifier: Apache-2.0
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

from nttrace.bench.daemon_process import DaemonProcess
from nttrace.probes import DEFAULT

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def timed_scrapes(url: str, n: int) -> list[float]:
    """n scrapes one after another, each one's seconds."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as resp:
            resp.read()
        out.append(time.perf_counter() - t)
    return out


def _open_idle(port: int, n: int) -> list:
    """n loopback connections that send nothing (a slowloris' first step)."""
    import socket
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(s)
    return out


def idle_connections_ab(port: int, n_idle: int, rounds: int = 5, scrapes: int = 200) -> dict:
    """Scrape latency, one scraper at a time as Prometheus does, with n_idle
    idle connections held open against none: interleaved rounds (none,
    idle, none, idle, ...), each well inside the server's header timeout
    (which would close the idle ones), all samples of a condition pooled.
    Timing starts 0.5 s after the idle connections are opened (after an
    equal pause without them): the steady state of connections held open,
    not the burst of accepting them."""
    url = f"http://127.0.0.1:{port}/metrics"
    samples: dict[str, list[float]] = {"none": [], "idle": []}
    per_round: list[dict] = []
    for r in range(rounds):
        for cond in (("none", "idle") if r % 2 == 0 else ("idle", "none")):
            held = _open_idle(port, n_idle) if cond == "idle" else []
            time.sleep(0.5)   # both conditions: the server has accepted the idle ones (a thread each)
            try:
                mine = timed_scrapes(url, scrapes)
            finally:
                for s in held:
                    s.close()
            samples[cond].extend(mine)
            q = statistics.quantiles(mine, n=100)
            per_round.append({"round": r, "condition": cond, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3})
    out = {"idle_connections": n_idle, "rounds": rounds, "scrapes_per_round": scrapes, "per_round": per_round}
    for cond, xs in samples.items():
        q = statistics.quantiles(xs, n=100)
        out[cond] = {"n": len(xs), "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3, "max_ms": max(xs) * 1e3}
    out["p99_ratio"] = out["idle"]["p99_ms"] / out["none"]["p99_ms"]
    ratios = sorted(a["p99_ms"] / b["p99_ms"] for a, b in zip(
        [x for x in per_round if x["condition"] == "idle"], [x for x in per_round if x["condition"] == "none"]))
    out["p99_ratio_per_round"] = ratios
    return out


def run(requests: int = 2000, concurrency: int = 4, idle_s: float = 10.0, idle_connections: int = 0,
        rounds: int = 5) -> dict:
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
                mine = timed_scrapes(url, per_thread)
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
            idle_ab = idle_connections_ab(d.port, idle_connections, rounds) if idle_connections else None
        finally:
            d.stop()
            d.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    return {"probes": list(DEFAULT), "ready_s": ready_s, "idle_cpu_share": idle_share, "idle_s": idle_s,
            "rss_kib_idle": rss_idle, "rss_kib_after_load": rss_loaded,
            "loader_peak_mib": int(peak.group(1)) if peak else None,
            "scrapes": len(latencies), "concurrency": concurrency, "scrapes_per_s": len(latencies) / wall,
            "scrape_ms": {"p50": q[49] * 1e3, "p99": q[98] * 1e3, "max": latencies[-1] * 1e3},
            **({"idle_connections_ab": idle_ab} if idle_ab else {})}


def main(args) -> int:
    r = run(requests=args.requests, concurrency=args.concurrency, idle_s=args.idle,
            idle_connections=args.idle_connections, rounds=args.rounds)
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
    ab = r.get("idle_connections_ab")
    if ab:
        print(f"one scraper, {ab['rounds']} interleaved rounds of {ab['scrapes_per_round']} scrapes a condition:")
        for cond, label in (("none", "no idle connections"), ("idle", f"{ab['idle_connections']} idle connections")):
            c = ab[cond]
            print(f"  {label:24} p50 {c['p50_ms']:.2f} ms, p99 {c['p99_ms']:.2f} ms, max {c['max_ms']:.2f} ms (n={c['n']})")
        rr = ab["p99_ratio_per_round"]
        print(f"  p99 idle/none x{ab['p99_ratio']:.2f} pooled; per round {min(rr):.2f}..{max(rr):.2f}")
    return 0
