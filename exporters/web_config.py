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
nttrace_web_config_last_reload_successful 0; after such a change the files
the new file names are watched as well as the last good ones. A reload may
turn TLS on or off (each connection is wrapped by the configuration it
reads). Every file a load reads is read whole or not at all: the files are
read again until their (inode, size, mtime, ctime) are the same before and
after, and a reload to an empty file is refused (a file being written; the
toolkit takes an empty file as "no TLS, no users" at start, and so does
nttrace). A file cut short that still parses cannot be told from a complete
one: write a new file and rename it over the old.

Stricter than YAML: a key given twice in one mapping is refused (the last
one would win silently). Users' bcrypt cost is bounded (MAX_BCRYPT_COST):
a cost-31 hash would take days a compare.

Where Python's ssl module cannot do what a key asks, loading fails with one
line that says so (RequestClientCert and RequireAnyClientCert: Python
verifies every client certificate it asks for); `http2` is accepted and
ignored (the endpoint speaks HTTP/1.x). `curve_preferences`: Python 3.11's
ssl sets one curve (set_ecdh_curve); every listed curve is set, in order,
through OpenSSL's SSL_CTX_set1_groups_list on the context (checked to be
the context's own before use); where that cannot be done, a list of more
than one curve is refused with one line saying so, never cut to its first.
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
import sys
import tempfile
import threading
import time
from collections import OrderedDict
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
# The toolkit's list (Go's names, its secure suites: ECDHE key exchange
# only, no TLS_RSA_*, which has no forward secrecy); OpenSSL's for each.
CIPHER_SUITES = {
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
CURVES = {"CurveP256": "P-256", "CurveP384": "P-384", "CurveP521": "P-521", "X25519": "X25519"}   # OpenSSL's group names
# The toolkit's list of settable headers, and the values it accepts where it checks them.
HEADERS = {"Content-Security-Policy": None, "X-Frame-Options": ("deny", "sameorigin"),
           "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": None, "Strict-Transport-Security": None}
BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
MAX_BCRYPT_COST = 14      # ~1 s a compare on a 2020s core; each step doubles it (31: days)
BCRYPT_MAX_PASSWORD = 72   # bcrypt reads only the first 72 bytes: longer passwords are refused, not truncated
DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h))+$")   # Go's time.ParseDuration units
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration_s(text, where: str) -> float:
    """The toolkit's rate_limit.interval, a Go duration ("1s", "1m30s",
    "500ms"). 0 is "no limit", as there; another bare number is refused:
    the toolkit reads it as nanoseconds, which no one means."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text == 0:
            return 0.0
        raise UsageError(f"{where}: rate_limit.interval {text!r} has no unit (e.g. 1s, 500ms; "
                         "the toolkit would read a bare number as nanoseconds)")
    if not isinstance(text, str) or not DURATION.match(text):
        raise UsageError(f"{where}: rate_limit.interval {text!r} is not a duration (e.g. 1s, 500ms)")
    return sum(float(n) * DURATION_UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text))


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


class AuthBusy(Exception):
    """Every bcrypt slot is taken: the request is answered at once (429),
    never queued behind the compares that hold them."""


# bcrypt runs in the connection's own thread, at most BCRYPT_SLOTS at once in
# the process (a slot taken without waiting, or AuthBusy): half the CPUs, so
# a flood of wrong passwords leaves the other half to serving. A wrong
# password that misses the cache takes a slot; a scrape whose credentials
# are cached takes none, so wrong passwords cannot starve authorised scrapes.
BCRYPT_SLOTS = max(1, min(4, (os.cpu_count() or 1) // 2))
_bcrypt_slots = threading.BoundedSemaphore(BCRYPT_SLOTS)
AUTH_STATS = {"busy": 0, "compares": 0, "cache_hits": 0}   # read by the exporter's own metrics
OK_CACHE_SIZE = 100         # the toolkit's cache size; successes only: an attacker cannot evict them
FAILED_CACHE_SIZE = 1000


class _Users:
    """Basic-auth users: bcrypt hashes (the toolkit's) or, for the deprecated
    TOML [basic_auth] table, one unsalted SHA-256.

    An unknown user is compared, by the same code, against a dummy hash of
    the configured users' cost (the highest of theirs, never above it), so
    the time taken does not say which users exist. Compares are cached as
    the toolkit keys them (user, hash, password), through an HMAC under a
    per-process key, so no password is kept: successes and failures in two
    bounded caches, so a flood of wrong passwords churns only its own."""

    def __init__(self, hashes: dict[str, str]):
        self.hashes = hashes
        self._secret = os.urandom(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._failed: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()      # the caches only; never held across a compare
        costs = [int(m.group(1)) for m in map(BCRYPT_HASH.match, hashes.values()) if m]
        self.dummy = None
        if costs:
            import bcrypt
            # made at cost 4 (a millisecond), then given the users' cost:
            # checkpw runs the cost the hash names
            fast = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(4)).decode()
            self.dummy = f"{fast[:4]}{max(costs):02d}{fast[6:]}"

    def _key(self, user: str, target: str, pw: bytes) -> bytes:
        u, t = user.encode(), target.encode()
        return hmac.new(self._secret, b"%d:%s%d:%s" % (len(u), u, len(t), t) + pw, hashlib.sha256).digest()

    @staticmethod
    def _compare(pw: bytes, target: str) -> bool:
        """The one compare every check runs, known user or not."""
        if target.startswith("sha256:"):
            return hmac.compare_digest(hashlib.sha256(pw).hexdigest(), target[7:])
        import bcrypt
        if not _bcrypt_slots.acquire(blocking=False):
            AUTH_STATS["busy"] += 1
            raise AuthBusy()
        try:
            AUTH_STATS["compares"] += 1
            return bcrypt.checkpw(pw, target.encode())
        finally:
            _bcrypt_slots.release()

    def check(self, user: str, password: str) -> bool:
        """Whether user:password is right; AuthBusy when it needs a bcrypt
        compare and every slot is taken."""
        pw = password.encode()
        stored = self.hashes.get(user)
        target = stored if stored is not None else (self.dummy or "sha256:" + "0" * 64)
        if len(pw) > BCRYPT_MAX_PASSWORD and not target.startswith("sha256:"):
            return False          # bcrypt would compare the first 72 bytes only
        key = self._key(user, target, pw)
        with self._lock:
            for cache, answer in ((self._ok, True), (self._failed, False)):
                if key in cache:
                    cache.move_to_end(key)
                    AUTH_STATS["cache_hits"] += 1
                    return answer and stored is not None
        ok = self._compare(pw, target) and stored is not None
        cache, bound = (self._ok, OK_CACHE_SIZE) if ok else (self._failed, FAILED_CACHE_SIZE)
        with self._lock:
            cache[key] = None
            while len(cache) > bound:
                cache.popitem(last=False)
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
    empty: bool = False      # the file held nothing (no TLS, no users): refused on reload

    @property
    def files(self) -> tuple[str, ...]:
        """The files a change to re-reads."""
        return tuple(entry[0] for entry in self.read)

    def san_allowed(self, cert: dict | None) -> bool:
        if not self.allowed_sans:
            return True
        names = {v for _k, v in (cert or {}).get("subjectAltName", ())}
        return any(s in names for s in self.allowed_sans)


_SSL_CTRL_SET_GROUPS_LIST = 92     # OpenSSL's SSL_CTX_set1_groups_list() is this SSL_CTX_ctrl()


def _ssl_ctx_pointer(ctx: ssl.SSLContext):
    """The SSL_CTX* of a Python SSLContext and the libssl that made it, or
    (None, why). CPython's context object holds the pointer right after its
    object header; it is taken only once SSL_CTX_get_options through that
    pointer agrees with ctx.options, before and after setting a test bit."""
    import ctypes
    import ctypes.util
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("ssl") or "libssl.so.3")
        lib.SSL_CTX_get_options.restype = ctypes.c_uint64
        lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_ctrl.restype = ctypes.c_long
        lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
        lib.OpenSSL_version.restype = ctypes.c_char_p
        lib.OpenSSL_version.argtypes = [ctypes.c_int]
    except (OSError, AttributeError) as exc:
        return None, None, f"libssl not reachable ({exc})"
    if lib.OpenSSL_version(0).decode() != ssl.OPENSSL_VERSION:
        return None, None, "the libssl found is not the one Python's ssl uses"
    if sys.implementation.name != "cpython" or not (3, 8) <= sys.version_info[:2] <= (3, 14):
        return None, None, "not a CPython whose context layout is known (3.8-3.14)"
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer or lib.SSL_CTX_get_options(pointer) != int(ctx.options):
        return None, None, "the SSL_CTX of Python's context could not be found"
    ctx.options ^= ssl.OP_NO_TICKET
    same = lib.SSL_CTX_get_options(pointer) == int(ctx.options)
    ctx.options ^= ssl.OP_NO_TICKET
    if not same:
        return None, None, "the SSL_CTX of Python's context could not be found"
    return pointer, lib, None


def set_groups(ctx: ssl.SSLContext, groups: list[str]) -> str | None:
    """Set every curve in `groups` on ctx, in order; None, or why not (then
    one curve alone is set with set_ecdh_curve, more are refused)."""
    if hasattr(ctx, "set_groups"):         # a Python whose ssl sets the list itself
        try:
            ctx.set_groups(":".join(groups))
            return None
        except (ssl.SSLError, ValueError) as exc:
            return f"OpenSSL refused {':'.join(groups)}: {exc}"
    pointer, lib, why = _ssl_ctx_pointer(ctx)
    if pointer is not None and lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_SET_GROUPS_LIST, 0, ":".join(groups).encode()) == 1:
        return None
    if len(groups) == 1:
        ctx.set_ecdh_curve({"P-256": "prime256v1", "P-384": "secp384r1", "P-521": "secp521r1"}.get(groups[0], groups[0]))
        return None
    return (f"Python's ssl sets one curve and OpenSSL's group list could not be set ({why or 'refused'}); "
            "list one curve")


def _parse_yaml(text: bytes):
    """yaml.safe_load, except that a key given twice in one mapping is an
    error (plain YAML keeps the last one)."""
    import yaml

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        first = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                seen = first.get(key)
            except TypeError:      # an unhashable key: SafeLoader says so itself
                break
            if seen is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen + 1})", key_node.start_mark)
            first[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=Strict)


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
    prefer = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise UsageError(f"{where}: tls_server_config.prefer_server_cipher_suites must be true or false")
    if prefer:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:       # Python's server context sets it by default: false must clear it
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = tls.get("curve_preferences") or []
    if curves:
        if not isinstance(curves, list) or any(c not in CURVES for c in curves):
            raise UsageError(f"{where}: tls_server_config.curve_preferences: each must be one of {', '.join(CURVES)}")
        if len(set(curves)) != len(curves):
            raise UsageError(f"{where}: tls_server_config.curve_preferences lists a curve twice")
        why = set_groups(ctx, [CURVES[c] for c in curves])
        if why:
            raise UsageError(f"{where}: tls_server_config.curve_preferences: {why}")

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
        if int(h[4:6]) > MAX_BCRYPT_COST:
            raise UsageError(f"{where}: basic_auth_users: hash for {user} has cost {int(h[4:6])}, above the limit "
                             f"{MAX_BCRYPT_COST}")
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


READ_ATTEMPTS = 5


def load(path: str, named: list | None = None) -> WebConfig:
    """Read and check one web-config file and the files it names, whole:
    read again while any of them changed during the read (up to
    READ_ATTEMPTS). Every problem is one UsageError line naming the file and
    the key. `named` collects the files the file names, also when it fails
    to load (a failed reload watches them)."""
    for attempt in range(READ_ATTEMPTS):
        cfg = _load_once(path, named)
        if _fingerprint(cfg.files) == cfg.read:
            return cfg
        time.sleep(0.02 * (attempt + 1))
    raise UsageError(f"{path}: its files changed each time they were read ({READ_ATTEMPTS} reads): not loaded")


def _load_once(path: str, named: list | None) -> WebConfig:
    import yaml
    named = [] if named is None else named
    named.append(os.path.abspath(path))
    read = _fingerprint([os.path.abspath(path)])     # before reading: a later change differs from it
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None
    try:
        data = _parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark else ""
        raise UsageError(f"{path}: YAML syntax error{at}: {getattr(exc, 'problem', None) or exc}") from None
    empty = data is None
    data = _check_keys(data, TOP_KEYS, path, "")
    base = os.path.dirname(os.path.abspath(path))
    tls = _check_keys(data.get("tls_server_config"), TLS_KEYS, path, "tls_server_config")
    named.extend(os.path.join(base, tls[k]) for k in ("cert_file", "key_file", "client_ca_file")
                 if isinstance(tls.get(k), str) and tls[k])
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
                raise UsageError(f"{path}: rate_limit.burst must be at least 1 when interval is set "
                                 "(the toolkit's limiter would refuse every request)")
            limiter = _RateLimit(interval, burst)
    ctx, tls_read, sans = _tls_context(tls, path, base)
    return WebConfig(tls=ctx, users=_users(data.get("basic_auth_users"), path), headers=_headers(http, path),
                     allowed_sans=sans, rate_limit=limiter, read=read + tls_read, source=path, empty=empty)


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


def _by_path(prints) -> list:
    return [(entry[0], entry[1:]) for entry in prints]


class WebConfigSource:
    """The running web configuration, re-read when its files change. The
    current configuration is one reference, replaced whole under a lock, so
    a connection sees the old configuration or the new one, never a mix.
    Watched: the files of the configuration in use and, after a change that
    did not load, the files the changed file names as well."""

    def __init__(self, path: str | None = None, static: WebConfig | None = None):
        self.path = path
        self._lock = threading.Lock()
        self.last_reload_ok = True
        self.last_success = time.time()
        self.failures = 0
        self._config = load(path) if path is not None else (static or WebConfig())
        self._seen = dict(_by_path(self._config.read))    # path -> fingerprint handled (loaded or failed)

    @property
    def tls(self) -> bool:
        return self._config.tls is not None

    @property
    def watched(self) -> tuple[str, ...]:
        return tuple(self._seen)

    def _changed(self) -> dict | None:
        now = dict(_by_path(_fingerprint(self._seen)))
        return None if now == self._seen else now

    def current(self) -> WebConfig:
        if self.path is None or self._changed() is None:
            return self._config
        with self._lock:
            before = self._changed()
            if before is None:
                return self._config
            named: list[str] = []
            try:
                new = load(self.path, named)
                if new.empty and not self._config.empty:
                    raise UsageError(f"{self.path}: the file is empty (being written?); an empty file would turn "
                                     "TLS and users off")
            except UsageError as exc:
                log.error("web config not reloaded, keeping the last good one: %s", exc)
                self.last_reload_ok = False
                self.failures += 1
                # the fingerprints taken before this read: a change during it is seen next time
                self._seen = {**before, **dict(_by_path(_fingerprint(p for p in named if p not in before)))}
                return self._config
            # new.read was taken before each file was read (load()): a file
            # replaced while they were read (a rotation renaming its files
            # one by one) differs from it, so the next connection reads
            # again. Taken after the read, it recorded a new file whose old
            # content was loaded, never to read it again: seen in CI, a
            # rotation whose users stayed the old ones.
            if (new.tls is None) != (self._config.tls is None):
                log.warning("web config: TLS turned %s by %s", "on" if new.tls else "off", self.path)
            self._config, self._seen = new, dict(_by_path(new.read))
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
