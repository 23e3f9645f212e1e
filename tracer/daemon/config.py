# SPDX-License-Identifier: Apache-2.0
"""The daemon's TOML configuration (stdlib tomllib).

    listen = "127.0.0.1:9435"          # loopback by default
    log_level = "info"                 # debug, info, warning, error
    probes = ["migrate", "memmap", "copy"]
    perf = ["llc", "memory_traffic"]   # system-wide counters, where the host has them

    web_config_file = "/etc/nttrace/web-config.yml"   # optional: TLS, client
                                       # certificates, bcrypt basic auth, headers,
                                       # rate limit (the exporter toolkit's format;
                                       # re-read when it changes; --web.config.file wins)

The web endpoint is configured one way: the web config file (TLS and
users are keys there, not tables here).

Every problem is reported as one UsageError line naming the file and key.
"""
from __future__ import annotations

import ipaddress
import os
import tomllib
from dataclasses import dataclass

from nttrace.errors import UsageError
from nttrace.probes import DEFAULT, PROBES

DEFAULT_LISTEN = "127.0.0.1:9435"
LOG_LEVELS = ("debug", "info", "warning", "error")
PERF_GROUPS = ("llc", "memory_traffic")
TOP_KEYS = {"listen", "log_level", "probes", "perf", "web_config_file"}


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 9435
    log_level: str = "info"
    probes: tuple[str, ...] = DEFAULT
    perf: tuple[str, ...] = ()
    web_config_file: str | None = None
    source: str = "<defaults>"

    @property
    def listen(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str, where: str) -> tuple[str, int]:
    if not isinstance(text, str) or ":" not in text:
        raise UsageError(f"{where}: listen must be \"ADDR:PORT\", got {text!r}")
    host, _, port_s = text.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise UsageError(f"{where}: listen address {host!r} is not an IP address") from None
    if not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise UsageError(f"{where}: listen port {port_s!r} is not a port number (1-65535)")
    return host, int(port_s)


def _str_list(value, key: str, where: str, allowed) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: {key} must be a list of strings")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise UsageError(f"{where}: unknown {key} {', '.join(bad)} (choose from {', '.join(allowed)})")
    return tuple(dict.fromkeys(value))


def load(path: str | None, listen_override: str | None = None, web_config_override: str | None = None) -> Config:
    where = path or "<defaults>"
    data: dict = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise UsageError(f"{path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{path}: TOML syntax error: {exc}") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    host, port = parse_listen(listen_override or data.get("listen", DEFAULT_LISTEN),
                              "--listen" if listen_override else where)
    level = data.get("log_level", "info")
    if level not in LOG_LEVELS:
        raise UsageError(f"{where}: log_level must be one of {', '.join(LOG_LEVELS)}")
    probes = _str_list(data.get("probes", list(DEFAULT)), "probes", where, tuple(PROBES))
    if not probes:
        raise UsageError(f"{where}: probes is empty")
    perf = _str_list(data.get("perf", []), "perf", where, PERF_GROUPS)
    web = web_config_override or data.get("web_config_file")
    if web is not None and (not isinstance(web, str) or not web):
        raise UsageError(f"{where}: web_config_file must be a non-empty string (a path)")
    if web and not web_config_override and not os.path.isabs(web) and path is not None:
        web = os.path.join(os.path.dirname(os.path.abspath(path)), web)
    return Config(host, port, level, probes, perf, web, where)
