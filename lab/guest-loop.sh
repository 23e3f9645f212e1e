#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The A/B loop guest's driver unit (nttrace-lab-loop.service on the loop
# disk), once the machine is up and after the loop's own unit: at the first
# boot, nttrace installed from the host's wheel (as a user installs it) with
# what the loop's report needs beyond it (ab_loop.GUEST_WHEELS); then, at
# every boot that gets here, guest_loop.py: the loop's start at the first,
# its end at the last. Exit codes of the install: guest-install.sh's, 15:
# the report's wheels did not install.
set -u
R=/results
SETUP=/var/lib/nttrace-lab
give_up() {   # the loop cannot start: say why, and end the QEMU run
    echo "$1" > "$R/guest-run.rc"
    sync
    systemctl --no-block poweroff
    exit 0
}
if [ ! -e "$SETUP/installed" ]; then
    {
        echo "nttrace-lab: A/B loop guest, first boot: kernel $(uname -r) $(uname -v)"
        sh /nttrace/lab/guest-install.sh "$R" || exit $?
        timeout 900 /opt/venv/bin/python -m pip install -q --no-index --no-deps --no-compile \
            /nttrace/ab-loop/wheels/*.whl || exit 15
        ln -sf /opt/venv/bin/nttrace /usr/local/bin/nttrace
        mkdir -p "$SETUP" && date +%s > "$SETUP/installed" && sync
    } >> "$R/guest-run.log" 2>&1 || give_up $?
fi
exec /opt/venv/bin/python /nttrace/lab/guest_loop.py "$R" >> "$R/guest-run.log" 2>&1
