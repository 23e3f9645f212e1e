# SPDX-License-Identifier: Apache-2.0
"""Debian packages one lab boot needs that the guest's image lacks, fetched
on the host and handed to the guest as .deb files: the package test's
autopkgtest runner (tests/lab/test_deb.py, lab/guest_deb.py), which the
guest installs with apt from those files while its network is down. Adding
them to build-image.sh's list instead would change the image's key and
rebuild the image every lab test boots, for one test's tools.

apt resolves the packages against the image itself: a private apt state
whose sources are the image's (build-image.sh's suites and mirrors, the same
NTTRACE_LAB_MIRROR and NTTRACE_LAB_SECURITY_MIRROR), with lists of its own and
the image's /var/lib/dpkg/status read out of root.img with debugfs (read
only), then `apt-get install --download-only`: exactly what the image lacks
is fetched (and a newer version of a package it has, if one of them needs
that). The system's apt configuration, lists and cache are not touched.

Cache: $NTTRACE_LAB_CACHE/guest-debs-<key>/ (lab.CACHE), the key a hash of
the package list, the image's key, the mirrors and this file: debs/*.deb,
packages (the list asked for), apt.log, `complete` last.

    python3 -m lab.guest_debs [--image DIR] [PACKAGE ...]
        fetch (or find) them for the image (default: the lab's current image,
        built first if missing) and list the .debs; without PACKAGEs, what
        the package test's autopkgtest run needs (autopkgtest_packages()).
        Exit 1: apt could not resolve or fetch them (its output says why);
        2: debian/tests/control this cannot read, or no root.img in --image.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lab import lab, private_apt
from lab.locks import locked

TREE = Path(__file__).resolve().parent.parent
MIRROR = os.environ.get("NTTRACE_LAB_MIRROR", "http://deb.debian.org/debian")
SECURITY = os.environ.get("NTTRACE_LAB_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
SUITE = "bookworm"     # build-image.sh's
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEBUGFS = shutil.which("debugfs") or "/sbin/debugfs"     # e2fsprogs (Priority: required); /sbin is not on every PATH

# The runner: autopkgtest (for its null virtualisation server: the guest is
# the testbed), and dpkg-dev for dpkg-source, which unpacks the .dsc in the
# testbed (autopkgtest would apt-get install it, which an offline guest
# cannot).
RUNNER = ("autopkgtest", "dpkg-dev")

# debian/tests the lab's guest does not run, each with its reason (the
# runner's --skip-test; the lab test asserts the summary has no line for it).
LAB_SKIPS = {
    "unit-room": "the host-free unit tests (tests/unit, ~1 min of CPU natively) would take the TCG guest "
                 "beyond its 1200 s bound; they run on the host in `make test-unit`, and at build time "
                 "against the built tree (debian/rules: unit-room --built)",
}


class ControlError(ValueError):
    """debian/tests/control says something this reader does not handle."""


def control_stanzas(control: Path) -> list[dict[str, str]]:
    """debian/tests/control's paragraphs (deb822: comment lines dropped,
    continuation lines joined), field names lower-cased."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    field = None
    for n, line in enumerate(control.read_text().splitlines(), 1):
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, field = {}, None
        elif line[0] in " \t":
            if field is None:
                raise ControlError(f"{control}:{n}: a continuation line before any field")
            current[field] += " " + line.strip()
        else:
            name, colon, value = line.partition(":")
            if not colon:
                raise ControlError(f"{control}:{n}: not a field: {line!r}")
            field = name.strip().lower()
            current[field] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def test_depends(control: Path) -> dict[str, list[str]]:
    """Test name -> its Depends items, as written (one string per
    comma-separated item, `@` included)."""
    tests: dict[str, list[str]] = {}
    for stanza in control_stanzas(control):
        if "tests" not in stanza:
            raise ControlError(f"{control}: a paragraph without Tests: ({sorted(stanza)}); "
                               "Test-Command paragraphs are not read here")
        depends = [d.strip() for d in stanza.get("depends", "@").split(",") if d.strip()]
        for name in stanza["tests"].replace(",", " ").split():
            tests[name] = depends
    return tests


def package_names(items: list[str]) -> list[str]:
    """The package apt is to fetch for each Depends item: its first
    alternative's name, without version, architecture or profile
    qualifiers; `@` (the package under test, which the guest gets as the
    build's .deb) and `@builddeps@` left out."""
    names = []
    for item in items:
        if item in ("@", "@builddeps@"):
            continue
        first = item.split("|")[0]
        m = re.fullmatch(r"\s*([a-z0-9][a-z0-9+.-]+)(?::[a-z0-9-]+)?\s*(\([^)]*\))?\s*(\[[^]]*\])?\s*(<[^>]*>\s*)*",
                         first)
        if not m:
            raise ControlError(f"a Depends item this reader does not handle: {item!r}")
        names.append(m.group(1))
    return names


