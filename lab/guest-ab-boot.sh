#!/bin/sh
# The A/B loop guest's kernel, early at every boot (the unit
# nttrace-lab-ab-boot.service that guest-ab.sh installs, before sysinit.target,
# so before nttrace's own unit): which of the loop's kernels runs, read from
# its build string (`uname -v`; base and nt-v3 have the same release, 7.2.13,
# so /lib/modules/<release> cannot tell them apart), every loop kernel's
# share mounted at /lab-kernels/<variant> (nttrace kexecs from there), this
# kernel's modules bound at /lib/modules/<release>, and the NVDIMM's drivers
# loaded (udev looked for them before they were there); and a line for the
# host in ab-boots.jsonl of the results share.
#
# The loop's fault (ab_loop.py --inject-panic): with nttrace.inject=panic-once
# on the command line nttrace ab passes, the patched kernel's first boot
# panics here, for real (sysrq c; panic=-1 resets; QEMU re-runs its default
# kernel, as firmware would); a marker on the disk makes it once only.
set -u
# the host's: <variant>.build files (uname -v of each kernel), patched; in the
# tree this script is read from (/nttrace at the first boot, the unit's own mount after)
LOOP=$(cd "$(dirname "$0")/.." && pwd)/ab-loop
running=
for f in "$LOOP"/*.build; do
    v=$(basename "$f" .build)
    mkdir -p "/lab-kernels/$v"
    mountpoint -q "/lab-kernels/$v" || mount -t 9p -o trans=virtio,version=9p2000.L,ro "kernel-$v" "/lab-kernels/$v" \
        || { echo "nttrace-lab: cannot mount the share of kernel $v"; exit 1; }
    [ "$(cat "$f")" = "$(uname -v)" ] && running=$v
done
echo "nttrace-lab: A/B loop boot, kernel ${running:-not one of the loop's} ($(uname -r) $(uname -v))" > /dev/console
# one line a boot for the host (which stamps its arrival): the boots' order and pace
case " $(cat /proc/cmdline) " in *" nttrace.boot=kexec "*) by=kexec ;; *) by=firmware ;; esac
mkdir -p /results && { mountpoint -q /results || mount -t 9p -o trans=virtio,version=9p2000.L results /results; } &&
    printf '{"event": "boot", "kernel": %s, "build": "%s", "booted_by": "%s", "boot_id": "%s", "uptime_s": %s}\n' \
        "$([ -n "$running" ] && echo "\"$running\"" || echo null)" "$(uname -v)" "$by" \
        "$(cat /proc/sys/kernel/random/boot_id)" "$(cut -d' ' -f1 /proc/uptime)" \
        >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
[ -n "$running" ] || exit 0
mods=/lib/modules/$(uname -r)
shared=/lab-kernels/$running/modules/$(uname -r)
if [ -d "$shared" ]; then     # else a kernel whose modules the disk holds (the image's own)
    mkdir -p "$mods"
    mountpoint -q "$mods" || mount --bind "$shared" "$mods" || exit 1
fi
for m in nfit nd_pmem dax_pmem device_dax kmem; do modprobe "$m" || echo "modprobe $m failed"; done
# ab_loop.py --no-udev (a diagnosis: what udevd, answering each rebind's
# uevents on the same vCPU, adds to the timings): udevd stopped for the boot
case " $(cat /proc/cmdline) " in *" nttrace.udev=off "*)
    systemctl stop systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket
    echo "nttrace-lab: udevd stopped for this boot" > /dev/console ;;
esac
case " $(cat /proc/cmdline) " in
    *" nttrace.inject=panic-once "*)
        if [ "$running" = "$(cat "$LOOP/patched")" ] && [ ! -e /var/lib/nttrace-lab/panicked ]; then
            mkdir -p /var/lib/nttrace-lab && uname -v > /var/lib/nttrace-lab/panicked && sync
            echo "nttrace-lab: injected panic at the first boot of $running" > /dev/console
            echo c > /proc/sysrq-trigger
        fi ;;
esac
exit 0
