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

struct nttrace_hist_key {
	u32 a;      /* probe-specific label, e.g. migrate mode      */
	s32 b;      /* probe-specific label, e.g. migrate reason    */
	u64 slot;   /* log2(ns) bucket                              */
};

#endif
