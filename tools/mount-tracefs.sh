#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mounts tracefs at /sys/kernel/tracing when the host has not done so.
# bcc attaches tracepoints and uprobes through it.
set -euo pipefail
if [ -d /sys/kernel/tracing/events ]; then
    echo "tracefs: mounted at /sys/kernel/tracing"
    exit 0
fi
echo "tracefs: not mounted; mounting at /sys/kernel/tracing"
mount -t tracefs nodev /sys/kernel/tracing
