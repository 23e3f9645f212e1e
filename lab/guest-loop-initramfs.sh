#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The A/B loop guest's faults that happen before systemd: an initramfs-tools
# script (init-bottom: the root is mounted read-only at $rootmnt, nothing of
# the real root has run, no sysctl is applied, no watchdog is armed), put in
# every loop kernel's initramfs by build-loop-disk.sh. It acts only where the
# lab's driver (guest_loop.py) planned a fault for this kernel, at most once:
# /var/lib/nttrace-lab/initramfs-faults holds "FAULT RELEASE" lines, and the
# line is taken out (the root remounted read-write for that write) before the
# fault, so the next boot of that kernel boots cleanly.
#   panic        the kernel panics (sysrq c): only a panic= on this boot's own
#                command line reboots it
#   lockup       a CPU stuck in the kernel with preemption off (the kernel's
#                own lib/test_lockup.c, built for this kernel): the soft
#                lockup detector fires; only softlockup_panic= and panic= on
#                the command line turn that into a reset
#   no-watchdog  the watchdog's driver is unbound from its device before
#                systemd would open it, as a driver that fails to probe leaves
#                it: the loop must see the boot run unprotected
#   emergency    the pmem device fstab mounts is unbound from nd_pmem, as
#                a kernel that cannot bring it up leaves it: systemd drops to
#                emergency mode
PREREQ=""
prereqs() { echo "$PREREQ"; }
case $1 in prereqs) prereqs; exit 0 ;; esac

lab="${rootmnt}/var/lib/nttrace-lab"
plan="$lab/initramfs-faults"
[ -s "$plan" ] || exit 0
release=$(uname -r)
fault=$(while read -r f r; do [ "$r" = "$release" ] && { echo "$f"; break; }; done < "$plan")
[ -n "$fault" ] || exit 0
mount -o remount,rw "$rootmnt" || exit 0
grep -v -x "$fault $release" "$plan" > "$plan.new"
mv "$plan.new" "$plan"
echo "$fault $release $(cat /proc/sys/kernel/random/boot_id)" >> "$lab/initramfs-injected"
sync
mount -o remount,ro "$rootmnt"
echo "nttrace-lab: injected $fault in the initramfs of $release" > /dev/console
case $fault in
    panic) echo c > /proc/sysrq-trigger ;;
    lockup) insmod "$lab/modules/$release/test_lockup.ko" time_secs=900 disable_preempt=1 ;;
    no-watchdog)
        for dev in /sys/bus/pci/drivers/i6300ESB*/0000:*; do
            [ -e "$dev" ] && echo "${dev##*/}" > "${dev%/*}/unbind"
        done ;;
    emergency)
        # /dev/pmem0 is nd_pmem's disk of whatever it bound: in fsdax mode the
        # namespace's pfn device (pfn0.N; the namespace itself is claimed by
        # it and stays unbound), else the namespace. libnvdimm probes
        # asynchronously, so under TCG nothing may be bound yet here: wait
        # for the bind, then unbind it, and say what went.
        drv=/sys/bus/nd/drivers/nd_pmem
        i=0
        while [ $i -lt 300 ]; do
            bound=""
            for dev in "$drv"/namespace* "$drv"/pfn* "$drv"/btt*; do
                [ -e "$dev" ] && bound="$bound ${dev##*/}"
            done
            [ -n "$bound" ] && break
            sleep 1; i=$((i + 1))
        done
        for dev in $bound; do
            echo "$dev" > "$drv/unbind"
        done
        echo "nttrace-lab: emergency: unbound${bound:- nothing} from nd_pmem after ${i} s" > /dev/console ;;
esac
exit 0
