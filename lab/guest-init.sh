#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the lab guest: mount what nttrace needs, mount the host's shares,
# run the lab script from the working tree, power off. Whatever happens, the
# guest powers off (and QEMU, run with -no-reboot, exits).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -o remount,rw /
modprobe 9pnet_virtio 2>/dev/null; modprobe 9p 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,ro nttrace /nttrace
mount -t 9p -o trans=virtio,version=9p2000.L results /results
ip link set lo up
echo "nttrace-lab: guest up, kernel $(uname -r)" > /dev/console
if [ -x /nttrace/lab/guest-run.sh ]; then
    sh /nttrace/lab/guest-run.sh > /results/guest-run.log 2>&1
    echo $? > /results/guest-run.rc
else
    echo "nttrace-lab: no /nttrace/lab/guest-run.sh" > /dev/console
fi
sync
echo "nttrace-lab: powering off" > /dev/console
echo o > /proc/sysrq-trigger
sleep 5
