// SPDX-License-Identifier: Apache-2.0
/* Cached copy primitives, as in the batch-page-copy table. */
#include <string.h>
#include "nttrace_native.h"

NT_EXPORT void nt_copy_memcpy(void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
}

NT_EXPORT void nt_copy_rep_movsb(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(len) : : "memory");
#else
	memcpy(dst, src, len);
#endif
}

NT_EXPORT void nt_copy_rep_movsq(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	size_t quads = len >> 3, tail = len & 7;

	__asm__ volatile("rep movsq" : "+D"(dst), "+S"(src), "+c"(quads) : : "memory");
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(tail) : : "memory");
#else
	memcpy(dst, src, len);
#endif
}

/* The kernel's memcpy_orig shape: 4 x 8-byte moves per 32 bytes, unrolled
 * twice, then 8-byte and byte tails. Loads and stores through memcpy of a
 * uint64_t so unaligned pointers stay well defined. */
__attribute__((optimize("no-tree-vectorize")))
NT_EXPORT void nt_copy_movq_unrolled(void *dst, const void *src, size_t len)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	uint64_t r0, r1, r2, r3, r4, r5, r6, r7;

	while (len >= 64) {
		__builtin_memcpy(&r0, s + 0, 8); __builtin_memcpy(&r1, s + 8, 8);
		__builtin_memcpy(&r2, s + 16, 8); __builtin_memcpy(&r3, s + 24, 8);
		__builtin_memcpy(&r4, s + 32, 8); __builtin_memcpy(&r5, s + 40, 8);
		__builtin_memcpy(&r6, s + 48, 8); __builtin_memcpy(&r7, s + 56, 8);
		__builtin_memcpy(d + 0, &r0, 8); __builtin_memcpy(d + 8, &r1, 8);
		__builtin_memcpy(d + 16, &r2, 8); __builtin_memcpy(d + 24, &r3, 8);
		__builtin_memcpy(d + 32, &r4, 8); __builtin_memcpy(d + 40, &r5, 8);
		__builtin_memcpy(d + 48, &r6, 8); __builtin_memcpy(d + 56, &r7, 8);
		s += 64; d += 64; len -= 64;
	}
	while (len >= 8) {
		__builtin_memcpy(&r0, s, 8);
		__builtin_memcpy(d, &r0, 8);
		s += 8; d += 8; len -= 8;
	}
	while (len--)
		*d++ = *s++;
}
