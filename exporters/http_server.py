"""The daemon's HTTP endpoint: /metrics (Prometheus text format) and
/healthz (JSON probe status), with optional TLS and basic auth."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nttrace.errors import UsageError

log = logging.getLogger("nttrace.http")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, family):
        self.address_family = family
        super().__init__(addr, handler)


def make_handler(registry, health, auth_user: str | None, auth_sha256: str | None):
    class Handler(BaseHTTPRequestHandler):
        server_version = "nttrace"

        def log_message(self, fmt, *args):  # access log at debug level only
            log.debug("%s %s", self.address_string(), fmt % args)

        def _authorized(self) -> bool:
            if auth_user is None:
                return True
            header = self.headers.get("Authorization", "")
            if not header.startswith("Basic "):
                return False
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            digest = hashlib.sha256(password.encode()).hexdigest()
            return hmac.compare_digest(user, auth_user) and hmac.compare_digest(digest, auth_sha256)

        def _send(self, code: int, body: bytes, ctype: str, extra: dict | None = None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if not self._authorized():
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


class MetricsServer:
    def __init__(self, cfg, registry, health):
        family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
        handler = make_handler(registry, health, cfg.auth_user, cfg.auth_sha256)
        try:
            self.httpd = _Server((cfg.host, cfg.port), handler, family)
        except OSError as exc:
            raise UsageError(f"listen {cfg.listen}: {exc.strerror}") from None
        if cfg.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
            except (ssl.SSLError, OSError) as exc:
                self.httpd.server_close()
                raise UsageError(f"tls: cannot load {cfg.tls_cert}/{cfg.tls_key}: {exc}") from None
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="nttrace-http", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self):
        self.thread.start()

    def stop(self):
        # shutdown() waits for serve_forever() to acknowledge: called on a
        # server that never started serving (start-up failed before it), it
        # would wait forever. Found when systemd first ran the unit: a probe
        # that could not attach left the daemon hanging until systemd's
        # start timeout killed it.
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
