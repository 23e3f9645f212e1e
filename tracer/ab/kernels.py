# SPDX-License-Identifier: Apache-2.0
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

Beside the image, a kernel brings its module tree /lib/modules/R (hashed
like the image: a `make modules_install` between boots is another build),
its config (/boot/config-R, or the .config of the tree a bzImage path was
built in, or a `config` file beside it; hashed) and its headers
(/lib/modules/R/build, which bcc compiles against: the directory it
resolves to, and a hash of what bcc reads there, its include trees and
.config; two kernels whose headers resolve to one tree would compile the
probes of both against one build). Every path is read under ROOT so the
tests lay out a machine in a directory.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from nttrace.errors import UsageError

ROOT = Path("/")
BOOT = Path("/boot")
MODULES = Path("/lib/modules")
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
    modules_dir: str | None = None       # /lib/modules/R where there is one
    modules_sha256: str | None = None    # modules_sha256() of it at start
    config: str | None = None            # the kernel's config file
    headers: str | None = None           # /lib/modules/R/build where it holds include/
    headers_real: str | None = None      # the directory headers resolves to
    headers_sha256: str | None = None    # headers_sha256() of it at start
    config_sha256: str | None = None     # sha256 of the config file at start

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


class HashCache:
    """The sha256 of each file hashed, reused while the file's size,
    modification time and inode are what they were when it was hashed (a
    file whose contents change gets a new modification time, as make and
    rsync assume): what lets the loop check a distribution kernel's module
    tree (hundreds of MB) and headers at every boot in about a second, with
    the contents' hashes it recorded at start. Kept as JSON at `path` (None:
    in memory only); a cache that does not read is empty."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.entries: dict[str, list] = {}
        self.dirty = False
        if path is not None:
            try:
                data = json.loads(path.read_text())
                self.entries = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self.entries = {}

    def sha256(self, p: Path) -> str:
        st = os.stat(p)
        key = str(p)
        e = self.entries.get(key)
        if isinstance(e, list) and len(e) == 4 and e[:3] == [st.st_size, st.st_mtime_ns, st.st_ino]:
            return e[3]
        digest = sha256(p)
        self.entries[key] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
        self.dirty = True
        return digest

    def save(self) -> None:
        """Write the cache where it is kept (whole: a temporary, renamed)."""
        if self.path is None or not self.dirty:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.entries))
        os.replace(tmp, self.path)
        self.dirty = False


def under(root: Path, path: Path) -> Path:
    """`path` (absolute on the machine) as seen under `root`; "/" is the machine itself."""
    return root / path.relative_to("/") if path.is_absolute() else root / path


def resolve_link(root: Path, path: Path, hops: int = 8) -> Path:
    """`path` under `root` with its symbolic links followed inside `root`: an
    absolute link (/lib/modules/R/build -> /usr/src/linux-headers-R) means
    root/usr/src/..., not the test host's own /usr/src."""
    for _ in range(hops):
        if not path.is_symlink():
            return path
        target = Path(os.readlink(path))
        path = under(root, target) if target.is_absolute() else path.parent / target
    return path


def modules_sha256(tree: Path, cache: HashCache | None = None) -> str:
    """sha256 over a module tree's files: each regular file's path (relative
    to the tree) and contents, each symbolic link's path and target, in
    sorted order. The top-level build/ and source/ links (the headers) are
    not the modules and are left out. The files' contents' hashes come from
    `cache` where it has them."""
    cache = cache or HashCache()
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(tree):
        rel_dir = Path(dirpath).relative_to(tree)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in ("build", "source")]
            filenames = [f for f in filenames if f not in ("build", "source")]
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            p = Path(dirpath) / name
            rel = str(rel_dir / name).encode()
            if p.is_symlink():
                h.update(b"L" + rel + b"\0" + os.readlink(p).encode() + b"\0")
            elif p.is_file():
                h.update(b"F" + rel + b"\0" + cache.sha256(p).encode() + b"\0")
    return h.hexdigest()


