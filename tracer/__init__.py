# SPDX-License-Identifier: Apache-2.0
"""nttrace: trace and validate the kernel's non-temporal-store memory paths."""

__version__ = "0.1.0"   # the last release, the one place a version is written (tools/version.sh; setup.cfg reads it)
