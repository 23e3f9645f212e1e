# SPDX-License-Identifier: Apache-2.0
"""The lab's kernels: Debian's linux-source-7.2 with the seed series applied
as posted, one config for every variant, built once and cached outside the
clone, keyed on what goes into them.

    python3 -m lab.kernel_build [VARIANT ...]      # build (or find) them
    python3 -m lab.kernel_build --list             # variants and keys
    python3 -m lab.kernel_build NAME=FILE:VERSION[+FILE:VERSION...]
        # a variant of your own: the series in those files (text or mbox,
        # applied in the order given) on the same source and config, e.g.
        # mine=~/v9.mbx:v9+nt-demotion-rfc-v2-v3.txt:v3

Variants (VARIANTS below): base (no patches), nt-v3 (zone-device template
v8 1-9 + NT demotion RFC v3 1-3) and nt-v2 (v8 1-9 + RFC v2 1-3 with the two
hunks of v2 2/3 that 7.2 moved, redone by kernel/fixups/). The series are cut
from the mailing-list text files in $NTTRACE_SEEDS (default
../shared/reference/seeds beside the clone) by mailing_list.py; a user points
NTTRACE_SEEDS at their own copies, or names files in a Variant of their own.

Cache ($NTTRACE_KERNEL_CACHE, default /var/cache/nttrace-kernel):
  apt/                 private apt lists/state for the unstable suite (the
                       system's apt configuration is never touched)
  dl/                  the linux-source .deb, and its tree unpacked once
  work/<variant>/src   the variant's patched tree (hard links to dl/, so
                       patching replaces files and never writes through)
  work/<variant>/build make O= output, kept: a changed input rebuilds only
                       what depends on it
  kernels/<variant>-<key>/  bzImage, modules/<release>/ (with build/ holding
                       the headers bcc needs), debs/ (linux-image-<release>
                       and linux-headers-<release>, made by the kernel's own
                       `make bindeb-pkg`), build.json; `complete` last
Each variant has a release of its own, 7.2.13-nttrace-<variant>
(LOCALVERSION): installed side by side as packages, two variants keep
their own /boot/vmlinuz-R, /lib/modules/R and headers, as two kernels on a
real machine must (nttrace ab refuses two kernels that share them).
The key hashes the source package, the config inputs, the patches' diffs and
the fixups, and the compiler: anything else (a reworded review reply, a
test) does not rebuild a kernel.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import mailing_list, private_apt
from lab.locks import locked

HERE = Path(__file__).resolve().parent
TREE = HERE.parent

CACHE = Path(os.environ.get("NTTRACE_KERNEL_CACHE", "/var/cache/nttrace-kernel"))
SEEDS = Path(os.environ.get("NTTRACE_SEEDS", TREE.parent / "shared" / "reference" / "seeds"))
SOURCE_PACKAGE = "linux-source-7.2"
SUITE = "unstable"
MIRROR = os.environ.get("NTTRACE_KERNEL_MIRROR", "http://deb.debian.org/debian")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
CONFIG_FRAGMENT = HERE / "kernel" / "lab.config"
FIXUPS = HERE / "kernel" / "fixups"
JOBS = int(os.environ.get("NTTRACE_KERNEL_JOBS", str(os.cpu_count() or 2)))
# bcc compiles against these, relative to the source and the build tree
HEADER_DIRS_SRC = ("include", "arch/x86/include")
HEADER_DIRS_BUILD = ("include", "arch/x86/include/generated")


class KernelBuildError(AssertionError):
    """A step of a kernel build failed; the message names the step and
    carries the tail of its log."""

    hunks: list[str] = []          # a patch that does not apply: which hunks, where

    def __init__(self, variant: str, step: str, log: Path | None, detail: str = ""):
        self.variant, self.step, self.log, self.detail = variant, step, log, detail
        tail, first = "", ""
        if log is not None and log.exists():
            lines = log.read_text(errors="replace").splitlines()
            tail = "\n".join(lines[-40:])
            # with make -j the first error scrolls away behind the other jobs' output
            errors = [ln for ln in lines if re.search(r"\berror\b|FAILED|\*\*\*", ln)]
            first = "\n".join(errors[:8])
        super().__init__(f"kernel {variant}: step '{step}' failed{': ' + detail if detail else ''}"
                         + (f"\n--- first errors in {log} ---\n{first}" if first else "")
                         + (f"\n--- {log} (tail) ---\n{tail}" if tail else ""))


@dataclass(frozen=True)
class Series:
    """One posted series: the file it is read from, its version, and the
    fixups that stand in for hunks that do not apply (patch number -> diffs)."""
    file: str
    version: str
    fixups: dict[int, tuple[str, ...]] = field(default_factory=dict)
    upto: int | None = None          # only patches 1..upto (a step of lab.steps)

    def path(self) -> Path:
        p = Path(self.file)
        return p if p.is_absolute() else SEEDS / p

    def patches(self) -> list[mailing_list.Patch]:
        every = mailing_list.series(self.path(), self.version)
        return every if self.upto is None else [p for p in every if p.number <= self.upto]


@dataclass(frozen=True)
class Variant:
    name: str
    series: tuple[Series, ...] = ()
    tree: str | None = None          # the work tree (default: the name); steps of one series share one

    @property
    def work(self) -> str:
        return self.tree or self.name


TEMPLATE_V8 = Series("zone-device-memmap-template-nt-v8.txt", "v8")
VARIANTS = {
    "base": Variant("base"),
    "nt-v3": Variant("nt-v3", (TEMPLATE_V8, Series("nt-demotion-rfc-v2-v3.txt", "v3"))),
    "nt-v2": Variant("nt-v2", (TEMPLATE_V8, Series("nt-demotion-rfc-v2-v3.txt", "v2",
                                                   fixups={2: ("v2-2of3-compaction.diff", "v2-2of3-migrate.diff")}))),
}


@dataclass
class Kernel:
    """A built kernel, as the lab boots it."""
    variant: str
    directory: Path
    release: str
    bzimage: Path
    modules: Path          # holds <release>/ (modules_install output + build/ headers)
    info: dict

    @property
    def debs(self) -> list[Path]:
        """linux-image-R and linux-headers-R, as `make bindeb-pkg` made them."""
        return sorted((self.directory / "debs").glob("*.deb"))

    @classmethod
    def read(cls, d: Path) -> "Kernel":
        info = json.loads((d / "build.json").read_text())
        return cls(info["variant"], d, info["release"], d / "bzImage", d / "modules", info)


# -- helpers -------------------------------------------------------------------
def run_step(cmd: list[str], log: Path, variant: str, step: str, cwd: Path | None = None, timeout: float = 3600,
         env: dict | None = None) -> None:
    """Run one step, its output appended to the log. The step runs in its own
    process group, and on a timeout (or any exit of ours while it runs) the
    whole group is killed: no compiler is left behind."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            raise KernelBuildError(variant, step, log, f"exceeded {timeout:.0f}s; its processes were killed") from None
        except BaseException:
            _kill_group(p)
            raise
    if rc != 0:
        raise KernelBuildError(variant, step, log, f"exit {rc}")


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compiler_version() -> str:
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]


