# SPDX-License-Identifier: Apache-2.0
"""The daemon's endpoint under a password attack: 512 concurrent
connections (one asyncio process) each sending GET /metrics with a fresh
wrong password for the configured user, again and again, while one
authorised scraper asks for /metrics at 10/s (its own process). Measured:
the scraper's latency and failures (anything but 200), the attackers'
answers by status, the daemon's RSS and threads over the run, and its
own counters (nttrace_web_auth_busy_total, ..._connections_rejected_total).

The user's hash has cost 10 (the toolkit's example). The scraper's first
request is made before the attack starts (a Prometheus that was scraping
already); every attacking request is a new password, so none is cached.

    sudo .venv/bin/python benchmarks/auth_under_attack.py --seconds 30 \\
        --json benchmarks/auth-under-attack-<machine>-<date>-<commit>.json

Without --json the file is named so (machine from the CPU model: xeon-vm,
epyc-vm, as the other raw files are).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
NTTRACE = str(Path(sys.executable).with_name("nttrace"))
USER, PASSWORD = "prometheus", "the-right-one"


def machine() -> str:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.machine())
    vm = "hypervisor" in Path("/proc/cpuinfo").read_text()
    name = "xeon" if "Xeon" in cpu else "epyc" if "EPYC" in cpu else cpu.split()[0].lower()
    return f"{name}-vm" if vm else name


def commit() -> str:
    return subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "unknown"


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the attacker (a process of its own) ----------------------------------------------------
async def _attack(port: int, connections: int, seconds: float) -> dict:
    counts: dict[str, int] = {}
    end = time.monotonic() + seconds

    async def one():
        while time.monotonic() < end:
            auth = header(USER, secrets.token_hex(8))
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
                w.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n".encode())
                await w.drain()
                status = (await asyncio.wait_for(r.readline(), 15)).split(b" ")[1:2]
                key = status[0].decode() if status else "empty"
                await asyncio.wait_for(r.read(), 15)
                w.close()
            except (OSError, asyncio.TimeoutError, IndexError) as exc:
                key = type(exc).__name__
            counts[key] = counts.get(key, 0) + 1

    await asyncio.gather(*(one() for _ in range(connections)))
    return counts


def attacker_main(port: int, connections: int, seconds: float) -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    print(json.dumps(asyncio.run(_attack(port, connections, seconds))))


# -- the run ----------------------------------------------------------------------------------
def status_of(pid: int) -> dict:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0])
        elif k == "Threads":
            out[k] = int(v)
    return out


def scrape(port: int, auth: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": auth})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except OSError:
        code = -1
    return (time.perf_counter() - t0) * 1000, code


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--connections", type=int, default=512)
    ap.add_argument("--rate", type=float, default=10.0, help="authorised scrapes a second")
    ap.add_argument("--cost", type=int, default=10)
    ap.add_argument("--json", help="the raw file (default: benchmarks/auth-under-attack-MACHINE-DATE-COMMIT.json)")
    ap.add_argument("--attacker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.attacker:
        attacker_main(int(args.attacker[0]), int(args.attacker[1]), float(args.attacker[2]))
        return 0
    import bcrypt
    from nttrace.bench.daemon_process import free_port
    tmp = Path(tempfile.mkdtemp(prefix="nttrace-auth-"))
    port = free_port()
    h = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(args.cost)).decode()
    (tmp / "web.yml").write_text(f"basic_auth_users:\n  {USER}: '{h}'\n")
    (tmp / "n.toml").write_text(f'listen = "127.0.0.1:{port}"\nprobes = ["migrate"]\n'
                                f'web_config_file = "{tmp / "web.yml"}"\n')
    daemon = subprocess.Popen([NTTRACE, "daemon", "--config", str(tmp / "n.toml")], stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    threading.Thread(target=lambda: [log.append(line) for line in daemon.stderr], daemon=True).start()
    try:
        t0 = time.monotonic()
        while not any("listening on" in line for line in log):
            if daemon.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit(f"the daemon did not start: {''.join(log)}")
            time.sleep(0.1)
        good = header(USER, PASSWORD)
        first_ms, first_code = scrape(port, good)        # a Prometheus that was scraping already
        rss0 = status_of(daemon.pid)
        load0 = os.getloadavg()
        attacker = subprocess.Popen([sys.executable, __file__, "--attacker", str(port), str(args.connections),
                                     str(args.seconds)], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)                                   # the attack under way
        samples, codes, rss = [], {}, []
        period, end = 1.0 / args.rate, time.monotonic() + args.seconds - 2.0
        nxt = time.monotonic()
        while time.monotonic() < end:
            ms, code = scrape(port, good)
            samples.append(ms)
            codes[str(code)] = codes.get(str(code), 0) + 1
            rss.append(status_of(daemon.pid))
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
        attack = json.loads(attacker.communicate(timeout=120)[0] or "{}")
        time.sleep(1.0)
        after = status_of(daemon.pid)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": good})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    q = statistics.quantiles(samples, n=100, method="inclusive")
    raw = {
        "command": " ".join([Path(sys.executable).name, "benchmarks/auth_under_attack.py"] + (argv or sys.argv[1:])),
        "commit": commit(), "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpu": next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                             if l.startswith("model name")), "cpus": os.cpu_count(), "kernel": platform.release(),
                 "loadavg_before": load0, "loadavg_after": os.getloadavg()},
        "setup": {"connections": args.connections, "seconds": args.seconds, "scrape_rate_per_s": args.rate,
                  "bcrypt_cost": args.cost, "attack": "a fresh wrong password for the configured user, every request"},
        "scraper": {"first_before_attack_ms": round(first_ms, 2), "first_code": first_code, "n": len(samples),
                    "codes": codes, "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2), "max_ms": round(max(samples), 2)},
        "attack": {"responses": attack, "per_s": round(sum(attack.values()) / args.seconds, 1)},
        "daemon": {"rss_kib_before": rss0["VmRSS"], "rss_kib_max": max(r["VmRSS"] for r in rss),
                   "rss_kib_after": after["VmRSS"], "hwm_kib": after["VmHWM"],
                   "threads_max": max(r["Threads"] for r in rss),
                   "auth_busy_total": metric(text, "nttrace_web_auth_busy_total"),
                   "connections_rejected_total": metric(text, "nttrace_web_connections_rejected_total")},
    }
    out = Path(args.json or HERE / f"auth-under-attack-{machine()}-{time.strftime('%Y-%m-%d')}-{raw['commit']}.json")
    out.write_text(json.dumps(raw, indent=1) + "\n")
    print(json.dumps(raw["scraper"]), json.dumps(raw["daemon"]), f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
