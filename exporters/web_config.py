# SPDX-License-Identifier: Apache-2.0
"""The exporter toolkit's web configuration (`--web.config.file`), as every
Prometheus exporter takes it, read and checked into one WebConfig: TLS
(nttrace.exporters.web_tls), response headers, bcrypt basic-auth users and
a request rate limit (nttrace.exporters.web_auth), in one YAML file.

    tls_server_config:
      cert_file: server.crt            # relative paths: beside the YAML file
      key_file: server.key
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2y$10$...           # htpasswd -nBC 10 "" | tr -d ':\\n'
    rate_limit: {interval: 1s, burst: 10}

This module owns the file: its YAML, its top-level keys, the sections'
keys, the headers, and reading it whole. Each section is checked where it
is built (TLS in web_tls, users and the rate limit in web_auth); a change
to the file is re-read by nttrace.exporters.web_config_reload.

Stricter than YAML: a key given twice in one mapping is refused (the last
one would win silently). `http2` is accepted and ignored (the endpoint
speaks HTTP/1.x). Every file a load reads is read whole or not at all: the
files are read again until their (inode, size, mtime, ctime) are the same
before and after. A file cut short that still parses cannot be told from a
complete one: write a new file and rename it over the old.
"""
from __future__ import annotations

import os
import ssl
import time
from dataclasses import dataclass, field

from nttrace.errors import UsageError
from nttrace.exporters import web_auth, web_tls

TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
HTTP_KEYS = {"http2", "headers"}
# The toolkit's list of settable headers, and the values it accepts where it checks them.
HEADERS = {"Content-Security-Policy": None, "X-Frame-Options": ("deny", "sameorigin"),
           "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": None, "Strict-Transport-Security": None}
READ_ATTEMPTS = 5


@dataclass(frozen=True)
class WebConfig:
    """One loaded configuration, frozen: a reload builds a new one and
    swaps it in whole (web_config_reload), so a request that takes one
    reads one whole configuration, never half of a reload. (The users'
    compare caches and the rate limiter's bucket change as requests come;
    they belong to this configuration and go with it.)"""

    tls: ssl.SSLContext | None = None
    users: web_auth.Users = field(default_factory=lambda: web_auth.Users({}))
    headers: dict[str, str] = field(default_factory=dict)
    allowed_sans: tuple[str, ...] = ()
    rate_limit: web_auth.RateLimit | None = None
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


def load(path: str, named: list | None = None) -> WebConfig:
    """Read and check one web-config file and the files it names, whole:
    read again while any of them changed during the read (up to
    READ_ATTEMPTS). Every problem is one UsageError line naming the file and
    the key. `named` collects the files the file names, also when it fails
    to load (a failed reload watches them)."""
    for attempt in range(READ_ATTEMPTS):
        cfg = _load_once(path, named)
        if fingerprint(cfg.files) == cfg.read:
            return cfg
        time.sleep(0.02 * (attempt + 1))
    raise UsageError(f"{path}: its files changed each time they were read ({READ_ATTEMPTS} reads): not loaded")


def _load_once(path: str, named: list | None) -> WebConfig:
    import yaml
    named = [] if named is None else named
    named.append(os.path.abspath(path))
    read = fingerprint([os.path.abspath(path)])     # before reading: a later change differs from it
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
    tls = _check_keys(data.get("tls_server_config"), web_tls.TLS_KEYS, path, "tls_server_config")
    tls_files = web_tls.files_named(tls, base)
    named.extend(tls_files)
    read += fingerprint(tls_files)                   # before tls_context reads them
    http = _check_keys(data.get("http_server_config"), HTTP_KEYS, path, "http_server_config")
    if "http2" in http and not isinstance(http["http2"], bool):
        raise UsageError(f"{path}: http_server_config.http2 must be true or false")
    limiter = web_auth.rate_limit_from(_check_keys(data.get("rate_limit"), web_auth.RATE_KEYS, path, "rate_limit"),
                                       path)
    ctx, sans = web_tls.tls_context(tls, path, base)
    return WebConfig(tls=ctx, users=web_auth.users_from(data.get("basic_auth_users"), path),
                     headers=_headers(http, path), allowed_sans=sans, rate_limit=limiter, read=read, source=path,
                     empty=empty)


def fingerprint(files) -> tuple:
    """(path, inode, size, mtime, ctime) of each file, or (path, errno)."""
    out = []
    for p in files:
        try:
            st = os.stat(p)
            out.append((p, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError as exc:
            out.append((p, exc.errno))
    return tuple(out)


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
