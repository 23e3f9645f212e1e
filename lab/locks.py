# SPDX-License-Identifier: Apache-2.0
"""The lab's one lock on its caches: an exclusive flock on a file, released
however the holder ends (kill -9 included), across threads and processes."""
from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path):
    """Hold the lock on `path` (made, with its directory, when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
