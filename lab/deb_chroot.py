# SPDX-License-Identifier: Apache-2.0
"""The Debian package built as Debian's own builders build it: the source
package (`tools/build-deb.sh --source`) built by pbuilder in a clean Debian
12 chroot holding only the essential packages, build-essential and what
debian/control declares (Build-Depends, the <!nocheck> ones included: the
build runs its unit room), as the pbuilder user, without a network; then
lintian --pedantic on what it built, and the package's files checked for a
public Python module.

The chroot: the lab's one debootstrap (lab.base_root(), which the lab's
image and the A/B loop's server root start from too) with build-essential
and fakeroot, as pbuilder's base.tgz, cached in
$NTTRACE_LAB_CACHE/deb-chroot-<key>/ (the key: the base's inputs and
CHROOT_SETUP), the packages apt fetched for it in deb-chroot-aptcache/.
Each build unpacks a fresh copy, updates its package lists (a pbuilder
hook), and installs the build dependencies there.

    python3 -m lab.deb_chroot [--out DIR] [--json FILE]

Builds this checkout's HEAD; the results (.deb, .changes, the build log)
in DIR (default: a new directory under /tmp). --json writes the measured
times and lintian's tags (benchmarks/sections/package.py renders them).
Exit 0: built, lintian reports nothing, no public module; 1: any of those
failed (said in one line, the log's path with it); 2: no root or no
pbuilder.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab import lab
from lab.locks import locked

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
CHROOT_TIMEOUT_S = 1800
BUILD_TIMEOUT_S = 3600
# The chroot: the base root with what every Debian build chroot holds besides the essential
# packages (sbuild's and pbuilder's own), run in it. It and the base's inputs are the chroot's key.
CHROOT_SETUP = ("apt-get update -q; apt-get install -y -q --no-install-recommends build-essential fakeroot; "
                "apt-get clean")
# pbuilder runs this in the chroot before it installs the build dependencies: the package lists of
# a cached chroot, fresh (an older list names versions the archive no longer has).
UPDATE_HOOK = "#!/bin/sh\nset -e\napt-get update -q\n"
# pbuilder's settings beyond its command line: apt resolves the build dependencies (as sbuild's
# do; pbuilder's default resolver is aptitude's, which a buildd chroot does not have).
PBUILDERRC = "PBUILDERSATISFYDEPENDSCMD=/usr/lib/pbuilder/pbuilder-satisfydepends-apt\n"


def chroot_key() -> str:
    return hashlib.sha256(f"{lab.inputs_key(lab.BASE_INPUTS)}\n{CHROOT_SETUP}".encode()).hexdigest()[:16]


def chroot_tgz(log=print) -> tuple[Path, float | None]:
    """pbuilder's base.tgz, built first when missing (one builder at a
    time): (its path, the seconds building it and the base root took, or
    None when cached)."""
    d = lab.CACHE / f"deb-chroot-{chroot_key()}"
    tgz = d / "base.tgz"
    if (d / "complete").exists():
        return tgz, None
    with locked(lab.CACHE / "deb-chroot.lock"):
        if (d / "complete").exists():
            return tgz, None
        t0 = time.monotonic()
        base = lab.base_root()
        log(f"deb chroot: base root ready in {time.monotonic() - t0:.0f} s")
        shutil.rmtree(d, ignore_errors=True)
        for left in lab.CACHE.glob("deb-chroot.build.*"):     # a killed build's (no other builds: the lock)
            shutil.rmtree(left, ignore_errors=True)
        d.mkdir(parents=True)
        with tempfile.TemporaryDirectory(dir=lab.CACHE, prefix="deb-chroot.build.") as work:
            root = Path(work) / "root"
            root.mkdir()
            subprocess.run(["tar", "--numeric-owner", "--xattrs", "--acls", "-C", str(root), "-xf", str(base)],
                           check=True)
            p = subprocess.run(["chroot", str(root), "/usr/bin/env", "DEBIAN_FRONTEND=noninteractive",
                                "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "sh", "-ec", CHROOT_SETUP],
                               capture_output=True, text=True, timeout=CHROOT_TIMEOUT_S)
            if p.returncode != 0:
                raise lab.LabError(f"deb chroot: apt in the chroot failed: {(p.stdout + p.stderr)[-3000:]}")
            subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-czf", str(tgz), "."], check=True)
        (d / "complete").write_text(time.strftime("%F %T\n"))
        seconds = time.monotonic() - t0
        log(f"deb chroot: {tgz} in {seconds:.0f} s")
        return tgz, seconds


def pbuilder_build(dsc: Path, tgz: Path, out: Path) -> subprocess.CompletedProcess:
    """pbuilder build of DSC in a fresh copy of TGZ, its results in OUT."""
    hooks = out / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    hook = hooks / "D10apt-update"
    hook.write_text(UPDATE_HOOK)
    hook.chmod(0o755)
    config = out / "pbuilderrc"
    config.write_text(PBUILDERRC)
    aptcache = lab.CACHE / "deb-chroot-aptcache"
    aptcache.mkdir(parents=True, exist_ok=True)
    buildplace = Path(tempfile.mkdtemp(prefix="nttrace-deb-chroot.place."))
    try:
        # the host's /etc/pbuilderrc and ~/.pbuilderrc are read too: the options below are what they may not change
        return subprocess.run(["pbuilder", "build", "--basetgz", str(tgz), "--buildplace", str(buildplace),
                               "--buildresult", str(out), "--aptcache", str(aptcache), "--hookdir", str(hooks),
                               "--use-network", "no", "--configfile", str(config), "--logfile", str(out / "build.log"),
                               str(dsc)],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8"})
    finally:
        shutil.rmtree(buildplace, ignore_errors=True)


def lintian(changes: Path) -> list[str]:
    """lintian --pedantic's tags (every severity, overrides applied) on what the build made."""
    p = subprocess.run(["lintian", "--pedantic", "-I", "-E", "--tag-display-limit", "0", str(changes)],
                       capture_output=True, text=True, timeout=900)
    return [line for line in p.stdout.splitlines() if line[:3] in ("E: ", "W: ", "I: ", "P: ", "X: ")]


