// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Reference programs for `nttrace bench probes`, attached (each alone, in
 * turn with the probe) to the tracepoints the probe uses: what an empty
 * program costs, and one that only reads the clock. A latency probe reads
 * the clock on every event, so the clock-only program is its floor; the
 * ratio to it carries across hosts where helper calls are slow (a VM's
 * clocksource, return-thunk mitigations) or the events arrive cache-cold.
 */
BPF_ARRAY(nttrace_baseline_sink, u64, 1);

int nttrace_bench_empty(void *ctx)
{
	return 0;
}

int nttrace_bench_ktime(void *ctx)
{
	int zero = 0;
	u64 *v = nttrace_baseline_sink.lookup(&zero);

	if (v)
		*v = bpf_ktime_get_ns();
	return 0;
}
