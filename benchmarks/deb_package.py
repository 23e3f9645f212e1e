# SPDX-License-Identifier: Apache-2.0
"""The Debian package's figures for BENCHMARKS.md, as one raw file: what
`make deb` takes, what the package installs, and the daemon started from it
(its READY time and resident memory) in the lab's TCG guest.

    python3 benchmarks/deb_package.py LAB_RESULTS OUT.json [--builds N]

LAB_RESULTS is the directory of one run of tests/lab/test_deb.py (its guest's
deb.json, deb/build.json with the test's two `make deb` times, and the
.debs); --builds N times N more `make deb` on this host, one after another,
with the load average beside each."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

TREE = Path(__file__).resolve().parents[1]


def make_deb() -> dict:
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    subprocess.run(["make", "-C", str(TREE), "deb"], check=True, capture_output=True, timeout=1800)
    return {"s": round(time.monotonic() - t0, 2), "loadavg_1m_before": round(load, 2)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="deb_package.py", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--builds", type=int, default=0)
    args = ap.parse_args(argv)
    guest = json.loads((args.results / "deb.json").read_text())
    if "error" in guest:
        print(f"deb_package.py: the guest's run failed: {guest['error']}", file=sys.stderr)
        return 1
    deb = next((args.results / "deb" / "install").glob("nttrace_*.deb"))
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    # the tree the package was built from: its changelog's entry (tools/debian-changelog.sh)
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    changelog = subprocess.run(["sh", "-c", "tar -xOf - ./usr/share/doc/nttrace/changelog.gz | zcat"], input=tar,
                               capture_output=True, check=True).stdout.decode()
    built_from = re.search(r"Built from the nttrace tree at (.*)\.", changelog).group(1)
    builds = [make_deb() for _ in range(args.builds)]
    host_s = [b["s"] for b in builds]
    commit = subprocess.run(["git", "-C", str(TREE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    raw = {
        "package_built_from": built_from,
        "standalone_builds_commit": commit,
        "host": {"cpu": re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1),
                 "cores": os.cpu_count()},
        "make_deb": {
            "in_the_lab_test_s": json.loads((args.results / "deb" / "build.json").read_text())["make_deb_s"],
            "standalone": builds,
            "standalone_median_s": statistics.median(host_s) if host_s else None,
            "standalone_range_s": [min(host_s), max(host_s)] if host_s else None,
        },
        "package": {"file": deb.name, "deb_bytes": deb.stat().st_size,
                    "installed_size_kib_control": int(re.search(r"^Installed-Size: (\d+)", control, re.M).group(1)),
                    "installed_size_kib_dpkg_in_guest": guest["installed_size_kib"]},
        "guest": {
            "what": "the lab's Debian 12 guest, QEMU TCG (emulated: times are not this host's), systemd 252, "
                    f"kernel {guest['kernel']}; config: probes [migrate], perf [], listen 0.0.0.0:9435",
            "apt_install_offline_s": round(guest["install"]["s"], 1),
            "apt_upgrade_offline_s": round(guest["upgrade"]["s"], 1),
            "systemctl_start_to_ready_s": round(guest["ready_s"], 2),
            "daemon_rss_kib_at_ready": guest["rss_kib_at_ready"],
            "daemon_rss_kib_after_scrapes": guest["rss_kib_after_scrapes"],
            "validate_quick_s": round(guest["validate"]["s"], 1),
            "validate_quick_rc": guest["validate"]["rc"],
        },
        "command": ".venv/bin/pytest -m lab tests/lab/test_deb.py --basetemp=DIR; "
                   f"python3 benchmarks/deb_package.py DIR/deb0 OUT --builds {args.builds}",
    }
    args.out.write_text(json.dumps(raw, indent=1) + "\n")
    print(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
