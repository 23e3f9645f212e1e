# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab`: the base/patched A/B on the user's own machine, unattended.
The two kernels are booted in turn (a seeded random order within each round),
each boot runs the configured validate checks from a one-shot systemd unit,
and the runs end in validate's own A/B report (docs/ab-loop.md)."""
