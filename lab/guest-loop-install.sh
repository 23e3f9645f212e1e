#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The A/B loop disk's install boot (lab/loop_disk.py): the lab's own guest
# (its image and stock kernel, QEMU's -kernel) with the new disk as its
# second drive, /dev/vdb, run as the lab image's init runs guest-run.sh.
# What an installer does last, on the disk's own root: grub-install into
# the disk's MBR gap and update-grub (grub.cfg read from the disk, with
# the root by UUID), then it powers off. This is the lab's installer: the
# loop's guest boots from the disk alone afterwards.
set -eu
disk=/dev/vdb
uuid=$(cat /nttrace/uuid)
echo "loop disk install: $(uname -r), disk $disk, root UUID $uuid"
test -b "${disk}1" || { echo "no ${disk}1: the partition table was not read" >&2; exit 20; }
mkdir -p /mnt/loop
mount -t ext4 "${disk}1" /mnt/loop
# update-grub writes root=UUID=... only where udev made the by-uuid link;
# this installer runs without udev, so it makes udev's link itself
mkdir -p /dev/disk/by-uuid && ln -sf "../../$(basename "$disk")1" "/dev/disk/by-uuid/$uuid"
for m in proc sys dev; do mount --bind "/$m" "/mnt/loop/$m"; done
chroot /mnt/loop grub-install --target=i386-pc "$disk"
chroot /mnt/loop update-grub
# what grub will read: its config and its environment block
test -s /mnt/loop/boot/grub/grub.cfg && test -s /mnt/loop/boot/grub/grubenv
grep -E "^\s*(menuentry|submenu|linux|set default)" /mnt/loop/boot/grub/grub.cfg | sed 's/--class [^ ]* //g'
cp /mnt/loop/boot/grub/grub.cfg /results/grub.cfg
for m in dev sys proc; do umount "/mnt/loop/$m"; done
umount /mnt/loop
sync
echo "loop disk install: done"
