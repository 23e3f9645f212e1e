"""`nttrace bench`: the benchmarks whose figures BENCHMARKS.md keeps."""
