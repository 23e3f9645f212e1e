// SPDX-License-Identifier: Apache-2.0
/* Cache eviction for the cold-cache measurements where the last-level cache
 * is larger than the buffers a bounded plan may hold: every line of a range
 * is written back (if dirty) and invalidated in every cache level, so the
 * next access goes to memory, as it would after a working set several times
 * the LLC had passed through. */
#include "nttrace_native.h"

NT_EXPORT int nt_flush_range(void *p, size_t len)
{
#if defined(__x86_64__)
	uintptr_t line = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + len;

	if (nt_cpu_features() & NT_CPU_CLFLUSHOPT) {
		for (; line < end; line += 64)
			__asm__ volatile("clflushopt %0" : "+m"(*(volatile char *)line));
		__asm__ volatile("mfence" ::: "memory");
		return NT_FLUSH_CLFLUSHOPT;
	}
	for (; line < end; line += 64)
		__asm__ volatile("clflush %0" : "+m"(*(volatile char *)line));
	__asm__ volatile("mfence" ::: "memory");
	return NT_FLUSH_CLFLUSH;
#else
	(void)p;
	(void)len;
	return NT_FLUSH_NONE;
#endif
}
