// SPDX-License-Identifier: Apache-2.0
/* Non-temporal copies with MOVNTI (x86-64). None of them drains. */
#include <string.h>
#include "nttrace_native.h"

#if defined(__x86_64__)
static inline void movnti64(void *dst, uint64_t v)
{
	__asm__ volatile("movnti %1, %0" : "=m"(*(uint64_t *)dst) : "r"(v));
}

static inline void movnti32(void *dst, uint32_t v)
{
	__asm__ volatile("movnti %1, %0" : "=m"(*(uint32_t *)dst) : "r"(v));
}

static inline uint64_t load64(const void *p)
{
	uint64_t v;
	__builtin_memcpy(&v, p, 8);
	return v;
}

static inline uint32_t load32(const void *p)
{
	uint32_t v;
	__builtin_memcpy(&v, p, 4);
	return v;
}

static inline void clwb_range(void *p, size_t len)
{
	uintptr_t line = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + len;

	for (; line < end; line += 64)
		__asm__ volatile("clwb %0" : "+m"(*(volatile char *)line));
}

/* The MOVNTI body both generic routines share: 32 then 8 bytes at a time
 * to an 8-byte aligned destination. Returns the bytes left (< 8). */
static inline size_t movnti_body(unsigned char **dp, const unsigned char **sp, size_t len)
{
	unsigned char *d = *dp;
	const unsigned char *s = *sp;

	while (len >= 32) {
		uint64_t a = load64(s), b = load64(s + 8), c = load64(s + 16), e = load64(s + 24);
		movnti64(d, a); movnti64(d + 8, b); movnti64(d + 16, c); movnti64(d + 24, e);
		d += 32; s += 32; len -= 32;
	}
	while (len >= 8) {
		movnti64(d, load64(s));
		d += 8; s += 8; len -= 8;
	}
	*dp = d;
	*sp = s;
	return len;
}
#endif

NT_EXPORT void nt_drain(void)
{
#if defined(__x86_64__)
	__asm__ volatile("sfence" ::: "memory");
#endif
}

/*
 * All-NT generic copy. Every byte of a copy of 4 bytes or more is written by
 * MOVNTI: an unaligned 8-byte MOVNTI covers the head up to the next 8-byte
 * boundary, aligned MOVNTIs cover the body, and one unaligned MOVNTI ending
 * at dst+len covers the tail; the overlapping bytes are written twice with
 * the same value. No cached store lands in a line that also receives NT
 * stores, which is what makes the mixed routine below slow at misaligned
 * destinations. Copies under 4 bytes use plain stores (no NT store exists
 * for them). Does not drain.
 */
NT_EXPORT void nt_copy_generic(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	unsigned char *d = dst;
	const unsigned char *s = src;

	if (len < 4) {
		while (len--)
			*d++ = *s++;
		return;
	}
	if (len < 8) {
		uint32_t head = load32(s), tail = load32(s + len - 4);
		movnti32(d, head);
		movnti32(d + len - 4, tail);
		return;
	}
	uint64_t tail = load64(s + len - 8);
	unsigned char *tail_dst = d + len - 8;
	size_t skew = (8 - ((uintptr_t)d & 7)) & 7;
	if (skew) {
		movnti64(d, load64(s));
		d += skew; s += skew; len -= skew;
	}
	len = movnti_body(&d, &s, len);
	if (len)
		movnti64(tail_dst, tail);
#else
	memcpy(dst, src, len);
#endif
}

/*
 * The kernel's __memcpy_flushcache() shape: a cached copy (then CLWB) of the
 * head up to 8-byte alignment, MOVNTI for the body in 32-, 8- and 4-byte
 * steps, and a cached copy (then CLWB) of the remaining bytes. Cached stores
 * and NT stores then meet in the same cache line whenever the destination is
 * misaligned; kept as the comparison point for that hazard. Does not drain.
 */
NT_EXPORT void nt_copy_mixed(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	unsigned char *d = dst;
	const unsigned char *s = src;
	int clwb = (nt_cpu_features() & NT_CPU_CLWB) != 0;

	if ((uintptr_t)d & 7) {
		size_t head = 8 - ((uintptr_t)d & 7);
		if (head > len)
			head = len;
		memcpy(d, s, head);
		if (clwb)
			clwb_range(d, head);
		d += head; s += head; len -= head;
	}
	len = movnti_body(&d, &s, len);
	while (len >= 4) {
		movnti32(d, load32(s));
		d += 4; s += 4; len -= 4;
	}
	if (len) {
		memcpy(d, s, len);
		if (clwb)
			clwb_range(d, len);
	}
#else
	memcpy(dst, src, len);
#endif
}

#if defined(__x86_64__)
/* Straight-line MOVNTI sequences, loads first so the stores issue back to back. */
#define NT_FIXED_WORDS(n)                                               \
	do {                                                            \
		uint64_t w[n];                                          \
		for (int i = 0; i < (n); i++)                           \
			w[i] = load64((const char *)src + 8 * i);       \
		for (int i = 0; i < (n); i++)                           \
			movnti64((char *)dst + 8 * i, w[i]);            \
	} while (0)

static inline int fixed_copy(void *dst, const void *src, size_t len)
{
	switch (len) {
	case 4: movnti32(dst, load32(src)); return 0;
	case 8: NT_FIXED_WORDS(1); return 0;
	case 16: NT_FIXED_WORDS(2); return 0;
	case 32: NT_FIXED_WORDS(4); return 0;
	case 48: NT_FIXED_WORDS(6); return 0;
	case 64: NT_FIXED_WORDS(8); return 0;
	case 80: NT_FIXED_WORDS(10); return 0;
	case 96: NT_FIXED_WORDS(12); return 0;
	}
	return -1;
}
#endif

NT_EXPORT int nt_copy_fixed_a(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	return fixed_copy(dst, src, len);
#else
	memcpy(dst, src, len);
	return 0;
#endif
}

NT_EXPORT int nt_copy_fixed_b(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	if (len != 4 && len != 8 && len != 16 && len != 32 && len != 48 && len != 64 && len != 80 && len != 96)
		return -1;
	/* The 4/8/16-byte cases stay inline in both variants, as in the kernel. */
	if (len >= 32 && ((uintptr_t)dst & 7)) {
		nt_copy_mixed(dst, src, len);
		return 0;
	}
	return fixed_copy(dst, src, len);
#else
	memcpy(dst, src, len);
	return 0;
#endif
}