def public_modules(deb: Path) -> list[str]:
    """The package's files in a public Python module directory (none: its modules are private)."""
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in listing.splitlines() if "-packages/" in line.split()[-1]]


def build(out: Path, log=print) -> dict:
    t0 = time.monotonic()
    tgz, chroot_s = chroot_tgz(log)
    src = out / "source"
    subprocess.run([str(TREE / "tools" / "build-deb.sh"), "--source", str(src)], check=True, capture_output=True)
    dsc = next(src.glob("*.dsc"))
    t1 = time.monotonic()
    p = pbuilder_build(dsc, tgz, out)
    build_s = time.monotonic() - t1
    result = {"dsc": dsc.name, "chroot_s": chroot_s, "pbuilder_s": round(build_s, 1), "rc": p.returncode,
              "log": str(out / "build.log")}
    if p.returncode == 0:
        changes = next(out.glob("*_amd64.changes"))
        result["lintian"] = lintian(changes)
        result["public_modules"] = public_modules(next(out.glob("nttrace_*_amd64.deb")))
    result["total_s"] = round(time.monotonic() - t0, 1)
    return result


def host() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    pbuilder = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "pbuilder"], capture_output=True, text=True)
    return {"cpu": cpu, "cores": os.cpu_count(), "loadavg_1m_before": os.getloadavg()[0],
            "pbuilder": pbuilder.stdout}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.deb_chroot", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where the results go (default: a new directory under /tmp)")
    ap.add_argument("--json", type=Path, help="write the times and lintian's tags here")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not shutil.which("pbuilder"):
        print("deb_chroot: needs root and pbuilder (apt install pbuilder)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="nttrace-deb-chroot."))
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(TREE), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    before = host()
    result = build(out)
    record = {"started_utc": started, "commit": commit, "host": before, "cache": str(lab.CACHE), **result,
              "command": "python3 -m lab.deb_chroot --json FILE"}
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    if result["rc"] != 0:
        print(f"deb_chroot: pbuilder failed ({result['rc']}): {result['log']}", file=sys.stderr)
        return 1
    if result["lintian"] or result["public_modules"]:
        print(f"deb_chroot: lintian: {result['lintian']}; public modules: {result['public_modules'][:5]}",
              file=sys.stderr)
        return 1
    print(f"deb_chroot: built {result['dsc']} in {result['pbuilder_s']:.0f} s in a clean chroot; lintian clean; "
          f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
