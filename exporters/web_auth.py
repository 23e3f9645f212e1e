# SPDX-License-Identifier: Apache-2.0
"""Who may ask the web endpoint, and how often: the web config's
`basic_auth_users` (bcrypt hashes, checked through bounded caches and a
bounded number of concurrent compares) and its `rate_limit` (a token
bucket), each built from its section of the file and checked there.

    basic_auth_users:
      prometheus: $2y$10$...           # htpasswd -nBC 10 "" | tr -d ':\\n'
    rate_limit:
      interval: 1s                     # a Go duration; 0 or absent: no limit
      burst: 10

A user's bcrypt cost is bounded (MAX_BCRYPT_COST): a cost-31 hash would
take days a compare. bcrypt runs in the connection's own thread, at most
BCRYPT_SLOTS at once in the process; a compare that finds every slot taken
raises AuthBusy at once (the server answers 429), so a flood of wrong
passwords queues nothing in front of a scrape whose credentials are cached.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
import time
from collections import OrderedDict

from nttrace.errors import UsageError

BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
MAX_BCRYPT_COST = 14      # ~1 s a compare on a 2020s core; each step doubles it (31: days)
BCRYPT_MAX_PASSWORD = 72   # bcrypt reads only the first 72 bytes: longer passwords are refused, not truncated
DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h))+$")   # Go's time.ParseDuration units
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
RATE_KEYS = {"interval", "burst"}

# Half the CPUs, so a flood of wrong passwords leaves the other half to
# serving. A wrong password that misses the cache takes a slot; a scrape
# whose credentials are cached takes none, so wrong passwords cannot starve
# authorised scrapes.
BCRYPT_SLOTS = max(1, min(4, (os.cpu_count() or 1) // 2))
_bcrypt_slots = threading.BoundedSemaphore(BCRYPT_SLOTS)
AUTH_STATS = {"busy": 0, "compares": 0, "cache_hits": 0}   # read by the exporter's own metrics
OK_CACHE_SIZE = 100         # the toolkit's cache size; successes only: an attacker cannot evict them
FAILED_CACHE_SIZE = 1000


class AuthBusy(Exception):
    """Every bcrypt slot is taken: the request is answered at once (429),
    never queued behind the compares that hold them."""


class Users:
    """Basic-auth users and their bcrypt hashes (the toolkit's).

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
        self.dummy = None
        if hashes:
            import bcrypt
            # made at cost 4 (a millisecond), then given the users' cost:
            # checkpw runs the cost the hash names
            fast = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(4)).decode()
            self.dummy = f"{fast[:4]}{max(int(h[4:6]) for h in hashes.values()):02d}{fast[6:]}"

    def _key(self, user: str, target: str, pw: bytes) -> bytes:
        u, t = user.encode(), target.encode()
        return hmac.new(self._secret, b"%d:%s%d:%s" % (len(u), u, len(t), t) + pw, hashlib.sha256).digest()

    @staticmethod
    def _compare(pw: bytes, target: str) -> bool:
        """The one compare every check runs, known user or not."""
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
        if self.dummy is None:
            return False          # no users: no password is right (authorized() lets everyone in)
        pw = password.encode()
        stored = self.hashes.get(user)
        target = stored if stored is not None else self.dummy
        if len(pw) > BCRYPT_MAX_PASSWORD:
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
        """Whether a request with this Authorization header may be served
        (any request, when there are no users)."""
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


def users_from(section, where: str) -> Users:
    """The file's basic_auth_users, checked: one UsageError line naming the
    file (`where`) and the user."""
    if section is None:
        return Users({})
    if not isinstance(section, dict):
        raise UsageError(f"{where}: basic_auth_users must be a mapping of user to bcrypt hash")
    out = {}
    for user, h in section.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise UsageError(f"{where}: basic_auth_users: {user!r} is not a user name")
        if not isinstance(h, str) or not BCRYPT_HASH.match(h) or not 4 <= int(h[4:6]) <= 31:
            raise UsageError(f"{where}: basic_auth_users.{user}: not a bcrypt hash ($2a$, $2b$ or $2y$, "
                             "cost 4-31; htpasswd -nBC 10)")
        if int(h[4:6]) > MAX_BCRYPT_COST:
            raise UsageError(f"{where}: basic_auth_users: hash for {user} has cost {int(h[4:6])}, above the limit "
                             f"{MAX_BCRYPT_COST}")
        out[user] = h
    return Users(out)


class RateLimit:
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


def rate_limit_from(section: dict, where: str) -> RateLimit | None:
    """The file's rate_limit (its keys already checked against RATE_KEYS),
    or None for no limit."""
    if not section:
        return None
    interval = _duration_s(section.get("interval", 0), where)
    burst = section.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise UsageError(f"{where}: rate_limit.burst must be a non-negative integer")
    if interval <= 0:
        return None
    if burst < 1:
        raise UsageError(f"{where}: rate_limit.burst must be at least 1 when interval is set "
                         "(the toolkit's limiter would refuse every request)")
    return RateLimit(interval, burst)
