#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The A/B loop's guest disk, the host's part (lab/loop_disk.py runs it, then
# the install boot that makes it bootable): a Debian 12 server's root as
# debootstrap and apt make it (systemd as init, udev, Debian's stock kernel
# with its headers, grub-pc, kexec-tools, nttrace's runtime dependencies),
# the loop's kernels installed as their packages with dpkg (their postinst
# makes each an initramfs; grub.cfg does not exist yet, so update-grub
# waits for the install boot), /etc/default/grub and /etc/fstab as an
# admin writes them, and the lab's two observer units. Written as an MBR
# disk image with one ext4 partition at 1 MiB (mkfs.ext4 -d at an offset:
# no loop device, no mount).
#
#   build-loop-disk.sh OUT_DIR UUID DEB...
#
# Writes OUT_DIR/disk.raw, OUT_DIR/stock-release (the stock kernel's
# release) and OUT_DIR/releases (the installed packages' kernels, a line
# each). Needs root, debootstrap, e2fsprogs, python3; fetches only from
# Debian's archive.
set -euo pipefail
out=${1:?usage: build-loop-disk.sh OUT_DIR UUID DEB...}
uuid=${2:?usage: build-loop-disk.sh OUT_DIR UUID DEB...}
shift 2
mirror=${NTTRACE_LAB_MIRROR:-http://deb.debian.org/debian}
security=${NTTRACE_LAB_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
size_mib=${NTTRACE_LOOP_DISK_MIB:-8192}
work=$(mktemp -d "${out%/}.build.XXXXXX")
root=$work/root
cleanup() {
    for m in proc sys dev/pts dev; do umount -l "$root/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
t0=$(date +%s)
say() { echo "loop disk: $* ($(( $(date +%s) - t0 )) s)"; }

say "debootstrap bookworm into $root"
debootstrap --variant=minbase \
    --include=ca-certificates,kmod,iproute2,procps,util-linux,e2fsprogs,python3,python3-venv \
    bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SRC
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
        linux-image-amd64 linux-headers-amd64 grub-pc \
        systemd systemd-sysv udev initramfs-tools busybox kexec-tools fdisk \
        python3-bpfcc bpftool ndctl daxctl \
        python3-prometheus-client python3-pip python3-pytest python3-yaml python3-bcrypt linux-perf
    apt-get clean
' >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
stock=$(ls "$root/lib/modules" | sort -V | tail -n 1)
test -e "$root/boot/vmlinuz-$stock" -a -e "$root/lib/modules/$stock/build/include" \
    || { echo "stock kernel $stock or its headers missing" >&2; exit 1; }

say "the loop's kernels, as packages: $*"
if [ $# -gt 0 ]; then
    mkdir -p "$root/var/tmp/loop-debs"
    cp "$@" "$root/var/tmp/loop-debs/"
    chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c 'dpkg -i --force-unsafe-io /var/tmp/loop-debs/*.deb' \
        >"$work/dpkg.log" 2>&1 || { tail -30 "$work/dpkg.log"; exit 1; }
    rm -rf "$root/var/tmp/loop-debs"
fi
# the releases of the image packages given (linux-image-R_VERSION_ARCH.deb)
releases=$(for deb in "$@"; do basename "$deb"; done | sed -n 's/^linux-image-\([^_]*\)_.*/\1/p')
for r in $releases; do
    chroot "$root" dpkg-query -W -f '${Status}\n' "linux-image-$r" | grep -qx "install ok installed" \
        || { echo "linux-image-$r is not installed" >&2; exit 1; }
    for f in "boot/vmlinuz-$r" "boot/initrd.img-$r" "boot/config-$r" "lib/modules/$r/modules.dep" \
             "lib/modules/$r/build/include"; do
        test -e "$root/$f" || { echo "package of $r installed no /$f" >&2; cat "$work/dpkg.log" >&2; exit 1; }
    done
done

say "grub's defaults, fstab, the lab's observer units"
# An admin's choices: Debian's stock kernel is the default entry (Debian
# would pick the highest version, a loop kernel), the serial console is
# grub's and the kernel's, no "quiet" (the console keeps the kernel's
# lines), a short menu timeout.
sed -i -e "s|^GRUB_DEFAULT=.*|GRUB_DEFAULT=\"gnulinux-advanced-$uuid>gnulinux-$stock-advanced-$uuid\"|" \
       -e 's|^GRUB_TIMEOUT=.*|GRUB_TIMEOUT=1|' \
       -e 's|^GRUB_CMDLINE_LINUX_DEFAULT=.*|GRUB_CMDLINE_LINUX_DEFAULT=""|' \
       -e 's|^GRUB_CMDLINE_LINUX=.*|GRUB_CMDLINE_LINUX="console=ttyS0,115200"|' "$root/etc/default/grub"
cat >>"$root/etc/default/grub" <<'GRUB'
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB
grep -q "^GRUB_DEFAULT=\"gnulinux-advanced-$uuid>" "$root/etc/default/grub"
echo "UUID=$uuid / ext4 errors=remount-ro 0 1" > "$root/etc/fstab"
echo "nttrace-loop" > "$root/etc/hostname"
mkdir -p "$root/var/log/journal" "$root/nttrace" "$root/results"
# no login prompt on the serial console: it is the host's record of the boots
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
ln -sf /dev/null "$root/etc/systemd/system/getty@tty1.service"
# The lab's observers (what they run is read from the tree share at each
# boot: lab/guest-loop-boot.sh, lab/guest-loop.sh). The first, early at
# every boot, before anything of the loop (after sysctl.d is applied, so a
# fault it injects meets the settings the loop made): the shares mounted, a
# line for the host saying which kernel came up and how. The second, once
# the machine is up: the loop's first start, and its end.
MOUNT='modprobe -a 9pnet_virtio 9p 2>/dev/null; mkdir -p /nttrace /results; { mountpoint -q /nttrace || mount -t 9p -o trans=virtio,version=9p2000.L,ro nttrace /nttrace; } && { mountpoint -q /results || mount -t 9p -o trans=virtio,version=9p2000.L results /results; }'
cat >"$root/etc/systemd/system/nttrace-lab-boot.service" <<UNIT
[Unit]
Description=nttrace lab: which kernel came up (the host's record)
DefaultDependencies=no
After=local-fs.target systemd-sysctl.service
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c '$MOUNT && exec sh /nttrace/lab/guest-loop-boot.sh'
TimeoutStartSec=120
StandardOutput=journal+console

[Install]
WantedBy=sysinit.target
UNIT
cat >"$root/etc/systemd/system/nttrace-lab-loop.service" <<'UNIT'
[Unit]
Description=nttrace lab: the A/B loop's driver (its start, its end)
# after the loop's own unit (nttrace ab's, for the loop named lab): nothing
# of the lab's runs beside its step, and a boot the step leaves by kexec or
# reboot never gets here
After=nttrace-lab-boot.service multi-user.target nttrace-ab-lab.service
Requires=nttrace-lab-boot.service

[Service]
Type=oneshot
ExecStart=/bin/sh /nttrace/lab/guest-loop.sh
TimeoutStartSec=1800
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/sysinit.target.wants" "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/nttrace-lab-boot.service "$root/etc/systemd/system/sysinit.target.wants/"
ln -sf /etc/systemd/system/nttrace-lab-loop.service "$root/etc/systemd/system/multi-user.target.wants/"
for m in proc sys dev/pts dev; do umount -l "$root/$m"; done
rm -rf "$root/var/cache/apt"/*.bin "$root/var/lib/apt/lists"/*_Packages

say "an MBR disk of $size_mib MiB, one bootable Linux partition at 1 MiB, ext4 with the root"
disk=$work/disk.raw
truncate -s "${size_mib}M" "$disk"
python3 - "$disk" "$size_mib" <<'PY'
import struct, sys
path, mib = sys.argv[1], int(sys.argv[2])
start, count = 2048, mib * 2048 - 2048          # sectors of 512 bytes
# boot flag, CHS first (unused: LBA), type 0x83 (Linux), CHS last, LBA start, sectors
entry = struct.pack("<B3sB3sII", 0x80, b"\xfe\xff\xff", 0x83, b"\xfe\xff\xff", start, count)
with open(path, "r+b") as f:
    f.seek(440)
    f.write(struct.pack("<I", 0x6e747472))      # the disk signature
    f.seek(446)
    f.write(entry + b"\0" * 48 + b"\x55\xaa")
PY
mkfs.ext4 -q -F -U "$uuid" -L nttrace-loop -E offset=$((2048 * 512)) -d "$root" "$disk" "$(( size_mib - 1 ))M"
mkdir -p "$out"
mv "$disk" "$out/disk.raw"
echo "$stock" > "$out/stock-release"
echo "$releases" > "$out/releases"
say "done: stock $stock, loop kernels $(echo $releases)"
