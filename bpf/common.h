/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
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
 * Latency statistics, the one histogram layout of every nttrace program: a
 * row of a stats map (a struct) with sum_ns, max_ns and hist[NTTRACE_SLOTS]
 * counted by log2(ns) slot (bpf_log2l; slot s holds [2**s, 2**(s+1))),
 * beside the row's own counters, so one lookup serves both. What user space
 * reads (nttrace.probe_framework.histogram.latency_stats) is the same for every probe.
 * NTTRACE_LATENCY counts into a per-CPU row; NTTRACE_LATENCY_SHARED into a
 * row every CPU writes (a hash map's), with atomic adds (the maximum, a
 * plain store, may lose a race between two CPUs).
 */
#define NTTRACE_SLOTS 64
#define NTTRACE_LATENCY(s, delta) do {                                   \
		(s)->sum_ns += (delta);                                  \
		if ((delta) > (s)->max_ns)                               \
			(s)->max_ns = (delta);                           \
		(s)->hist[bpf_log2l(delta) & (NTTRACE_SLOTS - 1)]++;     \
	} while (0)
#define NTTRACE_LATENCY_SHARED(s, delta) do {                                              \
		__sync_fetch_and_add(&(s)->sum_ns, (delta));                               \
		if ((delta) > (s)->max_ns)                                                 \
			(s)->max_ns = (delta);                                             \
		__sync_fetch_and_add(&(s)->hist[bpf_log2l(delta) & (NTTRACE_SLOTS - 1)], 1); \
	} while (0)

#endif
