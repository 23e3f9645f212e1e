# SPDX-License-Identifier: Apache-2.0
"""The Debian package: what `make deb` takes, what its build in a clean
chroot takes (lab.deb_chroot), what the package weighs, and the daemon
started from it in the lab's Debian 12 guest."""
from __future__ import annotations

from ._format import command, med_range


def chroot_build(cold: dict, warm: dict) -> tuple[str, str]:
    """The clean chroot's table row and its sentence: a cold run (the base
    root debootstrapped, the chroot made, its packages fetched) and a warm
    one (all of them cached), each pbuilder's build with its unit room."""
    for run in (cold, warm):
        assert run["rc"] == 0 and run["lintian"] == [] and run["public_modules"] == [], run
    assert cold["chroot_s"] is not None and warm["chroot_s"] is None, (cold["chroot_s"], warm["chroot_s"])
    row = (f"| clean chroot build, cold / warm (of which pbuilder's build), s | {cold['total_s']:.0f} "
           f"({cold['pbuilder_s']:.0f}) / {warm['total_s']:.0f} ({warm['pbuilder_s']:.0f}) |")
    sentence = (f"Clean chroot (`{cold['command']}`, pbuilder {cold['host']['pbuilder']}, the unit room run in the "
                f"build, lintian --pedantic: no tag): {cold['host']['cpu']}, {cold['host']['cores']} cores, "
                f"{cold['started_utc']} and {warm['started_utc']} UTC, commit {cold['commit']} / {warm['commit']}, "
                f"load {cold['host']['loadavg_1m_before']:.1f} / {warm['host']['loadavg_1m_before']:.1f} before; "
                f"cold: the base root's debootstrap and the chroot ({cold['chroot_s']:.0f} s) included.")
    return row, sentence


def deb_package(raw: dict) -> str:
    build, pkg, guest = raw["deb"]["make_deb"], raw["deb"]["package"], raw["deb"]["guest"]
    chroot_row, chroot_sentence = chroot_build(raw["chroot_cold"], raw["chroot_warm"])
    standalone = [b["s"] for b in build["standalone"]]
    return "\n".join([
        "| figure | value |", "|---|--:|",
        f"| `make deb` (n={len(standalone)}), s | {med_range(standalone, '.1f')} |",
        chroot_row,
        f"| `{pkg['file']}` | {pkg['deb_bytes'] / 1024:.0f} KiB; installed {pkg['installed_size_kib_dpkg_in_guest']} KiB |",
        f"| guest: `systemctl start nttrace` to READY=1, s | {guest['systemctl_start_to_ready_s']:.1f} |",
        f"| guest: daemon resident memory at READY / after scrapes, MiB | "
        f"{guest['daemon_rss_kib_at_ready'] / 1024:.1f} / {guest['daemon_rss_kib_after_scrapes'] / 1024:.1f} |",
        "",
        f"{raw['deb']['host']['cpu']} {raw['deb']['host']['cores']}-core VM, 2026-12-06, package built at "
        f"{raw['deb']['package_built_from']}. The guest is {guest['what'].split(';')[0]}. Command: `"
        + command(raw["deb"]["command"]) + "`.",
        chroot_sentence,
    ])


BLOCKS = {"deb-package": (deb_package, {"deb": "deb-package-epyc-vm-2026-12-06-f2c8313.json",
                                        "chroot_cold": "deb-chroot-cold-epyc-vm-2026-12-07-e72b445.json",
                                        "chroot_warm": "deb-chroot-warm-epyc-vm-2026-12-07-e72b445.json"})}
