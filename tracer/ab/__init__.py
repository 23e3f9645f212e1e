# SPDX-License-Identifier: Apache-2.0
"""The A/B: how a change to the kernel is tested, base against patched, run
by run (docs/ab.md).

The comparison of two sides of `nttrace validate --json` runs and its
output (`nttrace validate --baseline ... --current ...`, `nttrace ab
report`, the lab's A/B):
    compare     the runs read and checked, a row per check and figure
    statistics  the rules: the run as the unit, the exact rank test and its
                interval, the figures' roles, the smallest detectable change
    text        the header, the table and the legend, as text and markdown
    html        the page, with every boot's samples plotted
    formats     the whole output in each format, from those

`nttrace ab`, the unattended loop that takes the runs on the user's own
machine (docs/ab-loop.md): the two kernels booted in turn (a seeded random
order within each round), each boot running the configured validate checks
from a one-shot systemd unit, the runs ending in the report above
(command, start, preflight, kernels, bootloader, boot, reset, schedule,
unit, step, loop, store, status, stop, report).

Importing nttrace.ab loads none of these: each is imported where it is used.
"""
