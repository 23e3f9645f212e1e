# SPDX-License-Identifier: Apache-2.0
"""The running web configuration, re-read when its files change.

`WebConfigSource` re-reads the web config file, and the certificate, key
and CA files it names, when any of them changes (checked on every
connection, as the exporter toolkit reads the file on every request):
certificates, client CAs and users rotate without a restart. A new file
that does not load keeps the last good one, logged once per change and
counted in `status` (nttrace.exporters.web_config_collector exports it);
after such a change the files the new file names are watched as well as
the last good ones. A reload may turn TLS on or off (each connection is
wrapped by the configuration it reads). A reload to an empty file is
refused (a file being written; the toolkit takes an empty file as "no TLS,
no users" at start, and so does nttrace).

Never seen half-way: what a connection reads (`current()`, a frozen
WebConfig) and what a scrape reads (`status`, a frozen ReloadStatus) are
each one reference, replaced whole by a reload under the source's lock and
read without it: a reader holds the old object or the new one, never a
mix of the two. Nothing in either is changed after it is built.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from nttrace.errors import UsageError
from nttrace.exporters.web_config import WebConfig, fingerprint, load

log = logging.getLogger("nttrace.web_config")


@dataclass(frozen=True)
class ReloadStatus:
    """How the last change to the web config files went."""

    ok: bool = True               # the last change loaded (or none came)
    last_success: float = 0.0     # when the configuration in use was loaded (time.time())
    failures: int = 0             # changes that did not load


def _by_path(prints) -> dict:
    return {entry[0]: entry[1:] for entry in prints}


class WebConfigSource:
    """The web configuration in use: from `path`, re-read when its files
    change, or (no path) none: plain HTTP, no users, no limit.
    Watched: the files of the configuration in use and, after a change that
    did not load, the files the changed file names as well."""

    def __init__(self, path: str | None = None):
        self.path = path
        self._lock = threading.Lock()
        self._config = load(path) if path is not None else WebConfig()
        self.status = ReloadStatus(last_success=time.time())
        self._seen = _by_path(self._config.read)    # path -> fingerprint handled (loaded or failed)

    @property
    def tls(self) -> bool:
        return self._config.tls is not None

    @property
    def watched(self) -> tuple[str, ...]:
        return tuple(self._seen)

    def _changed(self) -> dict | None:
        now = _by_path(fingerprint(self._seen))
        return None if now == self._seen else now

    def current(self) -> WebConfig:
        """The configuration to serve one connection by, re-read first if
        a watched file changed."""
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
                old = self.status
                self.status = ReloadStatus(False, old.last_success, old.failures + 1)
                # the fingerprints taken before this read: a change during it is seen next time
                self._seen = {**before, **_by_path(fingerprint(p for p in named if p not in before))}
                return self._config
            # new.read was taken before each file was read (load()): a file
            # replaced while they were read (a rotation renaming its files
            # one by one) differs from it, so the next connection reads
            # again. Taken after the read, it would record a new file whose
            # old content was loaded and never read it again: a rotation
            # whose users stay the old ones.
            if (new.tls is None) != (self._config.tls is None):
                log.warning("web config: TLS turned %s by %s", "on" if new.tls else "off", self.path)
            self._config, self._seen = new, _by_path(new.read)
            self.status = ReloadStatus(True, time.time(), self.status.failures)
            log.info("web config reloaded from %s", self.path)
            return self._config