# what bcc reads of a kernel's headers, besides the .config: its include trees
ARCH_OF = {"x86_64": "x86", "i686": "x86", "i386": "x86", "aarch64": "arm64", "ppc64le": "powerpc",
           "s390x": "s390", "riscv64": "riscv"}


def header_trees(headers: Path) -> list[Path]:
    """The directories of a headers tree bcc compiles against: include/ and
    arch/<arch>/include of the tree and, for a build made with O= (a
    `source` link in it), of its source tree."""
    arch = ARCH_OF.get(platform.machine(), "*")
    out = []
    for top in (headers, headers / "source"):
        if top == headers / "source" and not top.exists():
            continue
        out.append(top / "include")
        out += sorted(top.glob(f"arch/{arch}/include"))
    return [p for p in out if p.is_dir()]


def headers_sha256(headers: Path, cache: HashCache | None = None) -> str:
    """sha256 over the headers bcc reads (header_trees(), followed through
    links, each file's path in its tree and contents) and the tree's .config;
    the files' contents' hashes from `cache` where it has them."""
    cache = cache or HashCache()
    h = hashlib.sha256()
    config = headers / ".config"
    if config.is_file():
        h.update(b"C" + cache.sha256(config).encode() + b"\0")
    for i, tree in enumerate(header_trees(headers)):
        for dirpath, dirnames, filenames in os.walk(tree, followlinks=True):
            dirnames.sort()
            rel_dir = Path(dirpath).relative_to(tree)
            for name in sorted(filenames):
                p = Path(dirpath) / name
                try:
                    digest = cache.sha256(p)
                except OSError:           # a dangling link: named, not read
                    digest = "-"
                h.update(f"F{i}/{rel_dir / name}\0{digest}\0".encode())
    return h.hexdigest()


def find_config(image: Path, release: str, root: Path, installed: bool) -> Path | None:
    """The kernel's config: /boot/config-R for an installed release; for a
    bzImage path the one beside it (a `config` file, or the .config of the
    tree arch/*/boot/bzImage was built in), else /boot/config-R."""
    near = [] if installed else [image.with_name("config"), image.with_name(".config")]
    if not installed and len(image.parents) > 3 and image.parents[2].name == "arch":
        near.append(image.parents[3] / ".config")
    return next((p for p in [*near, under(root, BOOT) / f"config-{release}"] if p.is_file()), None)


def resolve(spec: str, boot: Path | None = None, root: Path | None = None, cache: HashCache | None = None) -> Kernel:
    """The Kernel a KERNEL argument names; UsageError (exit 2) where none.
    `cache` keeps the hashes of the files it read, for the loop's boots."""
    root = root if root is not None else ROOT
    cache = cache or HashCache()
    boot = boot if boot is not None else under(root, BOOT)
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
    mods = under(root, MODULES) / build.release
    have_mods = mods.is_dir()
    headers = resolve_link(root, mods / "build")
    config = find_config(image, build.release, root, "/" not in spec)
    has_headers = (headers / "include").is_dir()
    headers = headers.resolve() if has_headers else headers
    return Kernel(spec, str(image), initrd_path, build.release, build.text(), cache.sha256(image),
                  cache.sha256(Path(initrd_path)) if initrd_path else None,
                  modules_dir=str(mods) if have_mods else None,
                  modules_sha256=modules_sha256(mods, cache) if have_mods else None,
                  config=str(config) if config else None,
                  headers=str(mods / "build") if has_headers else None,
                  headers_real=str(headers) if has_headers else None,
                  headers_sha256=headers_sha256(headers, cache) if has_headers else None,
                  config_sha256=cache.sha256(config) if config else None)


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


