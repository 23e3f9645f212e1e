#!/bin/sh
# The A/B loop's guest, at every boot (guest-systemd.sh hands over to it when
# the kernel command line says nttrace.ab). One QEMU run boots many kernels
# here: the default (QEMU's -kernel) first, then the loop's, by kexec; a
# panic or the loop's last reboot resets into the default again. The root
# disk's snapshot overlay keeps what the guest wrote across all of them.
#
# First boot: this boot's kernel modules (guest-ab-boot.sh), nttrace from the
# host's wheel, and the unit that runs guest-ab-boot.sh early at every later
# boot. Then, at every boot, guest_ab.py in a unit of its own, after the
# loop's (nttrace-ab-NAME.service: its step kexecs on, or ends the loop);
# this script returns at once. guest_ab.py powers the guest off when the
# loop is over.
set -u
R=/results
mkdir -p "$R" && { mountpoint -q "$R" || mount -t 9p -o trans=virtio,version=9p2000.L results "$R"; }
SETUP=/var/lib/nttrace-lab
give_up() {   # the loop cannot go on: say why, and end the QEMU run
    echo "$1" > "$R/guest-run.rc"
    sync
    systemctl --no-block poweroff
    exit 0
}
if [ ! -e "$SETUP/ab-installed" ]; then
    {
        echo "nttrace-lab: A/B loop guest, first boot: kernel $(uname -r) $(uname -v)"
        sh /nttrace/lab/guest-ab-boot.sh || exit 12
        sh /nttrace/lab/guest-install.sh "$R" || exit $?
        # what the loop's report needs beyond nttrace's dependencies (ab_loop.GUEST_WHEELS)
        timeout 900 /opt/venv/bin/python -m pip install -q --no-index --no-deps --no-compile \
            /nttrace/ab-loop/wheels/*.whl || exit 15
        ln -sf /opt/venv/bin/nttrace /usr/local/bin/nttrace
        cat > /etc/systemd/system/nttrace-lab-ab-boot.service <<'UNIT'
[Unit]
Description=nttrace lab: the A/B loop's kernel modules, before anything uses them
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
# the tree's share, mounted only while the script runs: a 9p tag mounts once at
# a time, and the image's nttrace-lab-systemd.service mounts it at /nttrace next
ExecStart=/bin/sh -c 'mkdir -p /run/nttrace-ab-tree && mount -t 9p -o trans=virtio,version=9p2000.L,ro nttrace /run/nttrace-ab-tree && { sh /run/nttrace-ab-tree/lab/guest-ab-boot.sh; rc=$?; umount /run/nttrace-ab-tree; exit $rc; }'
TimeoutStartSec=300
StandardOutput=journal+console

[Install]
WantedBy=sysinit.target
UNIT
        systemctl enable nttrace-lab-ab-boot.service || exit 13
        mkdir -p "$SETUP" && date +%s > "$SETUP/ab-installed" && sync
    } >> "$R/guest-run.log" 2>&1 || give_up $?
fi
# ordered after the loop's own unit: nothing of the lab's runs beside its
# step (under TCG, a poll beside it would be in what it times)
systemd-run --unit=nttrace-lab-ab --no-block --property=After="nttrace-ab-$(cat /nttrace/ab-loop/name).service" \
    --property=StandardOutput=append:$R/guest-run.log --property=StandardError=append:$R/guest-run.log \
    /opt/venv/bin/python /nttrace/lab/guest_ab.py "$R" || give_up 14
