"""Which kernel a KERNEL argument names, and how to tell it is the one running.

KERNEL is an installed release R (/boot/vmlinuz-R, with /boot/initrd.img-R,
or dracut's /boot/initramfs-R.img, where there is one) or a path to a bzImage, optionally PATH:INITRD. Its
identity is its release, its build string and the sha256 of its image (and
of its initrd: microcode and modules live there).

The build string is read from the image itself: an x86 bzImage's setup header
("HdrS" at 0x202) holds at 0x20E the offset (from 0x200) of the kernel's
version string, "R (builder@host) #1 SMP ...". The running kernel's is in
/proc/version, "Linux version R (builder@host) (compiler) #1 SMP ...": the
two agree on the release, the builder and everything from " #" on. A kernel
rebuilt with the same release has a new "#n" or date there, and a new hash.
"""
from __future__ import annotations

import hashlib
import platform
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from nttrace.errors import UsageError

BOOT = Path("/boot")
HEADER_MAGIC_AT = 0x202
VERSION_POINTER_AT = 0x20E


@dataclass(frozen=True)
class Build:
    """A kernel's build identity: release, "(builder@host)", "#n ... date"."""
    release: str
    builder: str
    version: str

    def text(self) -> str:
        return f"{self.release} {self.builder} {self.version}".strip()


@dataclass(frozen=True)
class Kernel:
    spec: str            # as the user gave it
    image: str           # absolute path of the bzImage
    initrd: str | None
    release: str
    build: str           # Build.text() of the image
    sha256: str
    initrd_sha256: str | None = None

    def as_json(self) -> dict:
        return asdict(self)


def parse_image_version(text: str) -> Build:
    """'R (builder@host) #1 SMP ...' (a bzImage's string)."""
    m = re.match(r"(\S+) (\([^()]*\)) (#.*)$", text.strip())
    if not m:
        raise ValueError(f"not a kernel version string: {text!r}")
    return Build(m.group(1), m.group(2), m.group(3))


def parse_proc_version(text: str) -> Build:
    """'Linux version R (builder@host) (compiler...) #1 SMP ...' (/proc/version)."""
    m = re.match(r"Linux version (\S+) (\([^()]*\)) .*? (#\d.*)$", text.strip())
    if not m:
        raise ValueError(f"not a /proc/version line: {text!r}")
    return Build(m.group(1), m.group(2), m.group(3))


def image_version(path: Path) -> str:
    """The version string embedded in a bzImage's setup header."""
    try:
        with open(path, "rb") as f:
            head = f.read(0x10000)
    except OSError as exc:
        raise UsageError(f"cannot read kernel image {path}: {exc.strerror}") from None
    if len(head) < VERSION_POINTER_AT + 2 or head[HEADER_MAGIC_AT:HEADER_MAGIC_AT + 4] != b"HdrS":
        raise UsageError(f"{path}: not an x86 bzImage (no setup header)")
    at = 0x200 + struct.unpack_from("<H", head, VERSION_POINTER_AT)[0]
    raw = head[at:at + 512].split(b"\0", 1)[0]
    if not raw or at >= len(head):
        raise UsageError(f"{path}: its setup header names no version string")
    return raw.decode(errors="replace")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def resolve(spec: str, boot: Path = BOOT) -> Kernel:
    """The Kernel a KERNEL argument names; UsageError (exit 2) where none."""
    if "/" not in spec:
        image = boot / f"vmlinuz-{spec}"
        if not image.is_file():
            raise UsageError(f"unknown kernel {spec!r}: no {image} (an installed release, or a path to a bzImage)")
        initrd_path = next((str(p) for p in (boot / f"initrd.img-{spec}", boot / f"initramfs-{spec}.img")
                            if p.is_file()), None)
    else:
        path, _, initrd_text = spec.partition(":")
        image = Path(path).resolve()
        if not image.is_file():
            raise UsageError(f"unknown kernel {spec!r}: no file {path}")
        initrd_path = None
        if initrd_text:
            if not Path(initrd_text).is_file():
                raise UsageError(f"kernel {spec!r}: no initrd {initrd_text}")
            initrd_path = str(Path(initrd_text).resolve())
    text = image_version(image)
    try:
        build = parse_image_version(text)
    except ValueError:
        raise UsageError(f"{image}: its version string {text!r} is not 'R (builder@host) #...'") from None
    if "/" not in spec and build.release != spec:
        raise UsageError(f"{image}: its version string says release {build.release}, not {spec}")
    return Kernel(spec, str(image), initrd_path, build.release, build.text(), sha256(image),
                  sha256(Path(initrd_path)) if initrd_path else None)


@dataclass(frozen=True)
class Running:
    """The facts of the kernel running now (what each boot checks)."""
    release: str
    proc_version: str

    @classmethod
    def now(cls) -> "Running":
        return cls(platform.release(), Path("/proc/version").read_text().strip())

    def build(self) -> str:
        try:
            return parse_proc_version(self.proc_version).text()
        except ValueError:
            return self.proc_version


def is_running(kernel: Kernel | dict, running: Running) -> bool:
    """Release AND build: another build of the same release is not it."""
    k = kernel if isinstance(kernel, dict) else kernel.as_json()
    return running.release == k["release"] and running.build() == k["build"]


def changed(kernel: dict) -> str | None:
    """Why the image (or initrd) recorded as `kernel` is no longer that file, or None."""
    for path, recorded in ((kernel["image"], kernel["sha256"]), (kernel.get("initrd"), kernel.get("initrd_sha256"))):
        if not path:
            continue
        try:
            now = sha256(Path(path))
        except OSError as exc:
            return f"{path} is gone ({exc.strerror})"
        if recorded and now != recorded:
            return f"{path} changed since the loop started (sha256 {recorded[:12]} -> {now[:12]}): no mixed builds"
    return None
