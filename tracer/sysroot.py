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
        for cand in TRACEFS_CANDIDATES:
            p = self.path(cand)
            if (p / "events").is_dir():
                return p
        return None

    def btf_path(self) -> Path:
        return self.path("sys/kernel/btf/vmlinux")

    def kallsyms(self) -> Path:
        return self.path("proc/kallsyms")

    def __repr__(self) -> str:
        return f"Sysroot({str(self.root)!r})"