def autopkgtest_packages(control: Path = TREE / "debian" / "tests" / "control",
                         skips: dict[str, str] = LAB_SKIPS) -> list[str]:
    """What the lab guest's autopkgtest run asks for beyond the image's
    packages and nttrace: the runner and the Depends of the tests it runs
    (all in `control` but `skips`), sorted, each once."""
    tests = test_depends(control)
    unknown = sorted(set(skips) - set(tests))
    if unknown:
        raise ControlError(f"{control}: no test {', '.join(unknown)} to skip")
    wanted = [*RUNNER]
    for name, items in tests.items():
        if name not in skips:
            wanted += package_names(items)
    return sorted(set(wanted))


def image_status(img: Path) -> bytes:
    """The image's dpkg status file, read out of img/root.img with debugfs
    (opened read-only: a booted guest's snapshot=on leaves the file as it is)."""
    p = subprocess.run([DEBUGFS, "-R", "cat /var/lib/dpkg/status", str(img / "root.img")],
                       capture_output=True, timeout=120)
    if p.returncode != 0 or not p.stdout.startswith(b"Package: "):
        raise lab.LabError(f"debugfs could not read /var/lib/dpkg/status from {img / 'root.img'} "
                           f"(exit {p.returncode}): {p.stderr.decode(errors='replace')[-1000:]}")
    return p.stdout


def cache_key(packages: list[str], img: Path) -> str:
    h = hashlib.sha256(json.dumps([sorted(packages), img.name, MIRROR, SECURITY, SUITE]).encode())
    for f in (__file__, private_apt.__file__):     # how it fetches is part of what it fetched
        h.update(Path(f).read_bytes())
    return h.hexdigest()[:12]


def fetch(packages: list[str], img: Path, cache: Path | None = None) -> list[Path]:
    """The .debs of `packages` and of what they depend on that the image at
    `img` (an image directory of lab.image()) lacks, fetched once into the
    cache and reused while there. Raises lab.LabError, with apt's output,
    when apt cannot resolve or fetch them."""
    cache = cache or lab.CACHE
    d = cache / f"guest-debs-{cache_key(packages, img)}"
    if (d / "complete").exists():
        return sorted((d / "debs").glob("*.deb"))
    with locked(cache / "guest-debs.lock"):
        if (d / "complete").exists():     # fetched while we waited
            return sorted((d / "debs").glob("*.deb"))
        shutil.rmtree(d, ignore_errors=True)
        apt, debs = d / "apt", d / "debs"
        for sub in (apt / "lists" / "partial", apt / "cache", debs / "partial"):
            sub.mkdir(parents=True)
        (apt / "status").write_bytes(image_status(img))
        (apt / "sources.list").write_text("".join(
            f"deb [signed-by={KEYRING}] {mirror} {suite} main\n"
            for mirror, suite in ((MIRROR, SUITE), (MIRROR, f"{SUITE}-updates"), (SECURITY, f"{SUITE}-security"))))
        options = private_apt.options(apt, status=apt / "status", archives=debs)
        log = d / "apt.log"
        steps = (("apt-get update (private state)", ["apt-get", "-q", *options, "update"]),
                 ("apt-get install --download-only",
                  ["apt-get", "-q", "-y", *options, "install", "--download-only", *packages]))
        with open(log, "w") as f:
            for what, cmd in steps:
                f.write(f"$ {' '.join(cmd)}\n")
                f.flush()
                try:
                    p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=900,
                                       env={**os.environ, "LC_ALL": "C.UTF-8"})
                except subprocess.TimeoutExpired:
                    raise lab.LabError(f"{what} for the guest's packages exceeded 900 s: {log}") from None
                if p.returncode != 0:
                    raise lab.LabError(f"{what} for the guest's packages failed ({p.returncode}): "
                                       f"{log.read_text()[-3000:]}")
        shutil.rmtree(debs / "partial")
        shutil.rmtree(apt)      # the lists (tens of MB) are not needed again: a new key fetches anew
        (d / "packages").write_text("\n".join(packages) + "\n")
        (d / "complete").write_text(time.strftime("%F %T\n"))
    return sorted(debs.glob("*.deb"))


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.guest_debs", description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="*", help="packages (default: what the package test's autopkgtest run needs)")
    ap.add_argument("--image", type=Path, help="an image directory (default: the lab's current one)")
    ap.add_argument("--cache", type=Path, help=f"the cache directory (default: {lab.CACHE})")
    args = ap.parse_args(argv)
    try:
        packages = args.packages or autopkgtest_packages()
    except ControlError as exc:
        print(f"guest_debs: {exc}", file=sys.stderr)
        return 2
    if args.image and not (args.image / "root.img").is_file():
        print(f"guest_debs: no root.img in {args.image}", file=sys.stderr)
        return 2
    try:
        debs = fetch(packages, args.image or lab.image(), args.cache)
    except lab.LabError as exc:
        print(f"guest_debs: {exc}", file=sys.stderr)
        return 1
    print(f"{len(debs)} .debs for {' '.join(packages)}, "
          f"{sum(p.stat().st_size for p in debs) // 1024} KiB:")
    for deb in debs:
        print(f"  {deb}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
