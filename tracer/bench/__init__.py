# SPDX-License-Identifier: Apache-2.0
"""`nttrace bench`: the benchmarks whose figures BENCHMARKS.md keeps."""
