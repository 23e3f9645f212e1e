# SPDX-License-Identifier: Apache-2.0
"""The daemon for real: systemd notify, reload, termination, a port in use,
the unit's capabilities, and a real Prometheus server (its config checks
and shipped files: tests/unit/test_daemon_config.py)."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import nttrace
import promserver
from conftest import bpftool_prog_ids, live_nt_revision, one_line_error, programs_left, run_nttrace
from nttrace.bench.daemon_process import NTTRACE, DaemonProcess
from nttrace.bench.daemon_process import free_port
from nttrace.probes import DEFAULT
from nttrace.kernel import vmstat
from nttrace.workloads import triggers
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.page_ref import PageRefProbe

DATA = Path(nttrace.__file__).parent / "data"
LIVE = ("root", "tracepoint", "bcc")


@pytest.fixture
def daemon(tmp_path):
    made = []

    def start(**kw):
        sub = tmp_path / f"d{len(made)}"
        sub.mkdir()
        d = DaemonProcess(sub, **kw)
        made.append(d)
        return d
    yield start
    for d in made:
        d.close()


@pytest.mark.needs(*LIVE, "bpftool")
def test_port_in_use_is_exit_2_and_leaves_nothing_attached(tmp_path):
    import socket
    before = bpftool_prog_ids()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_nttrace("daemon", "--listen", f"127.0.0.1:{port}")
    assert proc.returncode == 2
    assert "Address already in use" in one_line_error(proc)
    assert programs_left(before) == set()


@pytest.mark.needs(*LIVE)
def test_ready_watchdog_metrics_and_healthz(daemon):
    d = daemon(watchdog_usec=1_000_000)
    ready = d.wait_message("READY=1")
    assert ready < 60
    d.wait_message("WATCHDOG=1", timeout=5)
    code, body = d.get("/healthz")
    assert code == 200 and json.loads(body)["probes"][MigrateProbe.name]["status"] == "attached"
    assert d.metric("nttrace_probe_up", probe=MigrateProbe.name) == 1.0
    assert d.metric("nttrace_build_info", version=nttrace.__version__) == 1.0
    assert d.metric("nttrace_kernel_info", nt_revision=live_nt_revision()) == 1.0
    assert d.metric("nttrace_vmstat_pgmigrate_success_total") is not None
    assert d.metric("nttrace_vmstat_pgdemote_kswapd_total", node="0") is not None
    assert d.get("/nope")[0] == 404


@pytest.mark.needs(*LIVE)
def test_metrics_follow_a_compaction(daemon):
    d = daemon()
    d.wait_message("READY=1")
    before = d.metric("nttrace_migrate_calls_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION") or 0
    vm_before = vmstat.read()["pgmigrate_success"]
    p_before = d.metric("nttrace_migrate_pages_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION", result="succeeded") or 0
    triggers.compaction()
    vm_after = vmstat.read()["pgmigrate_success"]
    assert d.metric("nttrace_migrate_calls_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION", nt="false") > before
    p_after = d.metric("nttrace_migrate_pages_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION", result="succeeded")
    assert p_after - p_before == vm_after - vm_before
    count = d.metric("nttrace_migrate_duration_seconds_count", mode="MIGRATE_SYNC", reason="MR_COMPACTION")
    inf = d.metric("nttrace_migrate_duration_seconds_bucket", mode="MIGRATE_SYNC", reason="MR_COMPACTION", le="+Inf")
    assert count == inf == d.metric("nttrace_migrate_calls_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION")


@pytest.mark.needs(*LIVE, "bpftool")
def test_sigterm_exits_within_2s_and_detaches(daemon):
    before = bpftool_prog_ids()
    d = daemon()
    d.wait_message("READY=1")
    assert bpftool_prog_ids() != before
    took = d.stop(signal.SIGTERM)
    assert d.proc.returncode == 0, d.read_log()
    assert took < 2.0, f"took {took:.2f}s"
    assert programs_left(before) == set()
    d.wait_message("STOPPING=1", timeout=1)
    # the stop says what each step took, each probe's detach among them
    stopped = re.search(r"stopped in (\d+\.\d+)s \((.*)\)$", d.read_log(), re.M)
    assert stopped, d.read_log()
    steps = dict(re.findall(r"([\w ]+?) (\d+\.\d+)s(?:, |$)", stopped[2]))
    attached = list(DEFAULT)
    assert {"http", "probes", "perf", *(f"probe {n}" for n in attached)} <= set(steps), stopped[0]
    assert float(stopped[1]) <= took + 0.01
    assert abs(sum(float(steps[f"probe {n}"]) for n in attached) - float(steps["probes"])) < 0.01 * len(attached)


@pytest.mark.needs(*LIVE)
def test_a_daemon_that_does_not_stop_in_time_is_killed_with_its_threads_kernel_stacks(daemon):
    d = daemon()
    d.wait_message("READY=1")
    os.kill(d.proc.pid, signal.SIGSTOP)     # a stopped process takes no SIGTERM until it is continued
    with pytest.raises(subprocess.TimeoutExpired):
        d.stop(signal.SIGTERM, timeout=1)
    assert d.proc.returncode == -signal.SIGKILL
    threads = re.findall(r"^thread (\d+) (\S+) state (\S) wchan (\S+)$", d.stuck, re.M)
    # the main thread, the HTTP server's and its reaper's (Python 3.11 names no OS thread: all are "nttrace")
    assert len(threads) >= 3 and {name for _t, name, _s, _w in threads} == {"nttrace"}, d.stuck
    assert all(state == "T" for _t, _n, state, _w in threads), d.stuck
    assert "[<0>]" in d.stuck, d.stuck     # root reads the kernel stacks


@pytest.mark.needs(*LIVE)
def test_sighup_applies_a_changed_config_keeping_unchanged_counters(daemon):
    d = daemon()
    d.wait_message("READY=1")
    triggers.compaction()
    calls = d.metric("nttrace_migrate_calls_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION")
    assert calls and calls > 0
    d.config.write_text(d.default_config(probes=(MigrateProbe.name, CopyProbe.name, PageRefProbe.name), perf=("llc",)))
    d.messages.clear()
    d.proc.send_signal(signal.SIGHUP)
    d.wait_message("RELOADING=1", timeout=30)
    d.wait_message("READY=1", timeout=30)
    health = json.loads(d.get("/healthz")[1])
    assert set(health["probes"]) == {MigrateProbe.name, CopyProbe.name, PageRefProbe.name}
    assert health["probes"][MigrateProbe.name]["status"] == "attached"
    for name in (CopyProbe.name, PageRefProbe.name):  # live where the host has kprobes / page_ref (the lab)
        st = health["probes"][name]
        assert st["status"] == "attached" or st["reason"]
        assert d.metric("nttrace_probe_up", probe=name) == (1.0 if st["status"] == "attached" else 0.0)
    assert "llc" in health["perf"]
    # the migrate probe was not re-attached: its counters continue
    assert d.metric("nttrace_migrate_calls_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION") >= calls
    # and dropping a probe detaches it
    d.config.write_text(d.default_config(probes=(MigrateProbe.name,)))
    d.messages.clear()
    d.proc.send_signal(signal.SIGHUP)
    d.wait_message("READY=1", timeout=30)
    assert set(json.loads(d.get("/healthz")[1])["probes"]) == {MigrateProbe.name}
    assert d.metric("nttrace_migrate_calls_total", mode="MIGRATE_SYNC", reason="MR_COMPACTION") >= calls


@pytest.mark.needs(*LIVE)
def test_a_reload_widens_the_watchdog_while_it_compiles(daemon):
    d = daemon(watchdog_usec=2_000_000)
    d.wait_message("READY=1")
    d.messages.clear()
    d.config.write_text(d.default_config(probes=(MigrateProbe.name, PageRefProbe.name)))
    d.proc.send_signal(signal.SIGHUP)
    d.wait_message("RELOADING=1", timeout=30)
    d.wait_message("WATCHDOG_USEC=2000000", timeout=60)
    msgs = [m for _t, m in d.messages]
    reloading = next(m for m in msgs if m.startswith("RELOADING=1"))
    assert "WATCHDOG_USEC=300000000" in reloading and "WATCHDOG=1" in reloading
    assert msgs.index(reloading) < next(i for i, m in enumerate(msgs) if m.startswith("WATCHDOG_USEC=2000000"))


@pytest.mark.needs(*LIVE, "no-page-ref")
def test_no_probe_can_attach_exits_3_at_once(daemon):
    # Found when systemd first ran the unit: the HTTP server's shutdown waited
    # for a serve loop that had never started, so this case hung until
    # systemd's start timeout.
    t0 = time.monotonic()
    d = daemon(config_text=f'listen = "127.0.0.1:{free_port()}"\nprobes = ["page_ref"]\n')
    try:
        d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the daemon hung: {d.read_log()}")
    assert d.proc.returncode == 3 and time.monotonic() - t0 < 60
    log = d.read_log()
    assert "nttrace: no probe could attach (page_ref: " in log and "Traceback" not in log


@pytest.mark.needs(*LIVE, "bpftool")
def test_reloads_under_scrape_load_never_fail_a_scrape(daemon):
    """4 threads scrape /metrics without pause while SIGHUP switches the probe
    set between ["migrate"] and ["memmap"] every 1.5 s for 40 s (the issue's
    reproduction: 4 of 20,586 scrapes answered 500 before the fix)."""
    import threading
    import urllib.error
    before = bpftool_prog_ids()
    d = daemon()
    d.wait_message("READY=1")
    stop = threading.Event()
    results = {"ok": 0, "failed": []}
    lock = threading.Lock()

    def scrape():
        while not stop.is_set():
            try:
                code, body = d.get("/metrics", timeout=20)
                ok = code == 200 and "nttrace_probe_up" in body
                err = None if ok else f"HTTP {code}: {body[:200]}"
            except (OSError, urllib.error.URLError) as exc:
                err = f"{exc.__class__.__name__}: {exc}"
            with lock:
                if err:
                    results["failed"].append(err)
                else:
                    results["ok"] += 1

    threads = [threading.Thread(target=scrape) for _ in range(4)]
    for t in threads:
        t.start()
    reloads = 0
    try:
        t_end = time.monotonic() + 40
        while time.monotonic() < t_end:
            probes = (MemmapProbe.name,) if reloads % 2 == 0 else (MigrateProbe.name,)
            d.config.write_text(d.default_config(probes=probes))
            d.proc.send_signal(signal.SIGHUP)
            reloads += 1
            time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert d.proc.poll() is None, d.read_log()
    assert results["failed"] == [], (len(results["failed"]), results["failed"][:5])
    assert results["ok"] > 100 and reloads >= 25
    assert "scrape failed" not in d.read_log()
    # the last reload takes effect: the daemon settles on the last config's probes
    # (a bcc compile cannot be interrupted), then stops
    deadline = time.monotonic() + 60
    while True:
        log = d.read_log()
        time.sleep(2)
        serving = set(json.loads(d.get("/healthz")[1])["probes"])
        if serving == set(probes) and d.read_log() == log:
            break
        assert time.monotonic() < deadline, f"serving {sorted(serving)} 60 s after the last reload asked for " \
                                            f"{sorted(probes)}:\n{d.read_log()[-2000:]}"
    assert d.stop(signal.SIGTERM) < 2.0 and d.proc.returncode == 0
    assert programs_left(before) == set()


@pytest.mark.needs(*LIVE)
def test_sighup_with_bad_config_keeps_running_on_the_old_one(daemon):
    d = daemon()
    d.wait_message("READY=1")
    d.config.write_text('listen = "127.0.0.1:99999"\nprobes = ["migrate"]\n')
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "reload rejected" not in d.read_log() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = d.read_log()
    assert "reload rejected, keeping the running configuration" in log and "not a port number" in log
    assert d.proc.poll() is None
    assert d.get("/healthz")[0] == 200 and d.metric("nttrace_probe_up", probe=MigrateProbe.name) == 1.0


def unit_capabilities() -> list[str]:
    unit = (DATA / "nttrace.service").read_text()
    return re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()


@pytest.mark.needs(*LIVE, "setpriv")
def test_daemon_runs_with_exactly_the_units_capabilities(daemon):
    caps = unit_capabilities()
    assert caps == ["CAP_BPF", "CAP_PERFMON"]
    bounding = "-all," + ",".join("+" + c[4:].lower() for c in caps)
    d = daemon(prefix=["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all", "--no-new-privs"])
    d.wait_message("READY=1")
    status = Path(f"/proc/{d.proc.pid}/status").read_text()
    eff = int(re.search(r"CapEff:\s*(\w+)", status).group(1), 16)
    assert eff == (1 << 38) | (1 << 39)  # CAP_PERFMON | CAP_BPF, nothing else
    assert json.loads(d.get("/healthz")[1])["probes"][MigrateProbe.name]["status"] == "attached"


# -- a real Prometheus server -------------------------------------------------------
def start_prometheus(tmp_path: Path, target_port: int) -> tuple[subprocess.Popen, int]:
    """A Prometheus server on loopback scraping the daemon every second."""
    return promserver.start(tmp_path, promserver.job("nttrace", target_port))


@pytest.mark.needs(*LIVE, "prometheus")
def test_prometheus_scrapes_the_daemon(daemon, tmp_path):
    d = daemon()
    d.wait_message("READY=1")
    prom, prom_port = start_prometheus(tmp_path, d.port)
    try:
        triggers.compaction()
        query = 'nttrace_migrate_calls_total{mode="MIGRATE_SYNC",reason="MR_COMPACTION"}'
        url = f"http://127.0.0.1:{prom_port}/api/v1/query?query=" + urllib.parse.quote(query)
        value, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    result = json.loads(r.read())["data"]["result"]
                if result and float(result[0]["value"][1]) > 0:
                    value = float(result[0]["value"][1])
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        assert value and value > 0, "Prometheus never saw the compaction"
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/targets", timeout=2) as r:
            targets = json.loads(r.read())["data"]["activeTargets"]
        assert targets[0]["health"] == "up"
    finally:
        prom.terminate()
        prom.wait(timeout=10)


def _prom_query(port: int, path: str, **params) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def _scraped_after(port: int, job: str, when: float, timeout: float = 30) -> None:
    """Until Prometheus has scraped `job` after the wall time `when`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            last = _prom_query(port, "query", query=f'timestamp(up{{job="{job}"}})')
            if last and float(last[0]["value"][1]) > when:
                return
        except OSError:
            pass        # not listening yet
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape {job} within {timeout} s")