def changed(kernel: dict, root: Path | None = None, cache: HashCache | None = None) -> str | None:
    """Why the image, initrd, module tree, headers or config recorded as
    `kernel` is no longer what the loop started with, or None. `root`: where
    the headers' absolute links lead (the machine's /; a laid-out tree in
    the tests); `cache`: the files' hashes from the boots before."""
    cache = cache or HashCache()
    for path, recorded in ((kernel["image"], kernel["sha256"]), (kernel.get("initrd"), kernel.get("initrd_sha256"))):
        if not path:
            continue
        try:
            now = cache.sha256(Path(path))
        except OSError as exc:
            return f"{path} is gone ({exc.strerror})"
        if recorded and now != recorded:
            return f"{path} changed since the loop started (sha256 {recorded[:12]} -> {now[:12]}): no mixed builds"
    tree, recorded = kernel.get("modules_dir"), kernel.get("modules_sha256")
    if tree and recorded:
        if not Path(tree).is_dir():
            return f"the module tree {tree} is gone"
        now = modules_sha256(Path(tree), cache)
        if now != recorded:
            return (f"the module tree {tree} changed since the loop started (sha256 {recorded[:12]} -> {now[:12]}; "
                    "modules installed again?): no mixed builds")
    headers, recorded = kernel.get("headers"), kernel.get("headers_sha256")
    if headers and recorded:
        real = resolve_link(root if root is not None else ROOT, Path(headers)).resolve()
        if not (real / "include").is_dir():
            return f"its headers {headers} are gone (bcc would have nothing to compile the probes against)"
        if kernel.get("headers_real") and str(real) != kernel["headers_real"]:
            return f"its headers {headers} now lead to {real}, not {kernel['headers_real']}: no mixed builds"
        now = headers_sha256(real, cache)
        if now != recorded:
            return (f"its headers {real} changed since the loop started (sha256 {recorded[:12]} -> {now[:12]}; "
                    "another build's headers installed, or the tree rebuilt?): no mixed builds")
    config, recorded = kernel.get("config"), kernel.get("config_sha256")
    if config and recorded:
        try:
            now = cache.sha256(Path(config))
        except OSError as exc:
            return f"its config {config} is gone ({exc.strerror})"
        if now != recorded:
            return f"its config {config} changed since the loop started (sha256 {recorded[:12]} -> {now[:12]})"
    return None


def module_name(path: str) -> str:
    """'kernel/drivers/scsi/sd_mod.ko.xz' -> 'sd_mod' (the kernel treats - and _ alike)."""
    return Path(path.strip()).name.split(".ko", 1)[0].replace("-", "_")


def builtin_modules(kernel: dict) -> set[str] | None:
    """The modules built into the kernel (its modules.builtin), None where the
    kernel has no module tree to say."""
    tree = kernel.get("modules_dir")
    try:
        text = (Path(tree) / "modules.builtin").read_text(errors="replace") if tree else None
    except OSError:
        return None
    return None if text is None else {module_name(line) for line in text.splitlines() if line.strip()}


def loadable_modules(kernel: dict) -> set[str]:
    """The modules the kernel's tree holds as loadable (its modules.dep)."""
    tree = kernel.get("modules_dir")
    try:
        dep = (Path(tree) / "modules.dep").read_text(errors="replace") if tree else ""
    except OSError:
        return set()
    return {module_name(line.split(":", 1)[0]) for line in dep.splitlines() if ":" in line}


def has_module(kernel: dict, name: str) -> bool:
    """`name` is built into the kernel (modules.builtin) or is a module of its
    tree (modules.dep, or a .ko* file where depmod has not run)."""
    want = name.replace("-", "_")
    if want in (builtin_modules(kernel) or set()) or want in loadable_modules(kernel):
        return True
    tree = kernel.get("modules_dir")
    return bool(tree) and any(module_name(p.name) == want for p in Path(tree).rglob("*.ko*"))


def read_config(path: str | Path) -> dict[str, str]:
    """A kernel config's settings: {"CONFIG_X": value as written}; options
    `# CONFIG_X is not set` are left out (not set = absent)."""
    out = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        m = re.match(r"(CONFIG_\w+)=(.*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def config_value(kernel: dict, option: str) -> str | None:
    """'y', 'm', the string or number (quotes removed), or None where the
    option is not set or the kernel has no config."""
    if not kernel.get("config"):
        return None
    try:
        value = read_config(kernel["config"]).get(option)
    except OSError:
        return None
    if value is not None and len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value
