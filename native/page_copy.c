// SPDX-License-Identifier: Apache-2.0
/* 4 KiB page copies. dst and src are page aligned; none of them drains. */
#include <string.h>
#include "nttrace_native.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define PAGE 4096

static const char *const page_method_names[NT_PAGE_COUNT] = {
	"memcpy", "rep_movsb", "movnti_prefetchnta", "avx2_stream", "avx512_stream",
};

NT_EXPORT const char *nt_page_method_name(int method)
{
	return (method >= 0 && method < NT_PAGE_COUNT) ? page_method_names[method] : "?";
}

NT_EXPORT int nt_page_method_supported(int method)
{
	unsigned f = nt_cpu_features();

	switch (method) {
	case NT_PAGE_MEMCPY: return 1;
	case NT_PAGE_REP_MOVSB: return (f & NT_CPU_X86) != 0;
	case NT_PAGE_MOVNTI_PREFETCHNTA: return (f & NT_CPU_SSE2) != 0;
	case NT_PAGE_AVX2_STREAM: return (f & NT_CPU_AVX2) != 0;
	case NT_PAGE_AVX512_STREAM: return (f & NT_CPU_AVX512F) != 0;
	}
	return 0;
}

#if defined(__x86_64__)
/* The copy_mc_page_nt() shape from the NT demotion RFC v3: per 64-byte line,
 * eight 8-byte loads, prefetchnta five lines ahead, eight MOVNTIs. */
static void page_movnti_prefetchnta(void *dst, const void *src)
{
	for (size_t off = 0; off < PAGE; off += 64) {
		const char *s = (const char *)src + off;
		char *d = (char *)dst + off;
		uint64_t r0, r1, r2, r3, r4, r5, r6, r7;

		__asm__ volatile(
			"movq 0(%[s]), %[r0]\n\tmovq 8(%[s]), %[r1]\n\t"
			"movq 16(%[s]), %[r2]\n\tmovq 24(%[s]), %[r3]\n\t"
			"movq 32(%[s]), %[r4]\n\tmovq 40(%[s]), %[r5]\n\t"
			"movq 48(%[s]), %[r6]\n\tmovq 56(%[s]), %[r7]\n\t"
			"prefetchnta 320(%[s])\n\t"
			"movnti %[r0], 0(%[d])\n\tmovnti %[r1], 8(%[d])\n\t"
			"movnti %[r2], 16(%[d])\n\tmovnti %[r3], 24(%[d])\n\t"
			"movnti %[r4], 32(%[d])\n\tmovnti %[r5], 40(%[d])\n\t"
			"movnti %[r6], 48(%[d])\n\tmovnti %[r7], 56(%[d])\n\t"
			: [r0] "=&r"(r0), [r1] "=&r"(r1), [r2] "=&r"(r2), [r3] "=&r"(r3),
			  [r4] "=&r"(r4), [r5] "=&r"(r5), [r6] "=&r"(r6), [r7] "=&r"(r7)
			: [s] "r"(s), [d] "r"(d)
			: "memory");
	}
}

__attribute__((target("avx2")))
static void page_avx2_stream(void *dst, const void *src)
{
	for (size_t off = 0; off < PAGE; off += 128) {
		const __m256i *s = (const __m256i *)((const char *)src + off);
		__m256i *d = (__m256i *)((char *)dst + off);
		__m256i a = _mm256_load_si256(s), b = _mm256_load_si256(s + 1);
		__m256i c = _mm256_load_si256(s + 2), e = _mm256_load_si256(s + 3);
		_mm256_stream_si256(d, a); _mm256_stream_si256(d + 1, b);
		_mm256_stream_si256(d + 2, c); _mm256_stream_si256(d + 3, e);
	}
}

__attribute__((target("avx512f")))
static void page_avx512_stream(void *dst, const void *src)
{
	for (size_t off = 0; off < PAGE; off += 256) {
		const __m512i *s = (const __m512i *)((const char *)src + off);
		__m512i *d = (__m512i *)((char *)dst + off);
		__m512i a = _mm512_load_si512(s), b = _mm512_load_si512(s + 1);
		__m512i c = _mm512_load_si512(s + 2), e = _mm512_load_si512(s + 3);
		_mm512_stream_si512(d, a); _mm512_stream_si512(d + 1, b);
		_mm512_stream_si512(d + 2, c); _mm512_stream_si512(d + 3, e);
	}
}
#endif

NT_EXPORT int nt_copy_page(int method, void *dst, const void *src)
{
	if (!nt_page_method_supported(method))
		return -1;
	switch (method) {
	case NT_PAGE_MEMCPY: memcpy(dst, src, PAGE); return 0;
	case NT_PAGE_REP_MOVSB: nt_copy_rep_movsb(dst, src, PAGE); return 0;
#if defined(__x86_64__)
	case NT_PAGE_MOVNTI_PREFETCHNTA: page_movnti_prefetchnta(dst, src); return 0;
	case NT_PAGE_AVX2_STREAM: page_avx2_stream(dst, src); return 0;
	case NT_PAGE_AVX512_STREAM: page_avx512_stream(dst, src); return 0;
#endif
	}
	return -1;
}
