# SPDX-License-Identifier: Apache-2.0
"""The daemon's endpoint against hostile and slow clients, each with its
outcome: bad credentials, malformed Authorization headers, an old TLS
version, a missing client certificate, oversized headers, and 200 idle
connections (plus a slowloris trickle) held open while a real Prometheus
scrapes. After all of them the daemon is alive, serves, and holds no more
threads or file descriptors than before."""
import base64
import json
import os
import socket
import ssl
import time
import urllib.parse
import urllib.request
from pathlib import Path

import bcrypt
import pytest

import pki
import promserver
from nttrace.bench.daemon_process import DaemonProcess
from nttrace.bench.daemon_process import free_port
from nttrace.exporters.http_server import HEADER_TIMEOUT_S

LIVE = ("root", "tracepoint", "bcc")
pytestmark = pytest.mark.needs("openssl")   # the test certificates (pki.py)
PASSWORD = "s3cret-scrape"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def threads_and_fds(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Threads:")))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def held_connections(pid: int) -> int:
    """The process's descriptors that hold a TCP connection: its sockets that
    are neither a listener nor a Unix, netlink or UDP socket. (A connection
    closed on both sides leaves /proc/net/tcp, but its socket lives on until
    the descriptor is closed, so the sockets are counted from the descriptors.)"""
    sockets = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue        # closed meanwhile
        if link.startswith("socket:["):
            sockets.add(link[8:-1])
    other = set()
    for table, inode_at, listening in (("tcp", 9, "0A"), ("tcp6", 9, "0A"), ("udp", 9, None), ("udp6", 9, None),
                                       ("unix", 6, None), ("netlink", 9, None)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > inode_at and (listening is None or fields[3] == listening):
                other.add(fields[inode_at])
    return len(sockets - other)


def quiet_threads_and_fds(pid: int, timeout: float = HEADER_TIMEOUT_S + 5) -> tuple[int, int]:
    """The daemon's threads and descriptors with no client connection left:
    each connection holds a thread and a descriptor until it ends, so the
    figures are read once none is held and two readings 0.2 s apart agree."""
    last, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = threads_and_fds(pid)
        if held_connections(pid) == 0 and now == last:
            return now
        last = now
        time.sleep(0.2)
    raise AssertionError(f"the daemon still held {held_connections(pid)} connection(s) after {timeout} s")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A daemon serving TLS with RequireAndVerifyClientCert and a bcrypt user."""
    d = tmp_path_factory.mktemp("attacks")
    server_ca, client_ca = pki.ca(d, "server-ca"), pki.ca(d, "client-ca")
    server = pki.signed(d, "server", server_ca, server=True)
    client = pki.signed(d, "client", client_ca, server=False)
    h = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    web = d / "web.yml"

    def write_web(min_version="TLS12"):
        tmp = d / "web.yml.new"
        tmp.write_text(f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
                       f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {client_ca.cert}\n"
                       f"  min_version: {min_version}\nbasic_auth_users:\n  prometheus: '{h}'\n")
        tmp.rename(web)
    write_web()
    port = free_port()
    proc = DaemonProcess(d, config_text=f'listen = "127.0.0.1:{port}"\nprobes = ["migrate"]\n'
                                        f'web_config_file = "{web}"\n')
    proc.port = port
    ctx = ssl.create_default_context(cafile=str(server_ca.cert))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    proc.context, proc.auth_headers = ctx, {"Authorization": basic("prometheus", PASSWORD)}
    proc.server_ca, proc.client, proc.write_web, proc.dir = server_ca, client, write_web, d
    try:
        proc.wait_message("READY=1")
        yield proc
    finally:
        proc.close()


def tls_connect(d, ctx: ssl.SSLContext | None = None) -> ssl.SSLSocket:
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    return (ctx or d.context).wrap_socket(s, server_hostname="127.0.0.1")


def raw_request(d, request: bytes, ctx: ssl.SSLContext | None = None) -> bytes:
    with tls_connect(d, ctx) as t:
        t.sendall(request)
        out = b""
        while True:
            try:
                chunk = t.recv(65536)
            except (ConnectionError, ssl.SSLError):
                break
            if not chunk:
                break
            out += chunk
        return out


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def get(d, auth: str | None) -> int:
    req = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (f"Authorization: {auth}\r\n".encode() if auth else b"") + b"\r\n"
    return status_of(raw_request(d, req))


@pytest.mark.needs(*LIVE)
@pytest.mark.parametrize("what,auth,expected", [
    ("the right password", basic("prometheus", PASSWORD), 200),
    ("a wrong password", basic("prometheus", "guess"), 401),
    ("an unknown user", basic("root", PASSWORD), 401),
    ("no Authorization header", None, 401),
    ("a scheme other than Basic", "Bearer abc.def", 401),
    ("Basic with invalid base64", "Basic !!!not-base64!!!", 401),
    ("Basic without a colon", "Basic " + base64.b64encode(b"prometheus").decode(), 401),
    ("Basic with non-UTF-8 bytes", "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(), 401),
    ("a password over 72 bytes whose first 72 match", basic("prometheus", PASSWORD + "x" * 80), 401),
])
def test_credentials(guarded, what, auth, expected):
    assert get(guarded, auth) == expected, what


@pytest.mark.needs(*LIVE)
def test_a_client_without_the_required_certificate_is_refused(guarded):
    no_cert = ssl.create_default_context(cafile=str(guarded.server_ca.cert))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        # TLS 1.3: the server's refusal arrives as an alert on the first read
        raw_request(guarded, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " +
                    basic("prometheus", PASSWORD).encode() + b"\r\n\r\n", no_cert) or (_ for _ in ()).throw(
                        ConnectionError("empty answer"))
    # a certificate from another CA: the same
    other_ca = pki.ca(guarded.dir, "stranger-ca")
    stranger = pki.signed(guarded.dir, "stranger", other_ca, server=False)
    other = ssl.create_default_context(cafile=str(guarded.server_ca.cert))
    other.load_cert_chain(str(stranger.cert), str(stranger.key))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        raw_request(guarded, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", other) or (_ for _ in ()).throw(
            ConnectionError("empty answer"))


def tls11_client(d) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")          # OpenSSL 3 offers TLS 1.1 only at level 0
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.load_verify_locations(str(d.server_ca.cert))
    ctx.load_cert_chain(str(d.client.cert), str(d.client.key))
    return ctx


@pytest.mark.needs(*LIVE)
def test_a_tls_1_1_client_is_refused_by_the_tls_1_2_minimum(guarded):
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + basic("prometheus", PASSWORD).encode() + b"\r\n\r\n"
    with pytest.raises(ssl.SSLError):
        raw_request(guarded, req, tls11_client(guarded))
    # the control: the same client is served once the file allows TLS 1.0
    # (so it is the minimum that refused it, not the client); then back
    guarded.write_web(min_version="TLS10")
    try:
        assert status_of(raw_request(guarded, req, tls11_client(guarded))) == 200
    finally:
        guarded.write_web(min_version="TLS12")
    with pytest.raises(ssl.SSLError):
        raw_request(guarded, req, tls11_client(guarded))


@pytest.mark.needs(*LIVE)
def test_oversized_headers_are_refused(guarded):
    auth = b"Authorization: " + basic("prometheus", PASSWORD).encode() + b"\r\n"
    long_line = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + auth + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n"
    assert status_of(raw_request(guarded, long_line)) == 431
    many = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + auth + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n"
    assert status_of(raw_request(guarded, many)) == 431
    long_target = b"GET /" + b"m" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    assert status_of(raw_request(guarded, long_target)) == 414


def trickle_closed_by(t: ssl.SSLSocket, deadline_wall: float) -> bool:
    """Keep trickling a byte a second; True once the server has closed the
    connection (EOF, reset or a TLS alert), False if it is still open at the
    deadline. A read that only times out is not a close."""
    import select
    t.setblocking(True)
    while time.time() < deadline_wall:
        try:
            t.sendall(b"X")
        except (ssl.SSLError, ConnectionError, BrokenPipeError):
            return True
        readable, _, _ = select.select([t], [], [], 1.0)
        if readable:   # a TLS 1.3 session ticket also makes it readable: only EOF or an error is a close
            t.settimeout(0.2)
            try:
                if t.recv(1) == b"":
                    return True
            except socket.timeout:
                pass
            except (ssl.SSLError, ConnectionError):
                return True
    return False


def _prom_job(d) -> str:
    pw = d.dir / "prom-password"
    pw.write_text(PASSWORD)
    return promserver.job("nttrace", d.port, f"    scheme: https\n    tls_config:\n      ca_file: {d.server_ca.cert}\n"
                          f"      cert_file: {d.client.cert}\n      key_file: {d.client.key}\n"
                          f"    basic_auth:\n      username: prometheus\n      password_file: {pw}\n")


def _query(prom_port: int, q: str, **extra) -> list:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": q, **extra})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.mark.needs(*LIVE, "prometheus")
def test_200_idle_connections_and_a_slowloris_do_not_block_prometheus_and_leak_nothing(guarded, tmp_path):
    pid = guarded.proc.pid
    assert guarded.get("/healthz")[0] == 200
    base_threads, base_fds = quiet_threads_and_fds(pid)
    prom, prom_port = promserver.start(tmp_path, _prom_job(guarded), timeout="900ms")
    idle, trickle = [], None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if _query(prom_port, 'up{job="nttrace"} == 1'):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("Prometheus never scraped the daemon")
        opened_at = time.time()
        idle = [socket.create_connection(("127.0.0.1", guarded.port), timeout=30) for _ in range(200)]
        # a slowloris: a TLS connection that sends its request a byte every second, never finishing
        trickle = tls_connect(guarded)
        trickle.sendall(b"GET /metrics HTTP/1.1\r\n")
        during = []
        for _ in range(int(HEADER_TIMEOUT_S) - 2):
            time.sleep(1)
            trickle.sendall(b"X")
            during.append(threads_and_fds(pid))
        assert max(t for t, _f in during) >= base_threads + 200     # they were being held, a thread each
        # every scrape while they were open succeeded, and quickly
        window = f"[{int(time.time() - opened_at)}s]"
        ups = _query(prom_port, f'min_over_time(up{{job="nttrace"}}{window})')
        scrapes = _query(prom_port, f'count_over_time(up{{job="nttrace"}}{window})')
        slowest = _query(prom_port, f'max_over_time(scrape_duration_seconds{{job="nttrace"}}{window})')
        assert ups and float(ups[0]["value"][1]) == 1.0, "a scrape failed while idle connections were open"
        assert scrapes and float(scrapes[0]["value"][1]) >= HEADER_TIMEOUT_S - 5
        assert float(slowest[0]["value"][1]) < 0.5, slowest
        # the server closes them: every idle connection sees EOF (or a reset) within the header timeout
        t_closed = time.monotonic() + HEADER_TIMEOUT_S + 5
        for s in idle:
            s.settimeout(max(0.1, t_closed - time.monotonic()))
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        # the trickle kept sending, so no read timeout applies: the header deadline must close it
        assert trickle_closed_by(trickle, opened_at + HEADER_TIMEOUT_S + 5), "the slowloris was never closed"
    finally:
        for s in idle:
            s.close()
        if trickle is not None:
            trickle.close()
        prom.terminate()
        prom.wait(timeout=10)
    # nothing leaked: with every connection gone, back to the threads and descriptors of before
    threads, fds = quiet_threads_and_fds(pid)
    assert threads <= base_threads and fds <= base_fds, ((threads, fds), (base_threads, base_fds))
    assert guarded.proc.poll() is None and guarded.get("/healthz")[0] == 200
    assert "Traceback" not in guarded.read_log()
