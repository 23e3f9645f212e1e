#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one debootstrap of the lab: a minimal Debian 12 root (debootstrap's
# minbase: the essential packages and apt) with the archive's sources, as a
# tar archive. The lab guest's image (build-image.sh), the A/B loop's server
# root (build-loop-root.sh) and the clean chroot that builds the Debian
# package (lab/deb_chroot.py) each start from it and add their packages
# with apt; lab.lab.base_root() builds it once and caches it.
#
#   build-base-root.sh OUT_DIR
#
# Writes OUT_DIR/root.tar. Needs root, debootstrap; fetches only from
# Debian's archive.
set -euo pipefail
out=${1:?usage: build-base-root.sh OUT_DIR}
mirror=${NTTRACE_LAB_MIRROR:-http://deb.debian.org/debian}
security=${NTTRACE_LAB_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
work=$(mktemp -d "${out%/}.build.XXXXXX")
root=$work/root
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)

echo "base root: debootstrap bookworm (minbase) into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log"; exit 1; }
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SRC
rm -rf "$root/var/cache/apt"/*.bin "$root/var/cache/apt/archives"/*.deb
mkdir -p "$out"
tar --numeric-owner --xattrs --acls -C "$root" -cf "$out/root.tar" .
echo "base root: done in $(( $(date +%s) - t0 )) s ($(du -m "$out/root.tar" | cut -f1) MiB)"
