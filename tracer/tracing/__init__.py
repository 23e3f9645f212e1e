# SPDX-License-Identifier: Apache-2.0
"""The Tracer: attaches the selected probes (or adopts what the daemon's
loader handed over), snapshots them, records and replays their maps, and
detaches on every exit, including a signal that arrives inside a C call
(stop_guard)."""