# -- the source ---------------------------------------------------------------
def _downloaded_source() -> Path | None:
    """The linux-source .deb in the cache, the newest if several; None before the first fetch."""
    found = sorted((CACHE / "dl").glob(f"{SOURCE_PACKAGE}_*_all.deb"))
    return found[-1] if found else None


def fetch_source(log: Path) -> Path:
    """The linux-source .deb, fetched through a private sources list and
    state directory. Reused while present."""
    dl = CACHE / "dl"
    if deb := _downloaded_source():
        return deb
    a = CACHE / "apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (a / sub).mkdir(parents=True, exist_ok=True)
    (a / "sources.list").write_text(f"deb [signed-by={KEYRING}] {MIRROR} {SUITE} main\n")
    dl.mkdir(parents=True, exist_ok=True)
    options = private_apt.options(a)
    run_step(["apt-get", *options, "update"], log, "source", "apt-get update (private state)", timeout=600)
    run_step(["apt-get", *options, "download", SOURCE_PACKAGE], log, "source", "apt-get download", cwd=dl,
             timeout=1200)
    if not (deb := _downloaded_source()):
        raise KernelBuildError("source", "apt-get download", log, f"no {SOURCE_PACKAGE} .deb arrived")
    return deb


def unpacked_source(deb: Path, log: Path) -> Path:
    """The pristine tree of the .deb, unpacked once (marker file last)."""
    root = CACHE / "dl" / f"src-{deb.stem}"
    tree = root / SOURCE_PACKAGE
    if (root / "complete").exists():
        return tree
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    x = root / "deb"
    run_step(["dpkg-deb", "-x", str(deb), str(x)], log, "source", "unpack .deb")
    tarball = next((x / "usr" / "src").glob(f"{SOURCE_PACKAGE}.tar.*"))
    run_step(["tar", "-xf", str(tarball), "-C", str(root)], log, "source", "unpack tarball", timeout=1200)
    shutil.rmtree(x)
    (root / "complete").write_text(deb.name + "\n")
    return tree


