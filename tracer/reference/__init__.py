# SPDX-License-Identifier: Apache-2.0
"""The native C reference: the same copies in user space on the same CPU, and the seed series' figures."""
