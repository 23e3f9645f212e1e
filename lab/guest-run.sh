#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab guest (started by guest-init.sh): installs the nttrace
# wheel the host built into the results share, then runs the scenarios.
# Every step is bounded; the host bounds the whole run as well.
set -u
R=/results
case "$(cat /proc/cmdline)" in
    *nttrace.inject=hang*) echo "injected hang"; sleep 100000 ;;
    *nttrace.inject=panic*) echo "injected panic"; echo c > /proc/sysrq-trigger ;;
esac
# A user's kernel (NTTRACE_LAB_MODULES on the host): its modules and headers.
if mount -t 9p -o trans=virtio,version=9p2000.L,ro kmods /mnt 2>/dev/null; then
    mkdir -p "/lib/modules/$(uname -r)" && mount --bind "/mnt/$(uname -r)" "/lib/modules/$(uname -r)"
fi
# No udev in the guest: load what it would (ACPI NFIT for the NVDIMM first).
for m in nfit nd_pmem dax_pmem device_dax kmem; do modprobe "$m" 2>/dev/null || echo "modprobe $m failed"; done
# QEMU user networking: the host forwards 127.0.0.1:<port> to 10.0.2.15:9435.
nic=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
ip link set "$nic" up && ip addr add 10.0.2.15/24 dev "$nic" && ip route add default via 10.0.2.2
udevadm settle 2>/dev/null || sleep 2
# The traffic plugin's guest (lab/traffic/): its own workload, no nttrace.
case "$(cat /proc/cmdline)" in *nttrace.traffic*) exec sh /nttrace/lab/traffic/guest-traffic.sh "$R" ;; esac
sh /nttrace/lab/guest-install.sh "$R" || exit $?
ln -sf /opt/venv/bin/nttrace /usr/local/bin/nttrace
timeout -k 10 1500 /opt/venv/bin/python /nttrace/lab/guest_scenarios.py "$R"