def source_file(rel: str) -> Path:
    """A file of the pristine source tree, the source package fetched and
    unpacked first where the cache lacks it."""
    log = CACHE / "logs" / "source.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with locked(CACHE / "locks" / "source"):
        return unpacked_source(fetch_source(log), log) / rel


# -- keys ---------------------------------------------------------------------
SPDX_LINE = re.compile(rb"\ASPDX-License-Identifier: [^\n]*\n")


def fixup_key_bytes(path: Path) -> bytes:
    """A fixup's bytes as the key covers them: all of it but its first line
    when that is its SPDX licence line, which patch never reads."""
    return SPDX_LINE.sub(b"", path.read_bytes(), count=1)


def variant_key(variant: Variant, deb: Path) -> tuple[str, list[dict]]:
    """The cache key and the patch list it covers. A series that cannot be
    read raises SeriesError (the caller reports it as the 'series' step)."""
    h = hashlib.sha256()
    h.update(f"source {deb.name} {deb.stat().st_size}\n".encode())
    h.update(b"config\0" + LAB_CONFIG.inputs())
    h.update(b"builder\0" + BUILD_RECIPE.encode())
    h.update(f"localversion {localversion(variant)}\n".encode())
    h.update(f"gcc {compiler_version()}\n".encode())
    plan = []
    for s in variant.series:
        for p in s.patches():
            h.update(f"patch {s.version} {p.number}/{p.total}\0".encode() + p.diff.encode())
            fix = [FIXUPS / name for name in s.fixups.get(p.number, ())]
            for f in fix:
                h.update(b"fixup\0" + fixup_key_bytes(f))
            plan.append({"series": s, "patch": p, "fixups": fix})
    return h.hexdigest()[:16], plan


# The steps below, as text: a change to how a kernel is built changes the key.
BUILD_RECIPE = "bindeb-pkg -d nokerneldbg KDEB_COMPRESS=gzip;modules_install strip;headers v1"


def localversion(variant: Variant) -> str:
    """What the variant's release adds to the source's (7.2.13 ->
    7.2.13-nttrace-nt-v3): one release per variant."""
    return f"-nttrace-{variant.name}"


# -- patching -----------------------------------------------------------------
def _patch(src: Path, diff: str, log: Path, variant: str, step: str, allow_rejects: bool) -> set[str]:
    """Apply one diff with patch -p1; returns the files with rejected hunks
    (only when allowed: otherwise any reject is the step's failure)."""
    with open(log, "a") as f:
        f.write(f"--- {step}\n")
    # patch(1)'s default fuzz (2): a hunk whose changed lines match may still
    # apply where a context line drifted (7.2 renamed a field next to v3 2/3's
    # third migrate.c hunk); every fuzzed hunk is recorded in build.json.
    p = subprocess.run(["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-r", "-"], cwd=src,
                       input=diff, capture_output=True, text=True, timeout=120)
    with open(log, "a") as f:
        f.write(p.stdout + p.stderr)
    for file, hunk, fuzz in _fuzzed(p.stdout):
        FUZZED.append(f"{step}: {file} hunk #{hunk} with fuzz {fuzz}")
    if p.returncode == 0:
        return set()
    failed = _failed_files(p.stdout)
    if p.returncode == 1 and allow_rejects and failed:
        return failed
    hunks = _failed_hunks(p.stdout)
    exc = KernelBuildError(variant, step, log, "the patch does not apply"
                           + (f" (hunks failed in {', '.join(sorted(failed))})" if failed else ""))
    exc.hunks = hunks
    raise exc


FUZZED: list[str] = []   # hunks applied with fuzz by the build under way


