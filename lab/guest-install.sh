#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab guest (from guest-run.sh and guest-systemd.sh): installs
# the nttrace wheel the host built ($1/wheel) into /opt/venv, as a user would,
# and says how long that took. The venv gets no pip of its own: ensurepip
# would install one (a whole pip run, tens of seconds under TCG) only for it
# to install one wheel; Debian's pip, seen through --system-site-packages,
# installs into the venv instead (inside a venv, Debian's externally-managed
# marker does not apply). Exit 10: no venv; 11: the wheel did not install.
set -u
t0=$(date +%s)
timeout 300 python3 -m venv --without-pip --system-site-packages /opt/venv || exit 10
t1=$(date +%s)
timeout 300 /opt/venv/bin/python -m pip install -q --no-index --no-deps "$1"/wheel/nttrace-*.whl || exit 11
t2=$(date +%s)
echo "setup: venv in $((t1 - t0))s, wheel installed in $((t2 - t1))s"
