"""The exporter toolkit's web configuration (`--web.config.file`), as every
Prometheus exporter takes it: TLS (server certificate, client CA, client
certificate policy, versions, cipher suites), response headers, bcrypt basic
auth users and a request rate limit, in one YAML file.

    tls_server_config:
      cert_file: server.crt            # relative paths: beside the YAML file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12               # the default
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2y$10$...           # htpasswd -nBC 10 "" | tr -d ':\\n'

`WebConfigSource` re-reads the file, and the certificate, key and CA files
it names, when any of them changes (checked on every connection, as the
toolkit reads the file on every request): certificates, client CAs and users
rotate without a restart. A new file that does not load keeps the last good
one, logged once per change and visible as
nttrace_web_config_last_reload_successful 0. Turning TLS on or off takes a
restart (as in the toolkit): a half-written file must never downgrade the
endpoint to plain HTTP.

Where Python's ssl module cannot do what a key asks, loading fails with one
line that says so (RequestClientCert and RequireAnyClientCert: Python
verifies every client certificate it asks for); `http2` is accepted and
ignored (the endpoint speaks HTTP/1.x).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field

from nttrace.errors import UsageError

log = logging.getLogger("nttrace.web_config")

TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
            "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
            "curve_preferences"}
HTTP_KEYS = {"http2", "headers"}
TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
RATE_KEYS = {"interval", "burst"}

VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
            "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
# The toolkit takes Go's names (crypto/tls CipherSuites()); OpenSSL's for each.
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# TLS 1.3's suites are not configurable (in Go either): accepted, not applied.
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}
# The toolkit's list of settable headers, and the values it accepts where it checks them.
HEADERS = {"Content-Security-Policy": None, "X-Frame-Options": ("deny", "sameorigin"),
           "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": None, "Strict-Transport-Security": None}
BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
BCRYPT_MAX_PASSWORD = 72   # bcrypt reads only the first 72 bytes: longer passwords are refused, not truncated
DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")


def _duration_s(text, where: str) -> float:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str) or not DURATION.match(text):
        raise UsageError(f"{where}: rate_limit.interval {text!r} is not a duration (e.g. 1s, 500ms)")
    unit = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * unit[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text))


class _RateLimit:
    """A token bucket: `burst` requests at once, one more every `interval`."""

    def __init__(self, interval_s: float, burst: int):
        self.interval_s, self.burst = interval_s, burst
        self.tokens, self.stamp = float(burst), time.monotonic()
        self.lock = threading.Lock()

    def allow(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) / self.interval_s)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False


class _Users:
    """Basic-auth users: bcrypt hashes (the toolkit's) or, for the deprecated
    TOML [basic_auth] table, one unsalted SHA-256. An unknown user is checked
    against a dummy hash of the same cost, so the time taken does not say
    which users exist; successes are cached (bcrypt costs tens of ms a
    scrape), keyed on a digest, never on the password itself."""

    def __init__(self, hashes: dict[str, str]):
        self.hashes = hashes
        self._cache: set[bytes] = set()
        self._lock = threading.Lock()
        costs = [int(BCRYPT_HASH.match(h).group(1)) for h in hashes.values() if BCRYPT_HASH.match(h)]
        self._dummy = None
        if costs:
            import bcrypt
            self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(max(costs))).decode()

    def check(self, user: str, password: str) -> bool:
        pw = password.encode()
        stored = self.hashes.get(user)
        target = stored if stored is not None else (self._dummy or "sha256:" + "0" * 64)
        if len(pw) > BCRYPT_MAX_PASSWORD and not target.startswith("sha256:"):
            return False          # bcrypt would compare the first 72 bytes only
        key = hashlib.sha256(b"\0".join((target.encode(), user.encode(), pw))).digest()
        with self._lock:
            if stored is not None and key in self._cache:
                return True
        if target.startswith("sha256:"):
            ok = hmac.compare_digest(hashlib.sha256(pw).hexdigest(), target[7:])
        else:
            import bcrypt
            ok = bcrypt.checkpw(pw, target.encode())
        ok = ok and stored is not None
        if ok:
            with self._lock:
                if len(self._cache) >= 256:
                    self._cache.clear()
                self._cache.add(key)
        return ok

    def authorized(self, header: str | None) -> bool:
        if not self.hashes:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            raw = base64.b64decode(header[6:].strip(), validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            return False
        user, sep, password = raw.partition(":")
        return bool(sep) and self.check(user, password)


@dataclass
class WebConfig:
    """One loaded configuration; never changed after it is built (a reload
    builds a new one), so a request reads one whole configuration."""

    tls: ssl.SSLContext | None = None
    users: _Users = field(default_factory=lambda: _Users({}))
    headers: dict[str, str] = field(default_factory=dict)
    allowed_sans: tuple[str, ...] = ()
    rate_limit: _RateLimit | None = None
    # (path, inode, size, mtime, ctime) of each file read, taken before it
    # was read: a file replaced while it was read differs from it
    read: tuple = ()
    source: str = "<none>"

    @property
    def files(self) -> tuple[str, ...]:
        """The files a change to re-reads."""
        return tuple(entry[0] for entry in self.read)

    def san_allowed(self, cert: dict | None) -> bool:
        if not self.allowed_sans:
            return True
        names = {v for _k, v in (cert or {}).get("subjectAltName", ())}
        return any(s in names for s in self.allowed_sans)


def _check_keys(data, allowed: set[str], where: str, prefix: str) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{where}: {prefix or 'the file'} must be a mapping")
    for k in data:
        if k not in allowed:
            raise UsageError(f"{where}: unknown key {prefix + '.' if prefix else ''}{k}")
    return data


def _string(value, where: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: {key} must be a non-empty string")
    return value


def _pem_file(inline: str) -> str:
    """ssl loads certificates from files only: an inline PEM goes through a
    private temporary file, removed at once."""
    fd, path = tempfile.mkstemp(prefix="nttrace-web-", suffix=".pem")
    with os.fdopen(fd, "w") as f:
        f.write(inline)
    return path


def _tls_context(tls: dict, where: str, base: str) -> tuple[ssl.SSLContext | None, tuple, tuple[str, ...]]:
    """The server's SSLContext, the fingerprint of the files it was read
    from (taken before reading them) and the allowed client SANs."""
    def path_of(key):
        return os.path.join(base, _string(tls[key], where, f"tls_server_config.{key}")) if key in tls else None

    cert_file, key_file, ca_file = path_of("cert_file"), path_of("key_file"), path_of("client_ca_file")
    for a, b in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if a in tls and b in tls:
            raise UsageError(f"{where}: tls_server_config.{a} and tls_server_config.{b} are both set; give one")
    has_cert, has_key = "cert" in tls or cert_file, "key" in tls or key_file
    auth = tls.get("client_auth_type", "NoClientCert")
    has_ca = "client_ca" in tls or ca_file
    if not has_cert and not has_key:
        if has_ca or "client_auth_type" in tls:
            raise UsageError(f"{where}: tls_server_config.cert_file is missing (client certificates need TLS)")
        return None, (), ()
    if not has_cert:
        raise UsageError(f"{where}: tls_server_config.cert_file is missing")
    if not has_key:
        raise UsageError(f"{where}: tls_server_config.key_file is missing")
    if auth in UNSUPPORTED_CLIENT_AUTH:
        raise UsageError(f"{where}: tls_server_config.client_auth_type {auth} is not supported: Python's ssl verifies "
                         "every client certificate it asks for (use VerifyClientCertIfGiven or RequireAndVerifyClientCert)")
    if auth not in CLIENT_AUTH:
        raise UsageError(f"{where}: tls_server_config.client_auth_type {auth!r} is not one of "
                         f"{', '.join(list(CLIENT_AUTH) + list(UNSUPPORTED_CLIENT_AUTH[:2]))}")
    if has_ca and auth == "NoClientCert":
        raise UsageError(f"{where}: tls_server_config.client_ca_file is set but client_auth_type is NoClientCert "
                         "(set RequireAndVerifyClientCert)")
    if auth != "NoClientCert" and not has_ca:
        raise UsageError(f"{where}: tls_server_config.client_auth_type {auth} needs client_ca_file")
    sans = tls.get("client_allowed_sans") or []
    if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
        raise UsageError(f"{where}: tls_server_config.client_allowed_sans must be a list of strings")
    if sans and auth != "RequireAndVerifyClientCert":
        raise UsageError(f"{where}: tls_server_config.client_allowed_sans needs client_auth_type "
                         "RequireAndVerifyClientCert")

    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = tls.get(key, default)
        if v not in VERSIONS:
            raise UsageError(f"{where}: tls_server_config.{key} {v!r} is not one of {', '.join(VERSIONS)}")
        versions[key] = VERSIONS[v]
    if versions["min_version"] > versions["max_version"]:
        raise UsageError(f"{where}: tls_server_config.min_version is above max_version")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if versions["min_version"] < ssl.TLSVersion.TLSv1_2:
        # OpenSSL 3 refuses TLS 1.0/1.1 above security level 0; the file asked for them.
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.minimum_version, ctx.maximum_version = versions["min_version"], versions["max_version"]
    suites = tls.get("cipher_suites") or []
    if not isinstance(suites, list):
        raise UsageError(f"{where}: tls_server_config.cipher_suites must be a list")
    bad = [s for s in suites if s not in CIPHER_SUITES and s not in TLS13_SUITES]
    if bad:
        raise UsageError(f"{where}: tls_server_config.cipher_suites: unknown suite {bad[0]!r}")
    openssl_suites = [CIPHER_SUITES[s] for s in suites if s in CIPHER_SUITES]
    if openssl_suites:
        try:
            ctx.set_ciphers(":".join(openssl_suites) + (":@SECLEVEL=0" if versions["min_version"] < ssl.TLSVersion.TLSv1_2 else ""))
        except ssl.SSLError as exc:
            raise UsageError(f"{where}: tls_server_config.cipher_suites: {exc}") from None
    if tls.get("prefer_server_cipher_suites", True):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = tls.get("curve_preferences") or []
    if curves:
        if not isinstance(curves, list) or any(c not in CURVES for c in curves):
            raise UsageError(f"{where}: tls_server_config.curve_preferences: each must be one of {', '.join(CURVES)}")
        ctx.set_ecdh_curve(CURVES[curves[0]])   # Python's ssl takes one curve

    for key, p in (("cert_file", cert_file), ("key_file", key_file), ("client_ca_file", ca_file)):
        if key in tls and not os.path.exists(p):
            raise UsageError(f"{where}: tls_server_config.{key}: {p}: not found")
        if key in tls and not os.access(p, os.R_OK):
            raise UsageError(f"{where}: tls_server_config.{key}: {p}: not readable")
    temporary = []
    try:
        if "cert" in tls:
            cert_file = _pem_file(_string(tls["cert"], where, "tls_server_config.cert"))
            temporary.append(cert_file)
        if "key" in tls:
            key_file = _pem_file(_string(tls["key"], where, "tls_server_config.key"))
            temporary.append(key_file)
        if "client_ca" in tls:
            ca_file = _pem_file(_string(tls["client_ca"], where, "tls_server_config.client_ca"))
            temporary.append(ca_file)
        key_name = "cert_file" if "cert_file" in tls else "cert"
        read = _fingerprint(p for p in (cert_file, key_file, ca_file) if p and p not in temporary)
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (ssl.SSLError, OSError) as exc:
            raise UsageError(f"{where}: tls_server_config.{key_name}/key_file: cannot load {cert_file}: "
                             f"{getattr(exc, 'reason', None) or exc}") from None
        if has_ca:
            try:
                ctx.load_verify_locations(cafile=ca_file)
            except (ssl.SSLError, OSError) as exc:
                name = "client_ca_file" if "client_ca_file" in tls else "client_ca"
                raise UsageError(f"{where}: tls_server_config.{name}: cannot load {ca_file}: "
                                 f"{getattr(exc, 'reason', None) or getattr(exc, 'strerror', None) or exc}") from None
            ctx.verify_mode = CLIENT_AUTH[auth]
    finally:
        for p in temporary:
            os.unlink(p)
    return ctx, read, tuple(sans)


def _users(data, where: str) -> _Users:
    if data is None:
        return _Users({})
    if not isinstance(data, dict):
        raise UsageError(f"{where}: basic_auth_users must be a mapping of user to bcrypt hash")
    out = {}
    for user, h in data.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise UsageError(f"{where}: basic_auth_users: {user!r} is not a user name")
        if not isinstance(h, str) or not BCRYPT_HASH.match(h) or not 4 <= int(h[4:6]) <= 31:
            raise UsageError(f"{where}: basic_auth_users.{user}: not a bcrypt hash ($2a$, $2b$ or $2y$, "
                             "cost 4-31; htpasswd -nBC 10)")
        out[user] = h
    return _Users(out)


def _headers(http: dict, where: str) -> dict[str, str]:
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        raise UsageError(f"{where}: http_server_config.headers must be a mapping")
    out = {}
    for name, value in headers.items():
        if name not in HEADERS:
            raise UsageError(f"{where}: http_server_config.headers.{name}: this header can not be configured "
                             f"(one of {', '.join(HEADERS)})")
        if not isinstance(value, str):
            raise UsageError(f"{where}: http_server_config.headers.{name} must be a string")
        if HEADERS[name] and value.lower() not in HEADERS[name]:
            raise UsageError(f"{where}: http_server_config.headers.{name}: {value!r} is not one of "
                             f"{', '.join(HEADERS[name])}")
        if "\n" in value or "\r" in value:
            raise UsageError(f"{where}: http_server_config.headers.{name} holds a line break")
        if value:
            out[name] = value
    return out


def load(path: str) -> WebConfig:
    """Read and check one web-config file; every problem is one UsageError
    line naming the file and the key."""
    import yaml
    read = _fingerprint([os.path.abspath(path)])     # before reading: a later change differs from it
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark else ""
        raise UsageError(f"{path}: YAML syntax error{at}: {getattr(exc, 'problem', None) or exc}") from None
    data = _check_keys(data, TOP_KEYS, path, "")
    base = os.path.dirname(os.path.abspath(path))
    tls = _check_keys(data.get("tls_server_config"), TLS_KEYS, path, "tls_server_config")
    http = _check_keys(data.get("http_server_config"), HTTP_KEYS, path, "http_server_config")
    if "http2" in http and not isinstance(http["http2"], bool):
        raise UsageError(f"{path}: http_server_config.http2 must be true or false")
    rate = _check_keys(data.get("rate_limit"), RATE_KEYS, path, "rate_limit")
    limiter = None
    if rate:
        interval = _duration_s(rate.get("interval", 0), path)
        burst = rate.get("burst", 0)
        if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
            raise UsageError(f"{path}: rate_limit.burst must be a non-negative integer")
        if interval > 0:
            if burst < 1:
                raise UsageError(f"{path}: rate_limit.burst must be at least 1 when interval is set")
            limiter = _RateLimit(interval, burst)
    ctx, tls_read, sans = _tls_context(tls, path, base)
    return WebConfig(tls=ctx, users=_users(data.get("basic_auth_users"), path), headers=_headers(http, path),
                     allowed_sans=sans, rate_limit=limiter, read=read + tls_read, source=path)


def legacy(cert_file: str | None, key_file: str | None, user: str | None, sha256: str | None) -> WebConfig:
    """The deprecated TOML [tls]/[basic_auth] tables as a WebConfig (static:
    they change with a restart, as before)."""
    ctx = None
    if cert_file:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (ssl.SSLError, OSError) as exc:
            raise UsageError(f"tls: cannot load {cert_file}/{key_file}: {exc}") from None
    users = _Users({user: "sha256:" + sha256} if user else {})
    return WebConfig(tls=ctx, users=users, source="<toml [tls]/[basic_auth]>")


def _fingerprint(files) -> tuple:
    """(path, inode, size, mtime, ctime) of each file, or (path, errno)."""
    out = []
    for p in files:
        try:
            st = os.stat(p)
            out.append((p, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError as exc:
            out.append((p, exc.errno))
    return tuple(out)


class WebConfigSource:
    """The running web configuration, re-read when its files change. The
    current configuration is one reference, replaced whole under a lock, so
    a connection sees the old configuration or the new one, never a mix."""

    def __init__(self, path: str | None = None, static: WebConfig | None = None):
        self.path = path
        self._lock = threading.Lock()
        self.last_reload_ok = True
        self.last_success = time.time()
        self.failures = 0
        self._bad_print = None
        self._config = load(path) if path is not None else (static or WebConfig())

    @property
    def tls(self) -> bool:
        return self._config.tls is not None

    def current(self) -> WebConfig:
        if self.path is None:
            return self._config
        now_print = _fingerprint(self._config.files)
        if now_print == self._config.read:
            return self._config
        with self._lock:
            now_print = _fingerprint(self._config.files)
            if now_print == self._config.read or now_print == self._bad_print:
                return self._config
            try:
                new = load(self.path)
                if (new.tls is None) != (self._config.tls is None):
                    raise UsageError(f"{self.path}: turning TLS {'on' if new.tls else 'off'} takes a restart")
            except UsageError as exc:
                if self.last_reload_ok or now_print != self._bad_print:
                    log.error("web config not reloaded, keeping the last good one: %s", exc)
                self.last_reload_ok = False
                self.failures += 1
                self._bad_print = now_print
                return self._config
            # new.read was taken before each file was read (load()): a file
            # replaced while they were read (a rotation renaming its files
            # one by one) differs from it, so the next connection reads
            # again. Taken after the read, it recorded a new file whose old
            # content was loaded, never to read it again: seen in CI, a
            # rotation whose users stayed the old ones.
            self._config, self._bad_print = new, None
            self.last_reload_ok, self.last_success = True, time.time()
            log.info("web config reloaded from %s", self.path)
            return self._config

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        self.current()
        ok = GaugeMetricFamily("nttrace_web_config_last_reload_successful",
                               "1 if the last change to the web config file loaded, 0 if the last good one is kept")
        ok.add_metric([], 1.0 if self.last_reload_ok else 0.0)
        at = GaugeMetricFamily("nttrace_web_config_last_reload_success_timestamp_seconds",
                               "When the web config in use was loaded")
        at.add_metric([], self.last_success)
        failed = CounterMetricFamily("nttrace_web_config_reload_failures",
                                     "Changes to the web config files that did not load")
        failed.add_metric([], self.failures)
        return [ok, at, failed]
