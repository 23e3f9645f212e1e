#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab guest instead of the scenarios when the command line
# says nttrace.traffic (guest-run.sh): a devdax namespace on the NVDIMM, then
# traffic-guest (built on the host, in $1/traffic/) runs its windows on it.
# What the guest knows of the device's place goes to $1/traffic/device.json:
# the region's and the dax device's physical ranges (the mapping test sets the
# plugin's RAMBlock offsets against them). Then, as nttrace.traffic=STEP,...
# on the command line asks, each in windows of its own, labelled in
# $1/traffic/windows.jsonl with what the kernel says it did:
#   memmap     the namespace rebound (disable, enable) twice as fsdax (-M dev)
#              and twice as devdax (-a 2M); the kernel's count of initialised pages
#   demotion   the dax device onlined as node 1 (system-ram), then twice: 64 MiB
#              of a cgroup's anonymous memory reclaimed with demotion on; the
#              pgdemote_* counters' delta
# Last, the kernel's text symbols as this boot placed them (KASLR) go to
# $1/traffic/kallsyms, with the modules the steps loaded: the host names the
# plugin's instruction addresses with them (lab/traffic/symbols.py).
# Exit 20: no namespace; 21: no dax device; 22: a rebind failed; 23: no node 1;
# 24: the held memory never came; 25: no kernel symbol could be read.
set -u
R=$1
T=$R/traffic
timeout 300 ndctl create-namespace -f -e namespace0.0 -m devdax -a 2M > "$T/namespace.json" || exit 20
dax=$(ls /sys/bus/dax/devices | head -n 1)
[ -n "$dax" ] || exit 21
region=$(cat /sys/bus/nd/devices/region0/resource)
# the dax device's physical start, as /proc/iomem names it
dax_start=$(grep -m1 "$dax\$" /proc/iomem | sed 's/^ *\([0-9a-f]*\)-.*/\1/')
printf '{"dax": "%s", "region_start": "%s", "dax_start": "0x%s", "iomem": "%s"}\n' \
    "$dax" "$region" "$dax_start" "$(grep -i -e pmem -e dax -e 'Persistent' /proc/iomem | tr '\n' ';')" > "$T/device.json"
timeout 900 "$T/traffic-guest" "/dev/$dax" "$T/guest.json" || exit $?
steps=$(sed -n 's/.*nttrace\.traffic=\([^ ]*\).*/\1/p' /proc/cmdline | tr ',' ' ')
want() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
echo "func memmap_init_zone_device +p" > /proc/dynamic_debug/control
rebind() {   # $1: label; the namespace as it is now, disabled and enabled in one window
    dmesg -C
    "$T/traffic-guest" window open
    timeout 300 ndctl disable-namespace namespace0.0 > /dev/null && timeout 300 ndctl enable-namespace namespace0.0 > /dev/null
    rc=$?
    "$T/traffic-guest" window close
    [ $rc -eq 0 ] || exit 22
    pages=$(dmesg | sed -n 's/.*memmap_init_zone_device initialised \([0-9]*\) pages.*/\1/p' | tail -n 1)
    printf '{"label": "%s", "what": "ndctl disable-namespace, enable-namespace", "pages": %s}\n' "$1" "${pages:-null}" >> "$T/windows.jsonl"
}
demoted() {   # pages demoted so far, all reclaimers
    awk '/^pgdemote_/ { n += $2 } END { print n + 0 }' /proc/vmstat
}
demote() {   # $1: label; 64 MiB held in the cgroup, reclaimed in one window
    rm -f /tmp/traffic-held
    sh -c 'echo $$ > /sys/fs/cgroup/traffic/cgroup.procs && exec "$0" hold 64 /tmp/traffic-held' "$T/traffic-guest" &
    pid=$!
    n=0
    while [ ! -e /tmp/traffic-held ]; do
        n=$((n + 1)); [ $n -le 240 ] || exit 24; sleep 0.5
    done
    before=$(demoted)
    "$T/traffic-guest" window open
    echo 64M > /sys/fs/cgroup/traffic/memory.reclaim
    "$T/traffic-guest" window close
    after=$(demoted)
    kill $pid; wait $pid 2>/dev/null
    printf '{"label": "%s", "what": "memory.reclaim of 64 MiB, demotion on", "pages": %s}\n' "$1" "$((after - before))" >> "$T/windows.jsonl"
}
if want memmap; then
    for mode in "fsdax -M dev" "devdax -a 2M"; do
        timeout 300 ndctl create-namespace -f -e namespace0.0 -m $mode > /dev/null || exit 20
        name=$(echo "$mode" | cut -d' ' -f1)
        rebind "rebind_$name" && rebind "rebind_$name"
    done
fi
if want demotion; then
    timeout 300 ndctl create-namespace -f -e namespace0.0 -m devdax -a 2M > /dev/null || exit 20
    dax=$(ls /sys/bus/dax/devices | head -n 1)
    timeout 300 daxctl reconfigure-device --mode=system-ram --force "$dax" > /dev/null || exit 23
    echo 1 > /sys/kernel/mm/numa/demotion_enabled
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control
    mkdir -p /sys/fs/cgroup/traffic
    demote demotion && demote demotion
fi
# kallsyms hides its addresses from root too when kptr_restrict is 2: 0 shows them
echo 0 > /proc/sys/kernel/kptr_restrict
awk '$2 ~ /^[tTwW]$/ || $4 != ""' /proc/kallsyms > "$T/kallsyms" && [ -s "$T/kallsyms" ] || exit 25
