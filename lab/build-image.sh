#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the lab guest: a Debian 12 root filesystem with Debian's stock
# kernel (from bookworm-security, with its matching headers for bcc) and
# nttrace's runtime dependencies, as an ext2 image plus the kernel and
# initramfs to boot it with. ext2, not ext4: the guests boot it with
# snapshot=on, so a journal buys nothing, and the lab's kernels then build
# ext2 (a few small objects) instead of ext4 and jbd2 (~5% of their compile:
# BENCHMARKS.md, "Lab kernel build time"); Debian's kernel mounts it with ext4.
#
#   build-image.sh OUT_DIR BASE_TAR
#
# BASE_TAR: the lab's one debootstrap (build-base-root.sh's root.tar), on
# which apt installs the rest. Writes OUT_DIR/{vmlinuz,initrd.img,root.img}
# and OUT_DIR/kernel-release. Needs root, e2fsprogs; fetches only from
# Debian's archive.
set -euo pipefail
out=${1:?usage: build-image.sh OUT_DIR BASE_TAR}
base=${2:?usage: build-image.sh OUT_DIR BASE_TAR}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${out%/}.build.XXXXXX")
root=$work/root
cleanup() {
    for m in proc sys dev/pts dev; do umount -l "$root/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

echo "lab image: the base root into $root"
mkdir "$root"
tar --numeric-owner --xattrs --acls -C "$root" -xf "$base"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"

echo "lab image: kernel, headers and nttrace's dependencies"
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -euc '
    apt-get update -q
    # kexec-tools loads nothing at reboot: only nttrace ab kexecs, and says which kernel
    echo "kexec-tools kexec-tools/load_kexec boolean false" | debconf-set-selections
    mkdir -p /etc/initramfs-tools/conf.d && echo "MODULES=most" > /etc/initramfs-tools/conf.d/modules
    apt-get install -y -q --no-install-recommends \
        ca-certificates kmod iproute2 procps util-linux e2fsprogs python3 python3-venv \
        linux-image-amd64 linux-headers-amd64 \
        python3-bpfcc bpftool ndctl daxctl \
        python3-prometheus-client python3-pip python3-pytest \
        initramfs-tools busybox systemd systemd-sysv \
        kexec-tools python3-yaml python3-bcrypt linux-perf
    apt-get clean
' >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }

kver=$(ls "$root/lib/modules" | sort -V | tail -n 1)
test -e "$root/lib/modules/$kver/build/include" || { echo "headers for $kver missing" >&2; exit 1; }
install -m 0755 "$here/guest-init.sh" "$root/sbin/nttrace-lab-init"
# Booted with init=/lib/systemd/systemd nttrace.systemd, the guest runs the
# systemd scenario (lab/guest-systemd.sh, read from the share) as a unit.
cat >"$root/etc/systemd/system/nttrace-lab-systemd.service" <<'UNIT'
[Unit]
Description=nttrace lab: the systemd scenario
ConditionKernelCommandLine=nttrace.systemd
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'modprobe -a 9pnet_virtio 9p; mkdir -p /nttrace && mount -t 9p -o trans=virtio,version=9p2000.L,ro nttrace /nttrace && exec sh /nttrace/lab/guest-systemd.sh'
TimeoutStartSec=1500
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/nttrace-lab-systemd.service "$root/etc/systemd/system/multi-user.target.wants/"
# no login prompts or network waits on the serial console
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
ln -sf /dev/null "$root/etc/systemd/system/getty@tty1.service"
mkdir -p "$root/nttrace" "$root/results"
echo "nttrace-lab" > "$root/etc/hostname"

mkdir -p "$out"
cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
echo "$kver" > "$out/kernel-release"
for m in proc sys dev/pts dev; do umount -l "$root/$m"; done
echo "lab image: ext2 root image"
rm -rf "$root/boot"/* "$root/var/cache/apt"/*.bin
mkfs.ext2 -q -F -L nttrace-lab -d "$root" "$out/root.img" 3G
echo "lab image: done ($kver) in $out"
