# SPDX-License-Identifier: Apache-2.0
"""Debian's grub.cfg as update-grub writes it: the one-shot next_entry
block grub-reboot relies on, the default entry, and the "Advanced options"
submenu holding each kernel's normal and recovery entries. `default` is
the value of `set default=` (DEBIAN_GRUB_CFG % {"default": "0"}). The
header's own variable (`menuentry_id_option=...`, lines that start with
"menuentry") is kept, as update-grub writes it."""

DEBIAN_GRUB_CFG = """\
### BEGIN /etc/grub.d/00_header ###
if [ -s $prefix/grubenv ]; then
  load_env
fi
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="%(default)s"
fi

if [ x"${feature_menuentry_id}" = xy ]; then
  menuentry_id_option="--id"
else
  menuentry_id_option=""
fi

export menuentry_id_option
### END /etc/grub.d/00_header ###

### BEGIN /etc/grub.d/10_linux ###
menuentry 'Debian GNU/Linux' --class debian --class gnu-linux $menuentry_id_option 'gnulinux-simple-1234' {
	load_video
	insmod ext2
	echo	'Loading Linux 6.1.0-57-amd64 ...'
	linux	/boot/vmlinuz-6.1.0-57-amd64 root=UUID=1234 ro quiet
	initrd	/boot/initrd.img-6.1.0-57-amd64
}
submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-1234' {
	menuentry 'Debian GNU/Linux, with Linux 6.12.0-nt' --class debian $menuentry_id_option 'gnulinux-6.12.0-nt-advanced-1234' {
		linux	/boot/vmlinuz-6.12.0-nt root=UUID=1234 ro quiet
	}
	menuentry 'Debian GNU/Linux, with Linux 6.12.0-nt (recovery mode)' --class debian $menuentry_id_option 'gnulinux-6.12.0-nt-recovery-1234' {
		linux	/boot/vmlinuz-6.12.0-nt root=UUID=1234 ro single
	}
	menuentry 'Debian GNU/Linux, with Linux 6.12.0' --class debian $menuentry_id_option 'gnulinux-6.12.0-advanced-1234' {
		linux	/boot/vmlinuz-6.12.0 root=UUID=1234 ro quiet
	}
}
menuentry 'UEFI Firmware Settings' $menuentry_id_option 'uefi-firmware' {
	fwsetup
}
"""
