# SPDX-License-Identifier: Apache-2.0
"""Work that makes the kernel run the traced paths: compaction, memcg reclaim, demotion, namespace rebinds."""
