#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The A/B loop guest's early unit (nttrace-lab-boot.service on the loop
# disk, lab/build-loop-disk.sh), at every boot before anything of the loop:
# a line for the host in ab-boots.jsonl saying which kernel came up (the
# loop's kernels have releases of their own: /nttrace/ab-loop/<variant>.release)
# and how it was reached: grub puts BOOT_IMAGE= on the command line of what
# it boots, and nttrace's kexec passes the command line without it.
#
# Then, while the loop's step runs at this boot, a line for the host each
# time its journal says it runs validate or asks for the next boot: the host
# times a power cut from them ("validate": while validate runs; "booting":
# inside the kexec or reboot the step asked for).
#
# The faults the lab injects from here (/var/lib/nttrace-lab/inject, written
# by guest_loop.py before the loop's start: FAULT:VARIANT words; each once,
# a marker on the disk). At the first boot of VARIANT: "hang": it stops
# answering: PID 1 held in a ptrace stop (init ignores SIGSTOP; PTRACE_SEIZE
# and PTRACE_INTERRUPT stop it all the same, for as long as the tracer
# lives), so nothing starts and nothing feeds the watchdog; only the
# watchdog the loop armed brings it back. "hold": the boot never reaches
# multi-user.target (nttrace-lab-hold.service, ordered before it, never
# ends) while PID 1 lives and feeds the watchdog: only the loop's boot
# deadline brings it back. At the first boot of another loop kernel, so
# between the loop's start and VARIANT's boot, what an admin or a build does
# to VARIANT meanwhile: "modules": a module of its tree rewritten (make
# modules_install of a rebuild); "headers": its headers package purged
# (apt autoremove). The faults before systemd are in the initramfs
# (guest-loop-initramfs.sh).
set -u
LOOP=/nttrace/ab-loop
LAB=/var/lib/nttrace-lab
running=
for f in "$LOOP"/*.release; do
    [ "$(cat "$f")" = "$(uname -r)" ] && running=$(basename "$f" .release)
done
case " $(cat /proc/cmdline) " in *" BOOT_IMAGE="*) by=firmware ;; *) by=kexec ;; esac
boot_id=$(cat /proc/sys/kernel/random/boot_id)
echo "nttrace-lab: boot: kernel ${running:-default} ($(uname -r) $(uname -v)), by $by" > /dev/console
printf '{"event": "boot", "kernel": %s, "release": "%s", "build": "%s", "booted_by": "%s", "boot_id": "%s", "uptime_s": %s, "cmdline": "%s"}\n' \
    "$([ -n "$running" ] && echo "\"$running\"" || echo null)" "$(uname -r)" "$(uname -v)" "$by" \
    "$boot_id" "$(cut -d' ' -f1 /proc/uptime)" \
    "$(sed 's/["\\]/_/g' /proc/cmdline)" >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
if [ -r "$LAB/initramfs-injected" ]; then   # what the initramfs injected at this boot (it could not write here)
    while read -r fault release id; do
        [ "$id" = "$boot_id" ] || continue
        printf '{"event": "inject", "fault": "%s", "kernel": %s, "release": "%s", "boot_id": "%s", "where": "initramfs"}\n' \
            "$fault" "$([ -n "$running" ] && echo "\"$running\"" || echo null)" "$release" "$id" \
            >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
    done < "$LAB/initramfs-injected"
fi
# the step's lines, whatever kernel runs (the default kernel's step boots the next slot too)
name=$(cat "$LAB/loop-name" 2>/dev/null)     # guest_loop.py's, written before each start
if [ -n "$name" ]; then
    ( journalctl -f -n 0 -o cat -u "nttrace-ab@$name.service" 2>/dev/null | while read -r line; do
        case $line in
            *"running validate"*) event=validate ;;
            *"booting slot "*) event=booting ;;
            *) continue ;;
        esac
        printf '{"event": "%s", "kernel": %s, "boot_id": "%s", "uptime_s": %s, "line": "%s"}\n' "$event" \
            "$([ -n "$running" ] && echo "\"$running\"" || echo null)" "$boot_id" "$(cut -d' ' -f1 /proc/uptime)" \
            "$(echo "$line" | sed 's/["\\]/_/g')" >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
    done ) &
fi
[ -n "$running" ] && [ -r "$LAB/inject" ] || exit 0
for word in $(cat "$LAB/inject"); do
    fault=${word%%:*}
    variant=${word#*:}
    marker=$LAB/injected-$fault-$variant
    [ -e "$marker" ] && continue
    case $fault in
        hang|hold) [ "$running" = "$variant" ] || continue ;;
        modules|headers) [ "$running" != "$variant" ] || continue ;;
        *) continue ;;
    esac
    release=$(cat "$LOOP/$variant.release")
    uname -v > "$marker" && sync
    echo "nttrace-lab: injected $fault:$variant at the first boot of $running" > /dev/console
    echo "{\"event\": \"inject\", \"fault\": \"$fault\", \"target\": \"$variant\", \"kernel\": \"$running\", \"boot_id\": \"$boot_id\"}" \
        >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
    case $fault in
        modules) ko=$(find "/lib/modules/$release/kernel" -name '*.ko*' | LC_ALL=C sort | head -n1)
                 printf 'nttrace-lab: rebuilt\n' >> "$ko" && sync ;;
        headers) dpkg --purge "linux-headers-$release" > /dev/console 2>&1; sync ;;
        hold) systemctl start --no-block nttrace-lab-hold.service ;;
        hang) exec python3 -c '
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
if libc.ptrace(PTRACE_SEIZE, 1, None, None) or libc.ptrace(PTRACE_INTERRUPT, 1, None, None):
    raise SystemExit(f"ptrace of PID 1: errno {ctypes.get_errno()}")
while True:
    time.sleep(3600)' ;;
    esac
    exit 0
done
exit 0
