#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab guest booted with systemd as PID 1 (started by the
# image's nttrace-lab-systemd.service when the kernel command line says
# nttrace.systemd): mounts the host's shares, installs the nttrace wheel,
# runs the systemd scenario, powers off. With nttrace.deb on the command line
# as well it runs the Debian package's scenario instead (guest_deb.py, with
# Debian's python3: the package is what it installs). Every step is bounded.
set -u
mkdir -p /nttrace /results
mountpoint -q /nttrace || mount -t 9p -o trans=virtio,version=9p2000.L,ro nttrace /nttrace
mountpoint -q /results || mount -t 9p -o trans=virtio,version=9p2000.L results /results
R=/results
{
    echo "nttrace-lab: systemd guest up, PID 1 is $(cat /proc/1/comm), kernel $(uname -r)"
    nic=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
    ip link set lo up
    ip link set "$nic" up && ip addr add 10.0.2.15/24 dev "$nic" && ip route add default via 10.0.2.2
    case "$(cat /proc/cmdline)" in
        *nttrace.deb*) timeout -k 10 1200 python3 /nttrace/lab/guest_deb.py "$R" ;;
        *) sh /nttrace/lab/guest-install.sh "$R" || exit $?
           timeout -k 10 1200 /opt/venv/bin/python /nttrace/lab/guest_systemd.py "$R" ;;
    esac
} > "$R/guest-run.log" 2>&1
echo $? > "$R/guest-run.rc"
sync
systemctl --no-block poweroff
