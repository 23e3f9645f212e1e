# SPDX-License-Identifier: Apache-2.0
"""Hardware, software and uncore counters through the kernel's perf events."""
