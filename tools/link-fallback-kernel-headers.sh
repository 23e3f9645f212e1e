#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# FALLBACK FOR HOSTS WITHOUT MATCHING KERNEL HEADERS.
#
# bcc compiles BPF programs at run time against /lib/modules/$(uname -r)/build.
# When the distribution has no headers for the running kernel (custom or cloud
# kernels), this step points that path at the nearest Debian headers tree
# (linux-headers-amd64: the -amd64 tree for `build`, the -common tree for
# `source`). nttrace's programs only use tracepoint and uprobe contexts and
# take every kernel struct offset and enum value from the running kernel's BTF
# and tracepoint format files, so a near-miss header tree is sufficient for
# them. nttrace itself never does this: it is a host setup decision.
set -euo pipefail
release=$(uname -r)
moddir=/lib/modules/$release
if [ -e "$moddir/build/include" ]; then
    echo "kernel headers: $moddir/build present"
    exit 0
fi
amd64=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$amd64" ] || [ -z "$common" ]; then
    echo "kernel headers: no headers for $release and no linux-headers-amd64 tree under /usr/src" >&2
    exit 1
fi
echo "kernel headers: NO HEADERS MATCH $release; FALLBACK: linking $moddir/build -> $amd64, source -> $common"
mkdir -p "$moddir"
ln -sfn "$amd64" "$moddir/build"
ln -sfn "$common" "$moddir/source"
