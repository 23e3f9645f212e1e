# SPDX-License-Identifier: Apache-2.0
"""docs/probes.md's "Adding a probe" on this host: the toy probe of
tests/unit/test_probe_adding.py (execs, on sched:sched_process_exec), its
four files written into a copy of the tree as the recipe says, compiled and
attached by the copy's nttrace: `trace` counts the execs it sees, validate's
probe.toy check passes, the copy's own live test of it passes, and the
daemon serves its metric on /metrics. Every program it loaded is gone
afterwards."""
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, bpftool_prog_ids, programs_left


def adding():
    spec = importlib.util.spec_from_file_location("test_probe_adding", REPO / "tests" / "unit" / "test_probe_adding.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def toy_tree(tmp_path_factory):
    """(tree, environment): a copy of the tree with the toy added, and the
    environment that imports the copy's nttrace."""
    recipe = adding()
    tmp = tmp_path_factory.mktemp("toy")
    tree, site = tmp / "tree", tmp / "site"
    recipe.copy_tree(tree)
    recipe.importable(tree, site)
    recipe.add_toy(tree)
    env = {**os.environ, "PYTHONPATH": str(site), "NTTRACE_LAB_PREBUILD": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    return tree, env


def execs_meanwhile(stop: threading.Event) -> threading.Thread:
    def run():
        while not stop.is_set():
            subprocess.run(["true"], check=True)
            time.sleep(0.05)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_trace_counts_the_toys_execs(toy_tree):
    tree, env = toy_tree
    before = bpftool_prog_ids()
    stop = threading.Event()
    execs_meanwhile(stop)
    try:
        proc = subprocess.run([sys.executable, "-m", "nttrace", "trace", "--probes", "toy", "--duration", "3", "--json"],
                              cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
    assert proc.returncode == 0, proc.stderr
    toy = json.loads(proc.stdout)["probes"]["toy"]
    assert toy["status"] == "attached" and toy["via"] == "tracepoint", toy
    assert toy["rows"][0]["execs"] >= 1, toy
    assert programs_left(before) == set()


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_validate_runs_the_toys_check_and_the_copys_own_live_test_passes(toy_tree):
    tree, env = toy_tree
    before = bpftool_prog_ids()
    proc = subprocess.run([sys.executable, "-m", "nttrace", "validate", "--check", "probe.toy", "--exercise", "toy",
                           "--json"], cwd=tree, env=env, capture_output=True, text=True, timeout=180)
    (check,) = json.loads(proc.stdout)["checks"]
    assert check["id"] == "probe.toy" and check["status"] == "pass", check
    assert "toy probe:" in check["summary"]
    live = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/live/test_probe_toy.py"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert live.returncode == 0 and "1 passed" in live.stdout, live.stdout[-2000:] + live.stderr[-1000:]
    assert programs_left(before) == set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in lines if line.startswith("nttrace_")}


@pytest.mark.needs("root", "tracepoint", "bcc", "bpftool")
def test_the_daemon_serves_the_toys_metric(toy_tree, tmp_path):
    tree, env = toy_tree
    before = bpftool_prog_ids()
    port = free_port()
    config = tmp_path / "nttrace.toml"
    config.write_text(f'listen = "127.0.0.1:{port}"\nprobes = ["toy"]\nperf = []\n')
    log = open(tmp_path / "daemon.log", "w+")
    daemon = subprocess.Popen([sys.executable, "-m", "nttrace", "daemon", "--config", str(config)], cwd=tree, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, metrics = time.monotonic() + 90, {}
        while metrics.get('nttrace_probe_up{probe="toy",via="tracepoint"}') != 1.0:
            assert daemon.poll() is None and time.monotonic() < deadline, (log.seek(0), log.read())[1]
            time.sleep(0.3)
            try:
                metrics = scrape(port)
            except OSError:
                continue
        first = metrics["nttrace_toy_execs_total"]
        for _ in range(5):
            subprocess.run(["true"], check=True)
        assert scrape(port)["nttrace_toy_execs_total"] >= first + 5
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, (log.seek(0), log.read())[1]
    assert programs_left(before) == set()
