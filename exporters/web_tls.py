# SPDX-License-Identifier: Apache-2.0
"""The web endpoint's TLS: the web config's `tls_server_config` checked
and built into one ssl.SSLContext (server certificate and key, from files
or inline PEM; client CA and client certificate policy; allowed client
SANs; versions; cipher suites; curves).

    tls_server_config:
      cert_file: server.crt            # relative paths: beside the YAML file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12               # the default

Where Python's ssl module cannot do what a key asks, building fails with
one line that says so (RequestClientCert and RequireAnyClientCert: Python
verifies every client certificate it asks for). `curve_preferences`:
a Python whose ssl has SSLContext.set_groups sets every listed curve, in
order; on any other (3.11's) ssl sets one curve (set_ecdh_curve), so one
curve works and a list of more is refused with one line saying so, never
cut to its first.
"""
from __future__ import annotations

import os
import ssl
import tempfile

from nttrace.errors import UsageError

TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
            "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
            "curve_preferences"}
FILE_KEYS = ("cert_file", "key_file", "client_ca_file")     # the files a change to re-reads
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


def files_named(tls: dict, base: str) -> list[str]:
    """The files a tls_server_config section names (relative: beside the
    web config file, in `base`)."""
    return [os.path.join(base, tls[k]) for k in FILE_KEYS if isinstance(tls.get(k), str) and tls[k]]


def tls_context(tls: dict, where: str, base: str) -> tuple[ssl.SSLContext | None, tuple[str, ...]]:
    """The server's SSLContext (None: no TLS) and the allowed client SANs,
    from a tls_server_config section whose keys are checked against
    TLS_KEYS; every problem is one UsageError line naming the file
    (`where`) and the key."""
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
        return None, ()
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
    return ctx, tuple(sans)


# OpenSSL's group names -> the EC curve names set_ecdh_curve takes
EC_CURVE_NAMES = {"P-256": "prime256v1", "P-384": "secp384r1", "P-521": "secp521r1"}


def set_groups(ctx: ssl.SSLContext, groups: list[str]) -> str | None:
    """Set the curves `groups` (OpenSSL's group names) on ctx, in order;
    None, or why they cannot be. A Python whose ssl has
    SSLContext.set_groups sets the list; any other sets one curve
    (set_ecdh_curve), and a list of more is refused, not cut to its first."""
    if hasattr(ctx, "set_groups"):
        try:
            ctx.set_groups(":".join(groups))
            return None
        except (ssl.SSLError, ValueError) as exc:
            return f"OpenSSL refused {':'.join(groups)}: {exc}"
    if len(groups) > 1:
        return (f"this Python's ssl sets one curve, not a list of {len(groups)} (it has no "
                "SSLContext.set_groups); list one curve")
    try:
        ctx.set_ecdh_curve(EC_CURVE_NAMES.get(groups[0], groups[0]))
    except (ssl.SSLError, ValueError) as exc:
        return f"this Python's ssl cannot set {groups[0]} alone ({exc})"
    return None
