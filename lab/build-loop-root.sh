#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The A/B loop's guest disk, first step (lab/loop_disk.py runs it and keeps
# its output across kernel rebuilds): a Debian 12 server's root as
# debootstrap and apt make it (systemd as init, udev, Debian's stock kernel
# with its headers, grub-pc, kexec-tools, nttrace's runtime dependencies),
# as a tar archive. build-loop-disk.sh makes the disk from it.
#
#   build-loop-root.sh OUT_DIR BASE_TAR
#
# BASE_TAR: the lab's one debootstrap (build-base-root.sh's root.tar), on
# which apt installs the rest. Writes OUT_DIR/root.tar and
# OUT_DIR/stock-release (the stock kernel's release). Needs root; fetches
# only from Debian's archive.
set -euo pipefail
out=${1:?usage: build-loop-root.sh OUT_DIR BASE_TAR}
base=${2:?usage: build-loop-root.sh OUT_DIR BASE_TAR}
work=$(mktemp -d "${out%/}.build.XXXXXX")
root=$work/root
cleanup() {
    for m in proc sys dev/pts dev; do umount -l "$root/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
t0=$(date +%s)
say() { echo "loop root: $* ($(( $(date +%s) - t0 )) s)"; }

say "the base root into $root"
mkdir "$root"
tar --numeric-owner --xattrs --acls -C "$root" -xf "$base"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"

say "packages: the stock kernel, grub-pc, systemd, kexec-tools, nttrace's dependencies"
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -euc '
    apt-get update -q
    # kexec-tools loads nothing at reboot: only nttrace ab kexecs
    echo "kexec-tools kexec-tools/load_kexec boolean false" | debconf-set-selections
    # grub goes on the disk in the install boot (grub-install /dev/vdX): none here
    echo "grub-pc grub-pc/install_devices multiselect" | debconf-set-selections
    echo "grub-pc grub-pc/install_devices_empty boolean true" | debconf-set-selections
    # unsafe-io: no fsync a file; the tree is written to the disk by mkfs.ext4 -d afterwards
    apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
        ca-certificates kmod iproute2 procps util-linux e2fsprogs python3 python3-venv \
        linux-image-amd64 linux-headers-amd64 grub-pc \
        systemd systemd-sysv udev initramfs-tools busybox kexec-tools fdisk \
        python3-bpfcc bpftool ndctl daxctl \
        python3-prometheus-client python3-pip python3-pytest python3-yaml python3-bcrypt linux-perf
    apt-get clean
' >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
stock=$(ls "$root/lib/modules" | sort -V | tail -n 1)
test -e "$root/boot/vmlinuz-$stock" -a -e "$root/lib/modules/$stock/build/include" \
    || { echo "stock kernel $stock or its headers missing" >&2; exit 1; }

stock=$(ls "$root/lib/modules" | sort -V | tail -n 1)
test -e "$root/boot/vmlinuz-$stock" -a -e "$root/lib/modules/$stock/build/include" \
    || { echo "stock kernel $stock or its headers missing" >&2; exit 1; }
for m in proc sys dev/pts dev; do umount -l "$root/$m"; done
rm -rf "$root/var/cache/apt"/*.bin "$root/var/lib/apt/lists"/*_Packages
mkdir -p "$out"
tar --numeric-owner --xattrs --acls -C "$root" -cf "$out/root.tar" .
echo "$stock" > "$out/stock-release"
say "done: stock kernel $stock"
