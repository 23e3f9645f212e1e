# SPDX-License-Identifier: Apache-2.0
"""Where kernel metadata is read from: `/` on a live host, or a directory that
holds a copy of another machine's `sys/kernel/btf/vmlinux`,
`sys/kernel/tracing/...` and `proc/kallsyms` (`--sysroot DIR`)."""
from __future__ import annotations

import os
from pathlib import Path

from nttrace.errors import UsageError

TRACEFS_CANDIDATES = ("sys/kernel/tracing", "sys/kernel/debug/tracing")


class Sysroot:
    def __init__(self, root: str | os.PathLike = "/"):
        self.root = Path(root)
        self.live = self.root == Path("/")
        if not self.root.is_dir():
            raise UsageError(f"--sysroot {root}: not a directory")

    def path(self, relative: str) -> Path:
        return self.root / relative.lstrip("/")

    def tracefs(self) -> Path | None:
        """The tracefs mount, or None (see tracefs_problem() for why)."""
        for cand in TRACEFS_CANDIDATES:
            p = self.path(cand)
            try:
                if (p / "events").is_dir():
                    return p
            except PermissionError:
                continue
        return None

    def tracefs_problem(self) -> str:
        for cand in TRACEFS_CANDIDATES:
            p = self.path(cand)
            try:
                (p / "events").stat()
            except PermissionError:
                return f"{p} is not accessible to this user (run as root)"
            except OSError:
                continue
        return "tracefs not mounted (run `make tracefs`)"

    def btf_path(self) -> Path:
        return self.path("sys/kernel/btf/vmlinux")

    def kallsyms(self) -> Path:
        return self.path("proc/kallsyms")

    def __repr__(self) -> str:
        return f"Sysroot({str(self.root)!r})"
