# SPDX-License-Identifier: Apache-2.0
"""The daemon's HTTP endpoint: /metrics (Prometheus text format) and
/healthz (JSON probe status), with TLS, client certificates, basic auth,
response headers and a rate limit from the web configuration
(nttrace.exporters.web_config, re-read by web_config_reload).

Held against slow and hostile clients (tests/live/test_exporter_attacks.py):
the accept loop never reads from a client, so one that stalls cannot block
another. Each connection has its own thread, which does the TLS handshake
and reads the request; a connection that has not delivered its request
headers within HEADER_TIMEOUT_S of connecting is shut down by a reaper
(a slowloris that trickles a byte at a time included), and beyond
MAX_CONNECTIONS open at once a new one is closed at accept (counted:
nttrace_web_connections_rejected_total; open now:
nttrace_web_connections_in_flight). A request whose credentials need a
bcrypt compare when every bcrypt slot is taken is answered 429
(web_auth.AuthBusy; nttrace_web_auth_busy_total), so wrong passwords
queue nothing in front of a scrape whose credentials are cached; a 401 or
that 429 is sent after 1-2 s (REFUSED_AUTH_DELAY_S), a sleeping thread, so that a
client retrying at once costs the server one request a second.
"""
from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nttrace.errors import UsageError
from nttrace.exporters.web_auth import AUTH_STATS, AuthBusy
from nttrace.exporters.web_config_reload import WebConfigSource

