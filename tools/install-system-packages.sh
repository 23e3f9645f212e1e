#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages nttrace needs. Idempotent: does nothing (and
# does not touch the network) when every package is already installed.
set -euo pipefail

PACKAGES=(
    python3-bpfcc      # bcc, loaded as the `bcc` module
    bpfcc-tools        # reference tools; bpftool comes separately
    linux-perf         # the `perf` Python module
    bpftool            # `bpftool prog show`, used by the tests to check clean detach
    gcc make           # the native reference library
    python3-dev python3-venv python3-setuptools python3-pip
    linux-headers-amd64  # headers bcc compiles against when none match the running kernel
    prometheus         # prometheus and promtool, for the exporter's end-to-end tests
    prometheus-node-exporter   # its textfile collector carries `validate --textfile-dir` (tested)
    python3-yaml python3-bcrypt   # the daemon's web config (exporter toolkit format, bcrypt users)
    python3-scipy python3-matplotlib   # the A/B's statistics and its HTML plots (never the daemon's)
    chromium-headless-shell   # a real browser for the HTML A/B report's test
    systemd            # systemd-analyze verify, for the shipped unit
    ndctl daxctl       # pmem namespaces (used where /sys/bus/nd exists, and in the lab guest)
    util-linux         # setpriv, for the unprivileged-run tests
    iproute2
    openssl curl       # test certificates, manual scrapes
    qemu-system-x86 qemu-utils debootstrap   # the lab guest (lab/)
    flex bison bc libelf-dev libssl-dev dwarves cpio xz-utils patch kmod   # the lab's kernels (lab/kernel_build.py)
    rsync              # the lab's kernels' packages (make bindeb-pkg's linux-libc-dev: headers_install)
    debhelper dh-python pybuild-plugin-pyproject python3-wheel dpkg-dev lintian   # make deb (debian/control's Build-Depends) and its lintian check
    git python3-pytest python3-prometheus-client procps   # make deb's build-time tests (Build-Depends <!nocheck>)
    pbuilder           # the package's clean chroot build (python3 -m lab.deb_chroot)
)
# Also try the headers matching the running kernel; absent for custom kernels.
MATCHING_HEADERS="linux-headers-$(uname -r)"

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages: all present"
    exit 0
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
if apt-cache show "$MATCHING_HEADERS" >/dev/null 2>&1; then
    apt-get install -y -q --no-install-recommends "$MATCHING_HEADERS"
fi