def _fuzzed(patch_output: str) -> list[tuple[str, int, int]]:
    current, out = None, []
    for line in patch_output.splitlines():
        if line.startswith("patching file "):
            current = line.removeprefix("patching file ").strip()
        elif m := re.match(r"Hunk #(\d+) succeeded at \d+ with fuzz (\d+)", line):
            out.append((current, int(m[1]), int(m[2])))
    return out


def _failed_hunks(patch_output: str) -> list[str]:
    """'FILE hunk #N at LINE' for each hunk patch(1) could not apply."""
    current, out = None, []
    for line in patch_output.splitlines():
        if line.startswith("patching file "):
            current = line.removeprefix("patching file ").strip()
        elif m := re.match(r"Hunk #(\d+) FAILED at (\d+)", line):
            out.append(f"{current} hunk #{m[1]} at line {m[2]}")
    return out


def _failed_files(patch_output: str) -> set[str]:
    current, failed = None, set()
    for line in patch_output.splitlines():
        if line.startswith("patching file "):
            current = line.removeprefix("patching file ").strip()
        elif "FAILED" in line and current:
            failed.add(current)
    return failed


def prepare_source(variant: Variant, pristine: Path, plan: list[dict], work: Path, log: Path) -> list[str]:
    """work/src: the pristine tree with the variant's patches (and fixups).
    Returns the files the patches touched."""
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.parent.mkdir(parents=True, exist_ok=True)
    run_step(["cp", "-al", str(pristine), str(src)], log, variant.name, "copy the source tree")
    touched: list[str] = []
    FUZZED.clear()
    for item in plan:
        s, p, fixups = item["series"], item["patch"], item["fixups"]
        step = f"apply {s.version} {p.number}/{p.total} ({p.title}) from {s.path().name}"
        failed = _patch(src, p.diff, log, variant.name, step, allow_rejects=bool(fixups))
        if fixups:
            declared = set()
            for fx in fixups:
                declared |= set(re.findall(r"^\+\+\+ b/(\S+)", fx.read_text(), flags=re.M))
            if failed != declared:
                raise KernelBuildError(variant.name, step, log,
                                       f"hunks failed in {sorted(failed) or 'no file'}, the fixups stand in for "
                                       f"{sorted(declared)}: the fixups no longer match this series")
            for fx in fixups:
                _patch(src, fx.read_text(), log, variant.name, f"fixup {fx.name}", allow_rejects=False)
        touched += p.files
    return sorted(set(touched))


# -- config and build ---------------------------------------------------------
@dataclass(frozen=True)
class KernelConfig:
    """How a .config is made: a make target that starts it, fragments merged
    onto it in order (a str is relative to the source tree, a Path is ours
    and is checked to hold after olddefconfig), and KCFLAGS for the build."""
    name: str
    start: str
    fragments: tuple = ()
    kcflags: str = ""

    def recipe(self) -> str:
        parts = [self.start, *(f if isinstance(f, str) else f.name for f in self.fragments)]
        return "+".join(parts) + ";olddefconfig" + (f";KCFLAGS={self.kcflags}" if self.kcflags else "")

    def inputs(self) -> bytes:
        """What of this config the cache key covers (our fragments' text)."""
        return self.recipe().encode() + b"".join(f.read_bytes() for f in self.fragments if isinstance(f, Path))


# The lab's config: nothing but what the guest, the scenarios and nttrace
# need (lab/kernel/lab.config says why each option is there). Debug info is
# only there for BTF, which needs every type and nothing a debugger steps by:
# -fno-var-tracking drops the variables' location lists (what
# CONFIG_DEBUG_INFO_REDUCED does too, but that option also drops types and
# Kconfig rules BTF out with it); -gno-statement-frontiers drops the line
# table's statement marks (gcc adds them at -O2 -g). Neither changes a type.
NO_VAR_TRACKING = "-fno-var-tracking -fno-var-tracking-assignments"
NO_STATEMENT_FRONTIERS = "-gno-statement-frontiers"
LAB_CONFIG = KernelConfig("lab", "allnoconfig", (CONFIG_FRAGMENT,),
                          kcflags=f"{NO_VAR_TRACKING} {NO_STATEMENT_FRONTIERS}")


