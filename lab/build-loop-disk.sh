#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The A/B loop's guest disk, the host's part (lab/loop_disk.py runs it, then
# the install boot that makes it bootable): the server root of
# build-loop-root.sh, the loop's kernels installed in it as their packages
# with dpkg (their postinst makes each an initramfs; grub.cfg does not
# exist yet, so update-grub waits for the install boot), /etc/default/grub
# and /etc/fstab as an admin writes them, and the lab's two observer units.
# Written as an MBR disk image with one ext4 partition at 1 MiB (mkfs.ext4
# -d at an offset: no loop device, no mount). Before the kernels'
# packages, the lab's initramfs script (guest-loop-initramfs.sh: the faults
# before systemd), so each loop kernel's initramfs holds it; and
# MODULES_DIR/<release>/*.ko (the kernel's own test_lockup, built for each
# loop kernel by loop_disk.py) under /var/lib/nttrace-lab/modules, outside the
# kernels' module trees.
#
#   build-loop-disk.sh OUT_DIR UUID ROOT_TAR STOCK_RELEASE MODULES_DIR DEB...
#
# Writes OUT_DIR/disk.raw and OUT_DIR/releases (the installed packages'
# kernels, a line each). Needs root, e2fsprogs, python3.
set -euo pipefail
usage="usage: build-loop-disk.sh OUT_DIR UUID ROOT_TAR STOCK_RELEASE MODULES_DIR DEB..."
out=${1:?$usage}
uuid=${2:?$usage}
root_tar=${3:?$usage}
stock=${4:?$usage}
modules=${5:?$usage}
shift 5
here=$(cd "$(dirname "$0")" && pwd)
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

say "the server root from $root_tar"
mkdir -p "$root"
tar --numeric-owner --xattrs --acls -C "$root" -xf "$root_tar"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"

say "the lab's initramfs script (the faults before systemd) and the loop kernels' lockup modules"
install -D -m 0755 "$here/guest-loop-initramfs.sh" "$root/etc/initramfs-tools/scripts/init-bottom/nttrace-lab-fault"
mkdir -p "$root/var/lib/nttrace-lab/modules"
cp -a "$modules"/. "$root/var/lib/nttrace-lab/modules/"

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
        # in the chroot: build is a link to /usr/src/linux-headers-R, an absolute path of the guest's
        chroot "$root" test -e "/$f" || { echo "package of $r installed no /$f" >&2; cat "$work/dpkg.log" >&2; exit 1; }
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
# after the loop's own unit (nttrace ab's instance for each loop the lab's
# scenarios name, lab/ab_loop.py): nothing of the lab's runs beside its
# step, and a boot the step leaves by kexec or reboot never gets here
After=nttrace-lab-boot.service multi-user.target
After=nttrace-ab@lab.service nttrace-ab@series.service nttrace-ab@modules.service nttrace-ab@headers.service
After=nttrace-ab@nowatchdog.service nttrace-ab@emergency.service
Requires=nttrace-lab-boot.service

[Service]
Type=oneshot
ExecStart=/bin/sh /nttrace/lab/guest-loop.sh
TimeoutStartSec=1800
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
UNIT
# A hang with PID 1 alive (guest-loop-boot.sh's "hold" starts it): the boot
# never reaches multi-user.target, while systemd feeds the watchdog.
cat >"$root/etc/systemd/system/nttrace-lab-hold.service" <<'UNIT'
[Unit]
Description=nttrace lab: hold this boot before multi-user.target (a fault the lab injects)
DefaultDependencies=no
Before=multi-user.target

[Service]
Type=oneshot
ExecStart=/bin/sleep infinity
TimeoutStartSec=infinity
UNIT
mkdir -p "$root/etc/systemd/system/sysinit.target.wants" "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/nttrace-lab-boot.service "$root/etc/systemd/system/sysinit.target.wants/"
ln -sf /etc/systemd/system/nttrace-lab-loop.service "$root/etc/systemd/system/multi-user.target.wants/"
for m in proc sys dev/pts dev; do umount -l "$root/$m"; done

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
echo "$releases" > "$out/releases"
say "done: stock $stock, loop kernels $(echo $releases)"