log = logging.getLogger("nttrace.http")
HEADER_TIMEOUT_S = 10.0      # connect to end of request headers, TLS handshake included
IDLE_TIMEOUT_S = 10.0        # any single read
MAX_CONNECTIONS = 1024
# A request refused for its credentials (401) or because every bcrypt slot
# was taken (429) is answered after this long: no work is queued for it (its
# thread sleeps), but a client that retries at once makes one attempt a
# second a connection, not hundreds (512 connections retrying at once hold
# the GIL enough to put an authorised scrape's p99 at 1.2 s, measured). The
# delay is drawn from [1, 2) s, so that retries do not come back in step.
REFUSED_AUTH_DELAY_S = (1.0, 2.0)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, family, web: WebConfigSource):
        self.address_family = family
        self.web = web
        # by fd (a TLS socket takes over its plain socket's fd): when each
        # connection opened, and the socket to shut down if it is too slow
        self.pending: dict[int, tuple[float, socket.socket]] = {}
        self.open: set[int] = set()
        self.rejected = 0
        self._last_refusal_log = 0.0
        self.lock = threading.Lock()
        super().__init__(addr, handler)

    def process_request(self, request, client_address):
        say = False
        with self.lock:
            full = len(self.open) >= MAX_CONNECTIONS
            if not full:
                self.open.add(request.fileno())
                self.pending[request.fileno()] = (time.monotonic(), request)
            else:
                self.rejected += 1
                now = time.monotonic()
                say = now - self._last_refusal_log > 10
                if say:
                    self._last_refusal_log = now
        if full:
            if say:     # once in 10 s: a flood must not become a flood of log lines
                log.warning("refused %s: %d connections open (%d refused so far)", client_address[0],
                            MAX_CONNECTIONS, self.rejected)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def finish_request(self, request, client_address):
        fd = request.fileno()
        try:
            super().finish_request(request, client_address)
        finally:    # the fd is still open here, so no new connection has its number yet
            with self.lock:
                self.pending.pop(fd, None)
                self.open.discard(fd)

    def wrapped(self, fd: int, sock: socket.socket) -> None:
        with self.lock:
            if fd in self.pending:
                self.pending[fd] = (self.pending[fd][0], sock)

    def headers_read(self, fd: int) -> None:
        with self.lock:
            self.pending.pop(fd, None)

    def handle_error(self, request, client_address):
        # a client that hangs up, times out or fails its handshake: not a daemon error
        log.debug("connection from %s ended", client_address[0], exc_info=True)

    def reap(self, now: float) -> int:
        """Shut down connections still reading their request after
        HEADER_TIMEOUT_S; their threads then see EOF and end."""
        with self.lock:
            late = [(fd, s) for fd, (t0, s) in self.pending.items() if now - t0 > HEADER_TIMEOUT_S]
            for fd, _s in late:
                self.pending.pop(fd, None)
            for _fd, s in late:
                try:
                    # the plain socket's shutdown(2), also for a TLS socket
                    # (SSLSocket.shutdown would drop its SSL object under the
                    # thread that is handshaking)
                    socket.socket.shutdown(s, socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(late)


def make_handler(registry, health):
    class Handler(BaseHTTPRequestHandler):
        server_version = "nttrace"
        timeout = IDLE_TIMEOUT_S

        def log_message(self, fmt, *args):  # access log at debug level only
            log.debug("%s %s", self.address_string(), fmt % args)

        def setup(self):
            self.web = self.server.web.current()       # one configuration for the whole request
            self.fd = self.request.fileno()
            self.tls = None
            if self.web.tls is not None:
                raw = self.request
                raw.settimeout(HEADER_TIMEOUT_S)
                self.tls = self.web.tls.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
                self.server.wrapped(self.fd, self.tls)
                try:
                    self.tls.do_handshake()
                    if not self.web.san_allowed(self.tls.getpeercert()):
                        log.info("refused %s: its certificate has none of the allowed SANs", self.client_address[0])
                        raise ConnectionAbortedError("client certificate SAN not allowed")
                except BaseException:
                    self.tls.close()     # finish() does not run when setup() fails
                    raise
                self.request = self.tls
            super().setup()

        def finish(self):
            try:
                super().finish()
            finally:
                if self.tls is not None:
                    self.tls.close()     # close_request() gets the plain socket, detached by the wrap

        def parse_request(self):
            ok = super().parse_request()
            self.server.headers_read(self.fd)
            return ok

        def _send(self, code: int, body: bytes, ctype: str, extra: dict | None = None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in {**self.web.headers, **(extra or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.web.rate_limit is not None and not self.web.rate_limit.allow():
                self._send(429, b"too many requests\n", "text/plain")
                return
            try:
                allowed = self.web.users.authorized(self.headers.get("Authorization"))
            except AuthBusy:
                time.sleep(random.uniform(*REFUSED_AUTH_DELAY_S))
                self._send(429, b"too many password checks at once\n", "text/plain", {"Retry-After": "1"})
                return
            if not allowed:
                if self.headers.get("Authorization"):     # a first request without credentials is not slowed
                    time.sleep(random.uniform(*REFUSED_AUTH_DELAY_S))
                self._send(401, b"unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="nttrace"'})
                return
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    body = generate_latest(registry)
                except Exception as exc:  # a collector failed: say so, keep serving
                    log.error("scrape failed: %s", exc)
                    self._send(500, f"scrape failed: {exc}\n".encode(), "text/plain")
                    return
                self._send(200, body, CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                h = health()
                self._send(200 if h["status"] != "down" else 503, (json.dumps(h) + "\n").encode(), "application/json")
            elif path == "/":
                self._send(200, b"nttrace exporter: /metrics /healthz\n", "text/plain")
            else:
                self._send(404, b"not found\n", "text/plain")

    return Handler


class ServerCollector:
    """The endpoint's own defences as metrics: connections open and refused
    at the limit, requests answered 429 because every bcrypt slot was taken."""

    def __init__(self, server: "MetricsServer"):
        self.server = server

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        httpd = self.server.httpd
        with httpd.lock:
            open_now, rejected = len(httpd.open), httpd.rejected
        g = GaugeMetricFamily("nttrace_web_connections_in_flight", "Connections open to the endpoint now")
        g.add_metric([], open_now)
        r = CounterMetricFamily("nttrace_web_connections_rejected",
                                f"Connections closed at accept: {MAX_CONNECTIONS} were open")
        r.add_metric([], rejected)
        b = CounterMetricFamily("nttrace_web_auth_busy", "Requests answered 429: every bcrypt slot was taken")
        b.add_metric([], AUTH_STATS["busy"])
        return [g, r, b]


class MetricsServer:
    def __init__(self, cfg, registry, health, web: WebConfigSource):
        family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
        handler = make_handler(registry, health)
        try:
            self.httpd = _Server((cfg.host, cfg.port), handler, family, web)
        except OSError as exc:
            raise UsageError(f"listen {cfg.listen}: {exc.strerror}") from None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="nttrace-http", daemon=True)
        self.reaper = threading.Thread(target=self._reap, name="nttrace-http-reaper", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def _reap(self):
        while not self._stop.wait(0.5):
            n = self.httpd.reap(time.monotonic())
            if n:
                log.info("closed %d connection(s) that sent no complete request within %.0fs", n, HEADER_TIMEOUT_S)

    def start(self):
        self.thread.start()
        self.reaper.start()

    def stop(self):
        self._stop.set()
        # shutdown() waits for serve_forever() to acknowledge: called on a
        # server that never started serving (start-up failed before it), it
        # would wait forever. Found when systemd first ran the unit: a probe
        # that could not attach left the daemon hanging until systemd's
        # start timeout killed it.
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
