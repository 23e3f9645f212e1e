#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The A/B loop guest's early unit (nttrace-lab-boot.service on the loop
# disk, lab/build-loop-disk.sh), at every boot before anything of the loop:
# a line for the host in ab-boots.jsonl saying which kernel came up (the
# loop's kernels have releases of their own: /nttrace/ab-loop/<variant>.release)
# and how it was reached: grub puts BOOT_IMAGE= on the command line of what
# it boots, and nttrace's kexec passes the command line without it.
#
# The faults the lab injects (/var/lib/nttrace-lab/inject, written by
# guest_loop.py before the loop's start; each once, a marker on the disk).
# At the patched kernel's first boot: "panic": it panics for real (sysrq
# c); only the panic= the loop set brings the machine back. "hang": it stops
# answering: PID 1 held in a ptrace stop (init ignores SIGSTOP; PTRACE_SEIZE
# and PTRACE_INTERRUPT stop it all the same, for as long as the tracer
# lives), so nothing starts and nothing feeds the watchdog; only the
# watchdog the loop armed brings it back. At the base kernel's first boot,
# so between the loop's start and the patched kernel's boot, what an admin
# or a build does to the patched kernel meanwhile: "image": its image
# rebuilt (other bytes in /boot/vmlinuz-R); "modules": a module of its tree
# rewritten (make modules_install of a rebuild); "headers": its headers
# package purged (apt autoremove), so bcc has nothing to compile against.
set -u
LOOP=/nttrace/ab-loop
running=
for f in "$LOOP"/*.release; do
    [ "$(cat "$f")" = "$(uname -r)" ] && running=$(basename "$f" .release)
done
case " $(cat /proc/cmdline) " in *" BOOT_IMAGE="*) by=firmware ;; *) by=kexec ;; esac
echo "nttrace-lab: boot: kernel ${running:-default} ($(uname -r) $(uname -v)), by $by" > /dev/console
printf '{"event": "boot", "kernel": %s, "release": "%s", "build": "%s", "booted_by": "%s", "boot_id": "%s", "uptime_s": %s, "cmdline": "%s"}\n' \
    "$([ -n "$running" ] && echo "\"$running\"" || echo null)" "$(uname -r)" "$(uname -v)" "$by" \
    "$(cat /proc/sys/kernel/random/boot_id)" "$(cut -d' ' -f1 /proc/uptime)" \
    "$(sed 's/["\\]/_/g' /proc/cmdline)" >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
[ -n "$running" ] || exit 0
# when the loop's step says it runs validate (its journal line), a line for
# the host: a power cut "while validate runs" is timed from it
boot_id=$(cat /proc/sys/kernel/random/boot_id)
name=$(cat /var/lib/nttrace-lab/loop-name)     # guest_loop.py's, written before each start
( journalctl -f -n 0 -o cat -u "nttrace-ab-$name.service" 2>/dev/null | grep -m1 -q "running validate" &&
    printf '{"event": "validate", "kernel": "%s", "boot_id": "%s", "uptime_s": %s}\n' "$running" "$boot_id" \
        "$(cut -d' ' -f1 /proc/uptime)" >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl ) &
[ -r /var/lib/nttrace-lab/inject ] || exit 0
patched=$(cat "$LOOP/patched")
patched_release=$(cat "$LOOP/$patched.release")
for fault in $(cat /var/lib/nttrace-lab/inject); do
    marker=/var/lib/nttrace-lab/injected-$fault
    [ -e "$marker" ] && continue
    case $fault in
        panic|hang) [ "$running" = "$patched" ] || continue ;;
        image|modules|headers) [ "$running" != "$patched" ] || continue ;;
        *) continue ;;
    esac
    uname -v > "$marker" && sync
    echo "nttrace-lab: injected $fault at the first boot of $running" > /dev/console
    echo "{\"event\": \"inject\", \"fault\": \"$fault\", \"kernel\": \"$running\", \"boot_id\": \"$(cat /proc/sys/kernel/random/boot_id)\"}" \
        >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
    case $fault in
        image) printf 'nttrace-lab: rebuilt\n' >> "/boot/vmlinuz-$patched_release" && sync ;;
        modules) ko=$(find "/lib/modules/$patched_release/kernel" -name '*.ko*' | LC_ALL=C sort | head -n1)
                 printf 'nttrace-lab: rebuilt\n' >> "$ko" && sync ;;
        headers) dpkg --purge "linux-headers-$patched_release" > /dev/console 2>&1; sync ;;
        panic) echo c > /proc/sysrq-trigger ;;
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