@pytest.mark.needs(*LIVE, "prometheus")
def test_histograms_keep_one_le_set_and_prometheus_quantiles_agree(daemon, tmp_path):
    """A real Prometheus scrapes the daemon across compactions: every series
    of every histogram has the same le set, without gaps, in every scrape,
    and histogram_quantile(0.5) falls in the log2 bucket of nttrace's own p50."""
    from nttrace.probe_framework import histogram
    d = daemon()
    d.wait_message("READY=1")
    prom, prom_port = start_prometheus(tmp_path, d.port)
    try:
        t0 = time.time()
        for _ in range(3):       # each compaction scraped before the next: the bucket counts change between scrapes
            triggers.compaction()
            _scraped_after(prom_port, "nttrace", time.time())
        t1 = time.time()
        series = 'nttrace_migrate_duration_seconds_bucket{mode="MIGRATE_SYNC",reason="MR_COMPACTION"}'
        counts = _prom_query(prom_port, "query_range", query=f'sum({series.replace("_bucket", "_count")})',
                             start=t0, end=t1, step="1s")
        assert counts and len({v for _ts, v in counts[0]["values"]}) > 1, "no scrape saw the counts change"
        lo, hi = histogram.LATENCY_SLOTS
        # the layout the module promises: log2 slots' inclusive upper bounds, 2**(slot+1) - 1 ns, doubling from
        # 2.047 us to 68.7 s, then +Inf
        expected = [(2 ** (slot + 1) - 1) / 1e9 for slot in range(lo, hi + 1)] + [float("inf")]
        assert expected[0] == 2.047e-6 and round(expected[-2], 1) == 68.7
        # every histogram the daemon exports, every series, every scrape: the whole layout
        metrics = {r["metric"]["__name__"] for r in _prom_query(prom_port, "query", time=t1,
                                                                 query='{__name__=~"nttrace_.+_bucket"}')}
        assert "nttrace_migrate_duration_seconds_bucket" in metrics, metrics
        for metric in sorted(metrics):
            rows = _prom_query(prom_port, "query_range", query=metric, start=t0, end=t1, step="1s")
            assert rows
            les_at: dict = {}
            for row in rows:
                key = tuple(sorted((k, v) for k, v in row["metric"].items() if k not in ("le", "__name__")))
                for ts, _value in row["values"]:
                    les_at.setdefault((key, ts), set()).add(float(row["metric"]["le"]))
            assert len({frozenset(s) for s in les_at.values()}) == 1, "le sets differ between scrapes or series"
            assert sorted(next(iter(les_at.values()))) == expected
        # histogram_quantile against nttrace's percentile of the same samples
        at = t1
        q = _prom_query(prom_port, "query", query=f"histogram_quantile(0.5, {series})", time=at)
        buckets = _prom_query(prom_port, "query", query=series, time=at)
        assert q and buckets
        prom_p50 = float(q[0]["value"][1])
        cum = sorted((float(b["metric"]["le"]), float(b["value"][1])) for b in buckets)
        assert cum[-1][1] > 0
        slots, prev = {}, 0.0
        for i, (le, count) in enumerate(cum):
            slots[lo + i] = int(count - prev)   # +Inf is slot hi+1
            prev = count
        ours = histogram.percentile(slots, 0.5) / 1e9

        def bucket_of(v):
            return next(i for i, (le, _c) in enumerate(cum) if v <= le)
        assert bucket_of(prom_p50) == bucket_of(ours), (prom_p50, ours, cum)
    finally:
        prom.terminate()
        prom.wait(timeout=10)
