# SPDX-License-Identifier: Apache-2.0
"""The lab's memory-traffic model: a QEMU TCG plugin (traffic.c) that models
the LLC and the device's traffic, its build, and its driver (README.md)."""
