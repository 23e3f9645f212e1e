# SPDX-License-Identifier: Apache-2.0
"""Where kernel metadata is read from: `/` on a live host, or a directory that
holds a copy of another machine's `sys/kernel/btf/vmlinux`,
`sys/kernel/tracing/...` and `proc/kallsyms` (`--sysroot DIR`; which files,
and how to copy them: docs/validate.md). What a copy lacks is said as such
(Sysroot.lacks), never as something the machine lacks."""
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

    def lacks(self, live_reason: str, *relatives: str) -> str:
        """Why something is missing: on the live host `live_reason` (what the
        kernel or the host lacks); in a copy, only that the copy holds none of
        `relatives` (a file left out of a copy says nothing of the machine)."""
        if self.live:
            return live_reason
        if len(relatives) == 1:
            return f"the copy holds no {relatives[0]}"
        return f"the copy holds neither {' nor '.join(relatives)}"

    def tracefs_problem(self) -> str:
        if not self.live:
            return self.lacks("", *(f"{c}/events" for c in TRACEFS_CANDIDATES))
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
