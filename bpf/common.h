/*
 * Shared by nttrace's BPF programs. Field offsets of tracepoint records and
 * kernel structs are never written here: the loader defines them from the
 * running kernel's tracepoint format files and BTF, as NTTRACE_* macros.
 */
#ifndef NTTRACE_COMMON_H
#define NTTRACE_COMMON_H

#include <uapi/linux/ptrace.h>

/* Read a kernel struct member at a BTF-derived offset. */
#define KREAD(ptr, type, off) ({ type __v = 0; bpf_probe_read_kernel(&__v, sizeof(__v), (char *)(ptr) + (off)); __v; })

/* Read a tracepoint record's field at its offset from the format file. */
#define TP_FIELD(ctx, type, off) (*(type *)((char *)(ctx) + (off)))

/*
 * Latency statistics: a stats struct with sum_ns, max_ns and
 * hist[NTTRACE_SLOTS] counted by log2(ns) slot (bpf_log2l; slot s holds
 * [2**s, 2**(s+1))), as nttrace.probes.histogram reads them.
 */
#define NTTRACE_SLOTS 64
#define NTTRACE_LATENCY(s, delta) do {                                   \
		(s)->sum_ns += (delta);                                  \
		if ((delta) > (s)->max_ns)                               \
			(s)->max_ns = (delta);                           \
		(s)->hist[bpf_log2l(delta) & (NTTRACE_SLOTS - 1)]++;     \
	} while (0)

struct nttrace_hist_key {
	u32 a;      /* probe-specific label, e.g. migrate mode      */
	s32 b;      /* probe-specific label, e.g. migrate reason    */
	u64 slot;   /* log2(ns) bucket                              */
};

#endif
