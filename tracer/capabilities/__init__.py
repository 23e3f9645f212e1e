# SPDX-License-Identifier: Apache-2.0
"""What this kernel and host let nttrace attach and count, found by trying
each thing once (report): the facts `validate --list`, `trace`, the daemon's
status and the tests' capability marks read."""
