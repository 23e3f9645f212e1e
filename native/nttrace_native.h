/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nttrace native reference: the copies the kernel's NT paths perform,
 * done in user space on the same CPU, so the kernel can be compared with
 * the hardware's own limits.
 *
 * Drain convention: every nt_* store routine leaves its MOVNTI / streaming
 * stores in the write-combining buffers (it does NOT drain) unless its
 * comment says otherwise. Callers drain with nt_drain() (SFENCE) before the
 * data is published, exactly as the kernel's callers issue wmb().
 */
#ifndef NTTRACE_NATIVE_H
#define NTTRACE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#define NT_EXPORT __attribute__((visibility("default"), noinline, used))

/* cpu_features.c */
enum nt_cpu_feature {
	NT_CPU_X86 = 1 << 0,
	NT_CPU_SSE2 = 1 << 1,
	NT_CPU_AVX2 = 1 << 2,
	NT_CPU_AVX512F = 1 << 3,
	NT_CPU_ERMS = 1 << 4,
	NT_CPU_FSRM = 1 << 5,
	NT_CPU_CLWB = 1 << 6,
	NT_CPU_CLFLUSHOPT = 1 << 7,
};
unsigned nt_cpu_features(void);
int nt_hypervisor_signature(char out[13]);
int nt_have_nt_backend(void);
uint64_t nt_now_ns(void);

/* Copy primitives share one signature so tables and tests can index them. */
typedef void (*nt_copy_fn)(void *dst, const void *src, size_t len);

enum nt_primitive {
	NT_PRIM_MEMCPY,        /* libc memcpy                                  */
	NT_PRIM_REP_MOVSB,     /* rep movsb                                    */
	NT_PRIM_REP_MOVSQ,     /* rep movsq + byte tail                        */
	NT_PRIM_MOVQ_UNROLLED, /* 8 x 8-byte loads/stores per iteration        */
	NT_PRIM_NT_GENERIC,    /* all-NT: overlapping unaligned MOVNTI head/tail, no drain */
	NT_PRIM_NT_MIXED,      /* kernel-style: cached+CLWB head/tail, MOVNTI body, no drain */
	NT_PRIM_COUNT
};
nt_copy_fn nt_primitive_fn(int prim);
const char *nt_primitive_name(int prim);

/* cached_copy.c */
void nt_copy_memcpy(void *dst, const void *src, size_t len);
void nt_copy_rep_movsb(void *dst, const void *src, size_t len);
void nt_copy_rep_movsq(void *dst, const void *src, size_t len);
void nt_copy_movq_unrolled(void *dst, const void *src, size_t len);

/* nt_copy.c */
void nt_drain(void);
void nt_copy_generic(void *dst, const void *src, size_t len);
void nt_copy_mixed(void *dst, const void *src, size_t len);
/* Fixed sizes 4,8,16,32,48,64,80,96. Variant A: straight-line MOVNTI, no
 * alignment check. Variant B: unaligned destinations go to nt_copy_mixed
 * (the kernel's generic __memcpy_flushcache() shape). Neither drains.
 * Return 0, or -1 for an unsupported size. */
int nt_copy_fixed_a(void *dst, const void *src, size_t len);
int nt_copy_fixed_b(void *dst, const void *src, size_t len);

/* page_copy.c: 4 KiB page copies (dst and src page aligned), no drain. */
enum nt_page_method {
	NT_PAGE_MEMCPY,
	NT_PAGE_REP_MOVSB,
	NT_PAGE_MOVNTI_PREFETCHNTA, /* copy_mc_page_nt() shape: prefetchnta + 8 x MOVNTI per line */
	NT_PAGE_AVX2_STREAM,
	NT_PAGE_AVX512_STREAM,
	NT_PAGE_COUNT
};
int nt_page_method_supported(int method);
const char *nt_page_method_name(int method);
int nt_copy_page(int method, void *dst, const void *src);

/* demotion_model.c */
enum nt_drain_policy { NT_DRAIN_NONE, NT_DRAIN_PER_PAGE, NT_DRAIN_PER_FOLIO };
int nt_demote_copy(void *dst, const void *src, size_t npages, int method,
		   size_t pages_per_folio, int drain_policy);
int nt_mbind_node(void *addr, size_t len, int node);
void nt_stream_fill(void *dst, size_t len, uint64_t pattern); /* pure NT writes; drains */
void nt_movnti_fill(void *dst, size_t len, uint64_t pattern);  /* the same with MOVNTI only; drains */

/* cache_flush.c: write back and evict [p, p+len) from every cache level
 * (CLFLUSHOPT where the CPU has it, else CLFLUSH), then a fence. Returns
 * the instruction used (enum nt_flush_insn). */
enum nt_flush_insn { NT_FLUSH_NONE, NT_FLUSH_CLFLUSHOPT, NT_FLUSH_CLFLUSH };
int nt_flush_range(void *p, size_t len);

/* memmap_model.c */
enum nt_memmap_method {
	NT_MEMMAP_SLOW,            /* per-field stores, kernel order                 */
	NT_MEMMAP_TEMPLATE_CACHED, /* template in registers, cached stores           */
	NT_MEMMAP_TEMPLATE_NT,     /* template in registers, MOVNTI, drained at end  */
	NT_MEMMAP_TEMPLATE_REFRESH_COPY, /* hazard: refresh template in memory, memcpy it */
	NT_MEMMAP_TEMPLATE_MOVNTI, /* template in registers, 8-byte MOVNTI only (the series' stores), drained */
	NT_MEMMAP_COUNT
};
enum nt_pgmap_type { /* values as the kernel's enum memory_type */
	NT_PGMAP_PRIVATE = 1, NT_PGMAP_COHERENT = 2, NT_PGMAP_FS_DAX = 3,
	NT_PGMAP_GENERIC = 4, NT_PGMAP_PCI_P2PDMA = 5,
};
struct nt_memmap_args {
	void *descs;            /* nr * desc_size bytes                     */
	uint64_t nr;            /* descriptors (PFNs)                       */
	uint32_t desc_size;     /* 64, 80 or 96                             */
	uint32_t pgmap_type;    /* enum nt_pgmap_type                       */
	uint32_t order;         /* vmemmap_shift: 0, or compound order      */
	uint32_t method;        /* enum nt_memmap_method                    */
	uint64_t start_pfn;
	uint32_t nid;
	uint32_t zone_idx;
	uint64_t pgmap;         /* the value stored in page->pgmap          */
	uint64_t elapsed_ns;    /* out: the function's own clock            */
};
/* The uprobe target: one call initialises args->nr descriptors. */
int nttrace_memmap_init_zone_device_model(struct nt_memmap_args *args);
uint32_t nt_memmap_refcount_stores(const struct nt_memmap_args *args);

/* selftest.c-style checks kept in the library so they run at C speed. */
struct nt_selftest_result { uint64_t cases; uint64_t failures; int64_t first_size, first_src_off, first_dst_off; };
/* Source offsets 0..src_offsets-1 (at most 64), every destination offset 0..63. */
int nt_selftest_copy(int prim, size_t exhaustive_max, size_t max_size, size_t sample_stride,
		     size_t src_offsets, struct nt_selftest_result *out);
int nt_selftest_fixed(int variant, struct nt_selftest_result *out);

/* bench loops */
uint64_t nt_bench_copy_ns(int prim, void *dst, const void *src, size_t len, size_t span, uint64_t iters);
uint64_t nt_bench_fixed_ns(int variant, void *dst, const void *src, size_t len, uint64_t iters);

#endif
