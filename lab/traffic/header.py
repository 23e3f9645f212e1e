# SPDX-License-Identifier: Apache-2.0
"""qemu-plugin.h for the host's QEMU, from Debian's `qemu` source package.

No Debian binary package ships the TCG plugin header; the source package
does. It is fetched with `apt-get source --download-only` through a private
sources list and state directory under the cache (the system's apt
configuration is never touched, as kernel_build.py fetches linux-source),
and only include/qemu/qemu-plugin.h is taken out of the upstream tarball.

Cache ($NTTRACE_QEMU_CACHE, default /var/cache/nttrace-qemu):
  apt/                 private apt lists/state (deb-src of the host's suites)
  <source version>/    qemu-plugin.h and source.json (what it came from);
                       the downloaded source files are deleted once it is out

    python3 -m lab.traffic.header        # prints the header's path (fetching it once)
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from lab import private_apt
from lab.locks import locked

CACHE = Path(os.environ.get("NTTRACE_QEMU_CACHE", "/var/cache/nttrace-qemu"))
MIRROR = os.environ.get("NTTRACE_QEMU_MIRROR", "http://deb.debian.org/debian")
SECURITY = os.environ.get("NTTRACE_QEMU_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
BINARY = "qemu-system-x86"
MEMBER = "include/qemu/qemu-plugin.h"


class HeaderError(RuntimeError):
    """The header could not be had; the message says which step failed."""


def installed_source() -> tuple[str, str]:
    """(source package, source version) of the installed qemu-system-x86:
    the header must be the one QEMU was built from."""
    p = subprocess.run(["dpkg-query", "-W", "-f", "${source:Package} ${source:Version}", BINARY],
                       capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        raise HeaderError(f"{BINARY} is not installed (dpkg-query: {p.stderr.strip()})")
    package, version = p.stdout.split()
    return package, version


def codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    raise HeaderError("/etc/os-release names no VERSION_CODENAME")


def sources_list(suite: str) -> str:
    """deb-src lines for the suite, its updates and its security archive:
    a QEMU fixed by a point release or a security upload is in one of them."""
    return (f"deb-src [signed-by={KEYRING}] {MIRROR} {suite} main\n"
            f"deb-src [signed-by={KEYRING}] {MIRROR} {suite}-updates main\n"
            f"deb-src [signed-by={KEYRING}] {SECURITY} {suite}-security main\n")


def version_dir(version: str) -> Path:
    """The cache directory of one source version (':' is an epoch, not a path character we want)."""
    return CACHE / version.replace(":", "_")


def plugin_version(header: Path) -> int:
    """QEMU_PLUGIN_VERSION as the header defines it."""
    m = re.search(r"^#define\s+QEMU_PLUGIN_VERSION\s+(\d+)", header.read_text(), re.M)
    if not m:
        raise HeaderError(f"{header} defines no QEMU_PLUGIN_VERSION")
    return int(m.group(1))


def _run(cmd: list[str], log: Path, step: str, cwd: Path | None = None, timeout: float = 900) -> None:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            p = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HeaderError(f"{step}: exceeded {timeout:.0f}s (log {log})") from None
    if p.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise HeaderError(f"{step}: exit {p.returncode} (log {log})\n{tail}")


def header() -> Path:
    """The cached qemu-plugin.h of the installed QEMU's source version,
    fetched first when missing (one fetcher at a time)."""
    package, version = installed_source()
    d = version_dir(version)
    if (d / "complete").exists():
        return d / "qemu-plugin.h"
    CACHE.mkdir(parents=True, exist_ok=True)
    with locked(CACHE / "fetch.lock"):
        if (d / "complete").exists():
            return d / "qemu-plugin.h"
        return _fetch(package, version, d)


def _fetch(package: str, version: str, d: Path) -> Path:
    a = CACHE / "apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (a / sub).mkdir(parents=True, exist_ok=True)
    (a / "sources.list").write_text(sources_list(codename()))
    shutil.rmtree(d, ignore_errors=True)
    dl = d / "dl"
    dl.mkdir(parents=True)
    log = d / "fetch.log"
    options = private_apt.options(a)
    _run(["apt-get", *options, "update"], log, "apt-get update (private state)")
    _run(["apt-get", *options, "source", "--download-only", f"{package}={version}"], log,
         f"apt-get source --download-only {package}={version}", cwd=dl, timeout=1800)
    upstream = sorted(dl.glob(f"{package}_*.orig.tar.*"))
    if not upstream:
        raise HeaderError(f"no {package} .orig tarball arrived in {dl} (log {log})")
    out = d / "qemu-plugin.h"
    with tarfile.open(upstream[0]) as t:
        member = next((m for m in t if m.name.endswith("/" + MEMBER) or m.name == MEMBER), None)
        if member is None:
            raise HeaderError(f"{upstream[0].name} holds no {MEMBER}")
        out.write_bytes(t.extractfile(member).read())
    patched = _debian_patches_touching(dl, log)
    if patched:
        raise HeaderError(f"Debian's patches change {MEMBER} ({', '.join(patched)}): "
                          "apply them before using the header")
    (d / "source.json").write_text(json.dumps({
        "package": package, "version": version, "tarball": upstream[0].name, "member": member.name,
        "qemu_plugin_version": plugin_version(out)}, indent=1) + "\n")
    shutil.rmtree(dl)
    (d / "complete").write_text(version + "\n")
    return out


def _debian_patches_touching(dl: Path, log: Path) -> list[str]:
    """The Debian patches (debian/patches/*) that touch the header: the
    upstream file is the built one only when there are none."""
    found = []
    for deb in sorted(dl.glob("*.debian.tar.*")):
        with tarfile.open(deb) as t:
            for m in t:
                if m.isfile() and m.name.startswith("debian/patches/") and not m.name.endswith("series"):
                    text = t.extractfile(m).read().decode(errors="replace")
                    if re.search(r"^\+\+\+ [^\n]*" + re.escape(MEMBER), text, re.M):
                        found.append(m.name)
    return found


def main(argv: list[str]) -> int:
    try:
        h = header()
    except HeaderError as exc:
        print(f"lab.traffic.header: {exc}", file=sys.stderr)
        return 1
    print(h)
    print(f"QEMU_PLUGIN_VERSION {plugin_version(h)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
