#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab guest instead of the scenarios when the command line
# says nttrace.traffic (guest-run.sh): a devdax namespace on the NVDIMM, then
# traffic-guest (built on the host, in $1/traffic/) runs its windows on it.
# What the guest knows of the device's place goes to $1/traffic/device.json:
# the region's and the dax device's physical ranges (the mapping test sets the
# plugin's RAMBlock offsets against them). Exit 20: no namespace; 21: no dax device.
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
timeout 900 "$T/traffic-guest" "/dev/$dax" "$T/guest.json"
