#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab guest instead of the scenarios when the command line
# says nttrace.traffic (guest-run.sh): a devdax namespace on the NVDIMM, then
# traffic-guest (built on the host, in $1/traffic/) runs its windows on it.
# What the guest knows of the device's place goes to $1/traffic/device.json:
# the region's and the dax device's physical ranges (the mapping test sets the
# plugin's RAMBlock offsets against them). With nttrace.traffic=memmap on the
# command line, then: the namespace rebound (disable, enable) in a window of
# its own, twice as fsdax (-M dev) and twice as devdax (-a 2M), each window's
# label and the kernel's own count of the pages it initialised in
# $1/traffic/windows.jsonl. Exit 20: no namespace; 21: no dax device; 22: a rebind failed.
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
case "$(cat /proc/cmdline)" in *nttrace.traffic=memmap*) ;; *) exit 0 ;; esac
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
for mode in "fsdax -M dev" "devdax -a 2M"; do
    timeout 300 ndctl create-namespace -f -e namespace0.0 -m $mode > /dev/null || exit 20
    name=$(echo "$mode" | cut -d' ' -f1)
    rebind "rebind_$name" && rebind "rebind_$name"
done