def configure(src: Path, build: Path, log: Path, variant: str, config: KernelConfig = LAB_CONFIG) -> None:
    build.mkdir(parents=True, exist_ok=True)
    run_step(["make", "-s", f"O={build}", config.start], log, variant, f"configure: {config.start}", cwd=src)
    if config.fragments:
        run_step([str(src / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(build), str(build / ".config"),
              *(str(src / f) if isinstance(f, str) else str(f) for f in config.fragments)], log, variant,
             "configure: merge fragments", cwd=src)
    run_step(["make", "-s", f"O={build}", "olddefconfig"], log, variant, "configure: olddefconfig", cwd=src)
    ours = [f for f in config.fragments if isinstance(f, Path)]
    problems = config_problems("\n".join(f.read_text() for f in ours), (build / ".config").read_text())
    if problems:
        with open(log, "a") as f:
            f.write("\n".join(problems) + "\n")
        raise KernelBuildError(variant, "configure: check the fragment held", log,
                               f"{len(problems)} option(s) of {'+'.join(f.name for f in ours)} did not survive "
                               "olddefconfig: " + "; ".join(problems[:5]))


# `make bindeb-pkg` without the -dbg package (a copy of every object's
# debug info, which nothing of the lab reads: BTF is in the image), its
# packages gzip-compressed (dpkg-deb's xz is the slowest step of a package
# build that compiles nothing), and without dpkg-buildpackage's check of the
# Build-Depends it writes (libdw-dev, rsync: what a build of every config
# may need; this one needs the tools conftest's kernel-build capability lists)
DEB_PROFILES = "pkg.linux-upstream.nokerneldbg"
DEB_COMPRESS = "gzip"


def make_command(build: Path, config: KernelConfig, variant: Variant, jobs: int = JOBS) -> list[str]:
    """The build step proper: the kernel's own `make bindeb-pkg`, which
    builds vmlinux, bzImage and the modules (its debian/rules runs `make
    all`) and packages them as linux-image-R and linux-headers-R (and
    linux-libc-dev, which the lab does not use), written beside the build
    directory. One build for the packages and the bzImage the lab boots
    directly, so the two are the same link of the same objects."""
    return ["make", f"-j{jobs}", f"O={build}", f"LOCALVERSION={localversion(variant)}",
            *([f"KCFLAGS={config.kcflags}"] if config.kcflags else []),
            f"DPKG_FLAGS=-d -P{DEB_PROFILES}", f"KDEB_COMPRESS={DEB_COMPRESS}", "bindeb-pkg"]


def _packages_out(work: Path) -> list[Path]:
    """What dpkg-buildpackage leaves beside the build directory."""
    return [p for pat in ("*.deb", "*.buildinfo", "*.changes") for p in work.glob(pat)]


def keep_packages(work: Path, out: Path, release: str, log: Path, variant: str) -> list[Path]:
    """linux-image-R and linux-headers-R moved into out/debs; the rest of
    what dpkg-buildpackage wrote removed."""
    debs = out / "debs"
    debs.mkdir()
    kept = []
    for name in (f"linux-image-{release}", f"linux-headers-{release}"):
        found = sorted(work.glob(f"{name}_*.deb"))
        if len(found) != 1:
            raise KernelBuildError(variant, "bindeb-pkg", log, f"want one {name}_*.deb in {work}, found "
                                   f"{[p.name for p in found] or 'none'}")
        kept.append(found[0].rename(debs / found[0].name))
    for p in _packages_out(work):
        p.unlink()
    return kept


def config_values(text: str) -> dict[str, str]:
    """A .config or fragment's options: each one's value, "n" for `# CONFIG_X
    is not set`; a later line for the same option wins, as in merge_config.sh."""
    values = {}
    for line in text.splitlines():
        if m := re.match(r"^(CONFIG_\w+)=(.*)$", line):
            values[m[1]] = m[2]
        elif m := re.match(r"^# (CONFIG_\w+) is not set$", line):
            values[m[1]] = "n"
    return values


def config_problems(fragment: str, config: str) -> list[str]:
    """Lines of the fragment that the final .config does not carry."""
    have, want = config_values(config), config_values(fragment)
    return [f"{name}={value} became {have.get(name, 'n')}" for name, value in want.items()
            if have.get(name, "n") != value]


def install(src: Path, build: Path, out: Path, log: Path, variant: str) -> str:
    """bzImage, modules_install output and the header tree bcc compiles
    against, as <out>/modules/<release>/build (a real directory: a symlink to
    a host path would not resolve in the guest through 9p)."""
    release = (build / "include/config/kernel.release").read_text().strip()
    shutil.copy2(build / "arch/x86/boot/bzImage", out / "bzImage")
    staging = out / "modules-staging"
    run_step(["make", "-s", f"O={build}", f"KERNELRELEASE={release}", f"INSTALL_MOD_PATH={staging}",
              "INSTALL_MOD_STRIP=1", "modules_install"],
         log, variant, "modules_install", cwd=src, timeout=900)
    mods = staging / "lib" / "modules" / release
    if not (mods / "modules.dep").exists() or not (mods / "modules.builtin").exists():
        raise KernelBuildError(variant, "modules_install", log, "no modules.dep/modules.builtin (is depmod, from kmod, "
                               "installed?): the guest's modprobe needs them even for built-in drivers")
    for link in ("build", "source"):
        if (mods / link).is_symlink() or (mods / link).exists():
            (mods / link).unlink()
    headers = mods / "build"
    headers.mkdir()
    for d in HEADER_DIRS_SRC:
        run_step(["cp", "-a", "--parents", d, str(headers)], log, variant, f"headers: {d}", cwd=src)
    for d in HEADER_DIRS_BUILD:
        run_step(["cp", "-a", "--parents", d, str(headers)], log, variant, f"headers: generated {d}", cwd=build)
    shutil.copy2(build / ".config", headers / ".config")
    shutil.copy2(src / "Makefile", headers / "Makefile")
    (out / "modules").mkdir()
    mods.rename(out / "modules" / release)
    shutil.rmtree(staging)
    return release


def _kernel_dir(name: str, key: str) -> Path:
    """Where the kernel of a variant with this key is kept (complete once it holds `complete`)."""
    return CACHE / "kernels" / f"{name}-{key}"


def cached(name: str) -> bool:
    """Whether the variant's kernel, as its inputs stand now, is in the cache
    (False while the source package is not here yet: nothing is fetched)."""
    if not (deb := _downloaded_source()):
        return False
    key, _plan = variant_key(VARIANTS[name], deb)
    return (_kernel_dir(name, key) / "complete").exists()


def build(name: str, timeout: float = 2700) -> Kernel:
    """The kernel of a variant: from the cache when its key is there, else
    built (incrementally in its kept build tree). Raises KernelBuildError
    naming the step that failed. A build of the same variant under way in
    another process is waited for, and its kernel taken."""
    variant = VARIANTS[name] if isinstance(name, str) else name
    # one builder of a work tree, and one fetch and unpack of the source, at a time, across processes
    # (the suite's background prebuild and a test may ask for the same kernel)
    with locked(CACHE / "locks" / f"variant-{variant.work}"):
        return _build(variant, timeout)


def _build(variant: Variant, timeout: float) -> Kernel:
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{variant.name}.log"
    log.write_text(f"# {time.strftime('%F %T')} nttrace lab kernel {variant.name}\n")
    with locked(CACHE / "locks" / "source"):
        deb = fetch_source(log)
    try:
        key, plan = variant_key(variant, deb)
    except (mailing_list.SeriesError, OSError) as exc:
        raise KernelBuildError(variant.name, "read the series", log, str(exc)) from None
    out = _kernel_dir(variant.name, key)
    if (out / "complete").exists():
        return Kernel.read(out)
    with locked(CACHE / "locks" / "source"):
        pristine = unpacked_source(deb, log)
    work = CACHE / "work" / variant.work
    previous = work / "patched-files.json"
    t0 = time.monotonic()
    try:
        touched = prepare_source(variant, pristine, plan, work, log)
    except KernelBuildError:
        # a series that does not apply leaves no half-patched tree behind
        # (the build tree's objects, of the last tree that built, stay)
        shutil.rmtree(work / "src", ignore_errors=True)
        raise
    # Files the previous build of this tree patched (recorded in `previous`),
    # and this one may not: their pristine copies are older than the objects
    # built from the patched ones, so each is touched to be rebuilt.
    earlier = json.loads(previous.read_text()) if previous.exists() else []
    for rel in sorted(set(touched) | set(earlier)):
        if (work / "src" / rel).exists():
            os.utime(work / "src" / rel)
    previous.write_text(json.dumps(touched))
    bdir = work / "build"
    configure(work / "src", bdir, log, variant.name)
    for stale in _packages_out(work):     # an earlier build's packages are not this one's
        stale.unlink()
    t_build = time.monotonic()
    run_step(make_command(bdir, LAB_CONFIG, variant), log, variant.name, "build (make bindeb-pkg)",
             cwd=work / "src", timeout=timeout)
    build_s = time.monotonic() - t_build
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    release = install(work / "src", bdir, out, log, variant.name)
    debs = keep_packages(work, out, release, log, variant.name)
    info = {"variant": variant.name, "key": key, "release": release, "source": deb.name,
            "series": [f"{i['series'].path().name} {i['series'].version} {i['patch'].number}/{i['patch'].total}"
                       + (f" + {', '.join(f.name for f in i['fixups'])}" if i["fixups"] else "") for i in plan],
            "patched_files": touched, "applied_with_fuzz": list(FUZZED), "debs": [d.name for d in debs],
            "build_s": round(build_s, 1), "total_s": round(time.monotonic() - t0, 1),
            "jobs": JOBS, "compiler": compiler_version(), "built_at": time.strftime("%F %T")}
    (out / "build.json").write_text(json.dumps(info, indent=1))
    shutil.copy2(bdir / ".config", out / "config")
    shutil.copy2(log, out / "build.log")
    (out / "complete").write_text(time.strftime("%F %T\n"))
    prune_superseded(variant.name, out)
    return Kernel.read(out)


def prune_superseded(name: str, current: Path) -> list[Path]:
    """Older keys of the variant are superseded: the cache keeps two a
    variant, `current` and the newest complete one before it, which a test
    session that started before the inputs changed may still be booting.
    Returns what it removed."""
    older = [d for d in current.parent.glob(f"{name}-*")
             if d != current and not d.name.removeprefix(f"{name}-").count("-")]
    complete = sorted((d for d in older if (d / "complete").exists()),
                      key=lambda d: (d / "complete").stat().st_mtime, reverse=True)
    removed = [d for d in older if d not in complete[:1]]
    for old in removed:
        shutil.rmtree(old, ignore_errors=True)
    return removed


def variant(arg: str) -> Variant:
    """A variant by name (VARIANTS) or NAME=FILE:VERSION[+...] spec; raises
    ValueError saying what is wrong."""
    if "=" in arg:
        return variant_from_spec(arg)
    if arg not in VARIANTS:
        raise ValueError(f"unknown variant {arg} (have {', '.join(VARIANTS)}, or NAME=FILE:VERSION)")
    return VARIANTS[arg]


def variant_from_spec(spec: str) -> Variant:
    """NAME=FILE:VERSION[+FILE:VERSION...] (a relative FILE is looked up in
    the seeds directory when it is not in the current one)."""
    name, eq, rest = spec.partition("=")
    if not eq or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name in VARIANTS:
        raise ValueError(f"{spec!r}: want NAME=FILE:VERSION[+FILE:VERSION...] with a new NAME of letters, digits, . _ -")
    series = []
    for part in rest.split("+"):
        file, colon, version = part.rpartition(":")
        if not colon or not file or not re.fullmatch(r"v\d+", version):
            raise ValueError(f"{part!r}: want FILE:VERSION, VERSION like v3")
        path = Path(file).expanduser()
        series.append(Series(str(path.resolve()) if path.exists() or path.is_absolute() else file, version))
    return Variant(name, tuple(series))


def main(argv: list[str]) -> int:
    # a TERM (the suite ending its background prebuild) unwinds like Ctrl-C:
    # the step under way kills its process group, no compiler is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if argv[:1] == ["--list"]:
        deb = fetch_source(CACHE / "logs" / "list.log")
        for v in VARIANTS.values():
            key, plan = variant_key(v, deb)
            state = "cached" if (_kernel_dir(v.name, key) / "complete").exists() else "not built"
            print(f"{v.name:<6} {key} {len(plan)} patches, {state}")
        return 0
    variants: list[Variant] = []
    for arg in argv or list(VARIANTS):
        try:
            variants.append(variant(arg))
        except ValueError as exc:
            print(f"kernel_build: {exc}", file=sys.stderr)
            return 2
    for v in variants:
        t0 = time.monotonic()
        try:
            k = build(v)
        except KernelBuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"{v.name}: {k.release} in {k.directory} ({time.monotonic() - t0:.0f}s; built in {k.info['build_s']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
