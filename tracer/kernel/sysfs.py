# SPDX-License-Identifier: Apache-2.0
"""Reading the one-line text files under /sys and /proc that report a single
value: each read gives the file's text stripped, or None where the file is not
there or cannot be read (a kernel or machine without it), so a caller records
the absence rather than failing on it."""
from __future__ import annotations

from pathlib import Path


def read(path: Path) -> str | None:
    """path's text without its surrounding white space; None where it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def to_int(text: str | None) -> int | None:
    """text as a decimal integer; None for None or for text that is not one."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
