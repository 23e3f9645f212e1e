/*
 * Reference programs for `nttrace bench probes`, attached to the same
 * tracepoints as the probe being measured: what an empty program costs, and
 * one that only reads the clock (every latency probe reads it twice per
 * call). They put the probes' per-event figures in proportion on hosts
 * where the helper calls themselves are slow (e.g. a VM's clocksource).
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
