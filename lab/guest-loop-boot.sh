#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The A/B loop guest's early unit (nttrace-lab-boot.service on the loop
# disk, lab/build-loop-disk.sh), at every boot before anything of the loop:
# a line for the host in ab-boots.jsonl saying which kernel came up (the
# loop's kernels have releases of their own: /nttrace/ab-loop/<variant>.release)
# and how it was reached: grub puts BOOT_IMAGE= on the command line of what
# it boots, and nttrace's kexec passes the command line without it.
#
# The faults the lab injects at a boot (config.json "inject", each once, a
# marker on the disk): "panic": the patched kernel's first boot panics for
# real (sysrq c); only the panic= the loop set brings the machine back.
# "hang": the patched kernel's first boot stops answering: PID 1 held in a
# ptrace stop (init ignores SIGSTOP; PTRACE_SEIZE and PTRACE_INTERRUPT stop
# it all the same, for as long as the tracer lives), so nothing starts and
# nothing feeds the watchdog; only the watchdog the loop armed brings it back.
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
( journalctl -f -n 0 -o cat -u "nttrace-ab-$(cat "$LOOP/name").service" 2>/dev/null | grep -m1 -q "running validate" &&
    printf '{"event": "validate", "kernel": "%s", "boot_id": "%s", "uptime_s": %s}\n' "$running" "$boot_id" \
        "$(cut -d' ' -f1 /proc/uptime)" >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl ) &
[ "$running" = "$(cat "$LOOP/patched")" ] || exit 0
inject=$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1])).get("inject", [])))' "$LOOP/config.json")
for fault in $inject; do
    marker=/var/lib/nttrace-lab/injected-$fault
    [ -e "$marker" ] && continue
    case $fault in panic|hang) ;; *) continue ;; esac
    mkdir -p /var/lib/nttrace-lab && uname -v > "$marker" && sync
    echo "nttrace-lab: injected $fault at the first boot of $running" > /dev/console
    echo "{\"event\": \"inject\", \"fault\": \"$fault\", \"kernel\": \"$running\", \"boot_id\": \"$(cat /proc/sys/kernel/random/boot_id)\"}" \
        >> /results/ab-boots.jsonl && sync /results/ab-boots.jsonl
    case $fault in
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
