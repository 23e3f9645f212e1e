# SPDX-License-Identifier: Apache-2.0
"""What the running kernel (or a captured sysroot) is: BTF, enums and offsets, tracefs formats, the machine."""
import mmap
from pathlib import Path

PAGE = mmap.PAGESIZE     # the running kernel's page size, in bytes


def boot_id() -> str | None:
    """This boot's id (a new one at every boot, kexec included); None where
    the kernel does not say (an old kernel, a sysroot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
