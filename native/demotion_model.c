// SPDX-License-Identifier: Apache-2.0
/* Model of the demotion copy path: N cold pages copied from a source region
 * to a destination region (optionally bound to a NUMA node), page by page as
 * folio_mc_copy()/folio_mc_copy_nt() do, drained per page or once per folio
 * (the RFC v3 wmb() at the end of folio_mc_copy_nt()). */
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "nttrace_native.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

NT_EXPORT int nt_demote_copy(void *dst, const void *src, size_t npages, int method,
			     size_t pages_per_folio, int drain_policy)
{
	char *d = dst;
	const char *s = src;

	if (!nt_page_method_supported(method) || pages_per_folio == 0)
		return -1;
	for (size_t i = 0; i < npages; i++) {
		nt_copy_page(method, d + i * 4096, s + i * 4096);
		if (drain_policy == NT_DRAIN_PER_PAGE ||
		    (drain_policy == NT_DRAIN_PER_FOLIO && (i + 1) % pages_per_folio == 0))
			nt_drain();
	}
	if (drain_policy == NT_DRAIN_PER_FOLIO && npages % pages_per_folio)
		nt_drain();
	return 0;
}

/* mbind(MPOL_BIND) of [addr, addr+len) to one node; 0 or -errno. */
NT_EXPORT int nt_mbind_node(void *addr, size_t len, int node)
{
	unsigned long mask[16] = { 0 };

	if (node < 0 || node >= 16 * 64)
		return -EINVAL;
	mask[node / 64] = 1ul << (node % 64);
	if (syscall(SYS_mbind, addr, len, 2 /* MPOL_BIND */, mask, 16 * 64 + 1, 2 /* MPOL_MF_MOVE */))
		return -errno;
	return 0;
}

#if defined(__x86_64__)
__attribute__((target("avx512f")))
static void fill_avx512(char *d, size_t len, uint64_t pattern)
{
	__m512i v = _mm512_set1_epi64((long long)pattern);

	for (size_t off = 0; off + 64 <= len; off += 64)
		_mm512_stream_si512((__m512i *)(d + off), v);
}

static void fill_movnti(char *d, size_t len, uint64_t pattern)
{
	for (size_t off = 0; off + 8 <= len; off += 8)
		__asm__ volatile("movnti %1, %0" : "=m"(*(uint64_t *)(d + off)) : "r"(pattern));
}
#endif

/* Pure NT writes over [dst, dst+len), the widest streaming store the CPU
 * has; the write bandwidth limit for an array of descriptors. dst 64-byte
 * aligned, len a multiple of 64. Drains. */
NT_EXPORT void nt_stream_fill(void *dst, size_t len, uint64_t pattern)
{
#if defined(__x86_64__)
	if (nt_cpu_features() & NT_CPU_AVX512F)
		fill_avx512(dst, len, pattern);
	else
		fill_movnti(dst, len, pattern);
	nt_drain();
#else
	memset(dst, (int)pattern, len);
#endif
}

/* The same writes with 8-byte MOVNTI only (the x86 memcpy_nontemporal()
 * backend's store): the write limit of the series' own instruction. Drains. */
NT_EXPORT void nt_movnti_fill(void *dst, size_t len, uint64_t pattern)
{
#if defined(__x86_64__)
	fill_movnti(dst, len, pattern);
	nt_drain();
#else
	memset(dst, (int)pattern, len);
#endif
}
