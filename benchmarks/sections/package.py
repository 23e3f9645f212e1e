# SPDX-License-Identifier: Apache-2.0
"""The Debian package: what `make deb` takes, what the package weighs, and
the daemon started from it in the lab's Debian 12 guest."""
from __future__ import annotations

from ._format import command, med_range


def deb_package(raw: dict) -> str:
    build, pkg, guest = raw["make_deb"], raw["package"], raw["guest"]
    standalone = [b["s"] for b in build["standalone"]]
    return "\n".join([
        "| figure | value |", "|---|--:|",
        f"| `make deb` (n={len(standalone)}), s | {med_range(standalone, '.1f')} |",
        f"| `{pkg['file']}` | {pkg['deb_bytes'] / 1024:.0f} KiB; installed {pkg['installed_size_kib_dpkg_in_guest']} KiB |",
        f"| guest: `systemctl start nttrace` to READY=1, s | {guest['systemctl_start_to_ready_s']:.1f} |",
        f"| guest: daemon resident memory at READY / after scrapes, MiB | "
        f"{guest['daemon_rss_kib_at_ready'] / 1024:.1f} / {guest['daemon_rss_kib_after_scrapes'] / 1024:.1f} |",
        "",
        f"{raw['host']['cpu']} {raw['host']['cores']}-core VM, 2026-12-06, package built at {raw['package_built_from']}. "
        f"The guest is {guest['what'].split(';')[0]}. Command: `" + command(raw["command"]) + "`.",
    ])


BLOCKS = {"deb-package": (deb_package, ["deb-package-epyc-vm-2026-12-06-f2c8313.json"])}
