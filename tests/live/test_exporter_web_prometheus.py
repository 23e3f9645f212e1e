# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus scraping the daemon over TLS with a client certificate
and basic auth while the certificates and the password rotate under it,
without a restart (the web config's schema, errors and endpoint on their
own: tests/unit/test_exporter_web.py)."""
import json
import ssl
import time
import urllib.request
from pathlib import Path

import pytest

import pki
import promserver
from nttrace.bench.daemon_process import DaemonProcess
from nttrace.bench.daemon_process import free_port
from web_client import basic, bhash, fetch as _fetch

LIVE = ("root", "tracepoint", "bcc")
pytestmark = pytest.mark.needs("openssl")   # the test certificates (pki.py)


# -- with the daemon and a real Prometheus --------------------------------------------
class Rotation:
    """Server and client certificates, a password, and the files the daemon
    and Prometheus read; rotate() replaces all of them in place."""

    def __init__(self, d: Path):
        self.d = d
        self.server_ca = pki.ca(d, "server-ca")
        self.live = d / "live"
        self.live.mkdir()
        self.generation = 0
        self._make(1)

    def _make(self, gen: int):
        g = self.d / f"gen{gen}"
        g.mkdir()
        self.server = pki.signed(g, "server", self.server_ca, server=True)
        self.client_ca = pki.ca(g, "client-ca")
        self.client = pki.signed(g, "client", self.client_ca, server=False, san="URI:spiffe://nttrace/prometheus")
        self.password = f"secret-{gen}"
        self.generation = gen

    def install(self):
        for name, src in (("server.crt", self.server.cert), ("server.key", self.server.key),
                          ("clients-ca.crt", self.client_ca.cert), ("client.crt", self.client.cert),
                          ("client.key", self.client.key)):
            tmp = self.live / (name + ".new")
            tmp.write_bytes(src.read_bytes())
            tmp.rename(self.live / name)
        (self.live / "password").write_text(self.password)
        web = self.live / "web-config.yml"
        tmp = self.live / "web-config.yml.new"
        tmp.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: clients-ca.crt\n"
                       "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
                       f"basic_auth_users:\n  prometheus: '{bhash(self.password, '$2y$', cost=10)}'\n")
        tmp.rename(web)
        return web

    def rotate(self):
        self.old = (self.client, self.password, self.server)
        self._make(self.generation + 1)
        return self.install()

    def context(self, client: pki.Pair | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.server_ca.cert))
        if client is not None:
            ctx.load_cert_chain(str(client.cert), str(client.key))
        return ctx


def _peer_cert_der(port: int, ctx: ssl.SSLContext) -> bytes:
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            return t.getpeercert(binary_form=True)


def _prom_targets(prom_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/targets", timeout=5) as r:
        return {t["labels"]["job"]: t for t in json.loads(r.read())["data"]["activeTargets"]}


def _wait_for_scrape(prom_port: int, job: str, after: float, healthy: bool, timeout: float = 40) -> dict:
    """The target's first scrape that started after `after` (wall clock)."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        try:
            t = _prom_targets(prom_port).get(job)
        except OSError:
            t = None
        if t and t.get("lastScrape", "").startswith("20"):
            from datetime import datetime
            ts = datetime.fromisoformat(t["lastScrape"][:26].rstrip("Z") + "+00:00").timestamp()
            seen = t
            if ts > after + 0.05 and (t["health"] == "up") == healthy:
                return t
        time.sleep(0.3)
    raise AssertionError(f"no {'healthy' if healthy else 'failed'} scrape of {job} after the rotation: {seen}")


@pytest.mark.needs(*LIVE, "prometheus")
def test_prometheus_scrapes_over_mtls_and_bcrypt_through_a_rotation_without_restart(tmp_path):
    rot = Rotation(tmp_path)
    web = rot.install()
    port = free_port()
    d = DaemonProcess(tmp_path, config_text=f'listen = "127.0.0.1:{port}"\nprobes = ["migrate"]\n'
                                            f'web_config_file = "{web}"\n')
    d.port = port
    prom = None
    try:
        d.wait_message("READY=1")
        pid = d.proc.pid
        # two Prometheus jobs: one whose files rotate with the daemon's, one kept on generation 1
        keep = tmp_path / "kept"
        keep.mkdir()
        for name in ("client.crt", "client.key", "password"):
            (keep / name).write_bytes((rot.live / name).read_bytes())

        def job(name, files):
            return (f"  - job_name: {name}\n    scheme: https\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n"
                    f"    tls_config:\n      ca_file: {rot.server_ca.cert}\n      cert_file: {files / 'client.crt'}\n"
                    f"      key_file: {files / 'client.key'}\n"
                    f"    basic_auth:\n      username: prometheus\n      password_file: {files / 'password'}\n")
        prom, prom_port = promserver.start(tmp_path, job("rotating", rot.live) + job("kept", keep), timeout="900ms")
        before = time.time()
        assert _wait_for_scrape(prom_port, "rotating", before, healthy=True)["health"] == "up"
        assert _wait_for_scrape(prom_port, "kept", before, healthy=True)["health"] == "up"
        first_cert = _peer_cert_der(port, rot.context(rot.client))

        rot.rotate()
        rotated_at = time.time()
        # the next scrapes: the rotating job succeeds with the new files, the kept one fails with the old
        assert _wait_for_scrape(prom_port, "rotating", rotated_at, healthy=True)["health"] == "up"
        failed = _wait_for_scrape(prom_port, "kept", rotated_at, healthy=False)
        assert failed["health"] == "down" and failed["lastError"], failed
        # and by hand, each credential on its own
        old_client, old_password, _old_server = rot.old
        new_ctx, old_ctx = rot.context(rot.client), rot.context(old_client)
        assert _fetch(port, new_ctx, basic("prometheus", rot.password)) == 200
        assert _fetch(port, new_ctx, basic("prometheus", old_password)) == 401
        assert str(_fetch(port, old_ctx, basic("prometheus", rot.password))).startswith("refused")
        assert _peer_cert_der(port, new_ctx) != first_cert          # the new server certificate is served
        assert d.proc.pid == pid and d.proc.poll() is None          # no restart
        assert "web config reloaded" in d.read_log()
        d.context, d.auth_headers = new_ctx, basic("prometheus", rot.password)
        assert d.metric("nttrace_web_config_last_reload_successful") == 1.0
        with urllib.request.urlopen(urllib.request.Request(f"https://127.0.0.1:{port}/metrics",
                                                           headers=d.auth_headers), context=new_ctx) as r:
            assert r.headers["X-Content-Type-Options"] == "nosniff"

        # a broken change keeps the last good configuration, and the metric says so
        web.write_text("basic_auth_users:\n  prometheus: not-a-hash\n")
        assert _fetch(port, new_ctx, basic("prometheus", rot.password)) == 200
        assert d.metric("nttrace_web_config_last_reload_successful") == 0.0
        assert "web config not reloaded, keeping the last good one" in d.read_log()
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=10)
        d.close()
