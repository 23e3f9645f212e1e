# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus server on loopback for the tests: started with the
scrape jobs given, its HTTP API queried, always stopped."""
from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from nttrace.bench.daemon_process import free_port


def start(tmp_path: Path, jobs: str, interval: str = "1s", timeout: str | None = None) -> tuple[subprocess.Popen, int]:
    """Prometheus scraping `jobs` (YAML of scrape_configs entries) every
    `interval`: its process and port. The caller stops it (or use running())."""
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
                   + (f"  scrape_timeout: {timeout}\n" if timeout else "") + f"scrape_configs:\n{jobs}")
    proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


@contextmanager
def running(tmp_path: Path, jobs: str, interval: str = "1s", timeout: str | None = None):
    """start(), yielding the port; stopped on the way out."""
    proc, port = start(tmp_path, jobs, interval, timeout)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def job(name: str, target_port: int, extra: str = "") -> str:
    return f"  - job_name: {name}\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n{extra}"


def api(port: int, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]
