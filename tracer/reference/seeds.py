# SPDX-License-Identifier: Apache-2.0
"""Figures from the seed patch series (../shared/reference/seeds), quoted
beside this host's measurements. Sources are named per figure."""

# zone-device-memmap-template-nt-v8.txt, cover letter: 100 GB namespaces in a
# VM on Ice Lake, average memmap_init_zone_device() time over 30 rebinds.
MEMMAP_REBIND_MS = {
    "nd_pmem (fsdax, map=dev)": {"base": 244.28, "series": 96.79, "reduction_pct": 60.4},
    "dax_pmem (devdax, align=2M)": {"base": 273.31, "series": 119.04, "reduction_pct": 56.4},
}
MEMMAP_FIRST_BIND_MS = {"nd_pmem": {"base": 1456, "series": 1272}, "dax_pmem": {"base": 1462, "series": 1354}}
MEMMAP_PHYSICAL_HOST_MS = {"nd_pmem": {"base": 179, "series": 82}, "dax_pmem": {"base": 264, "series": 113}}
MEMMAP_NAMESPACE_BYTES = 100 * 2**30
MEMMAP_DESCRIPTORS = MEMMAP_NAMESPACE_BYTES // 4096  # 26,214,400 struct pages

# zone-device-memmap-template-nt-v8.txt, 7/9 review thread: microseconds per
# 32/48/64/80/96-byte copy, destination offsets 1..7 averaged.
FIXED_SIZE_US = {
    "A": {32: 0.410, 48: 0.411, 64: 0.426, 80: 0.426, 96: 0.428},
    "B": {32: 0.962, 48: 0.956, 64: 0.923, 80: 0.998, 96: 1.001},
}

# batch-page-copy-rfc-reply.txt: GB/s on AMD EPYC 9655 (Zen 5; erms, fsrm).
COPY_TABLE_ZEN5_GBPS = {
    "movq_unrolled": {16: 0.53, 32: 1.13, 64: 2.21, 128: 4.25, 256: 8.01, 512: 14.14, 1024: 22.93, 2048: 30.36, 4096: 35.05},
    "rep_movsq": {16: 0.53, 32: 1.06, 64: 2.13, 128: 4.26, 256: 8.61, 512: 16.80, 1024: 31.70, 2048: 53.24, 4096: 80.25},
    "rep_movsb": {16: 0.55, 32: 1.09, 64: 2.18, 128: 4.37, 256: 8.61, 512: 16.80, 1024: 32.37, 2048: 56.58, 4096: 83.90},
    "memcpy": {16: 0.53, 32: 1.06, 64: 2.13, 128: 4.31, 256: 8.51, 512: 16.81, 1024: 32.02, 2048: 56.04, 4096: 76.23},
}

# nt-demotion-rfc-v2-v3.txt, cover letter: 64 GB demoted via memory.reclaim
# to one CXL memory expander: device reads N -> ~0, writes N either way.
DEMOTION_DEVICE_TRAFFIC = {"demoted_gb": 64, "reads_gb": {"base": 64, "nt": 0}, "writes_gb": {"base": 64, "nt": 64}}

# zone-device-memmap-template-nt-v8.txt, the patches' own test results (the
# same VM, 100 GB, mean of 30 rebinds, ms): after patch N, (before, after) for
# the namespace mode the patch reports; 8/9 repeats the cover letter's whole-
# series figures (6/9 and 7/9 report none; 9/9 changes only what page_ref_set
# and sanitizers see, and reports no timing).
MEMMAP_REBIND_MS_PER_PATCH = {
    4: {"fsdax": (244.28, 217.19)},
    5: {"devdax": (273.31, 244.37)},
    8: {"fsdax": (244.28, 96.79), "devdax": (273.31, 119.04)},
}
