// SPDX-License-Identifier: Apache-2.0
#include <string.h>
#include <time.h>
#include "nttrace_native.h"
#if defined(__x86_64__)
#include <cpuid.h>
#endif

NT_EXPORT unsigned nt_cpu_features(void)
{
	static unsigned cached = ~0u;
	unsigned f = 0;

	if (cached != ~0u)
		return cached;
#if defined(__x86_64__)
	unsigned a, b, c, d;

	f |= NT_CPU_X86;
	if (__get_cpuid(1, &a, &b, &c, &d) && (d & bit_SSE2))
		f |= NT_CPU_SSE2;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
		if (b & bit_AVX2)
			f |= NT_CPU_AVX2;
		if (b & bit_AVX512F)
			f |= NT_CPU_AVX512F;
		if (b & (1u << 9))
			f |= NT_CPU_ERMS;
		if (d & (1u << 4))
			f |= NT_CPU_FSRM;
		if (b & (1u << 24))
			f |= NT_CPU_CLWB;
		if (b & (1u << 23))
			f |= NT_CPU_CLFLUSHOPT;
	}
	/* AVX state must also be enabled by the OS (XCR0). */
	if (f & (NT_CPU_AVX2 | NT_CPU_AVX512F)) {
		unsigned lo, hi;
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		if ((lo & 0x6) != 0x6)
			f &= ~(NT_CPU_AVX2 | NT_CPU_AVX512F);
		if ((lo & 0xe6) != 0xe6)
			f &= ~NT_CPU_AVX512F;
	}
#endif
	cached = f;
	return f;
}

/*
 * The hypervisor's CPUID signature (leaf 0x40000000, EBX ECX EDX): 12 bytes
 * into out, NUL-terminated. 0 when the CPU reports no hypervisor (CPUID.1
 * ECX bit 31 clear), -1 off x86.
 */
NT_EXPORT int nt_hypervisor_signature(char out[13])
{
	out[0] = 0;
#if defined(__x86_64__)
	unsigned a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 31)))
		return 0;
	__cpuid(0x40000000, a, b, c, d);
	memcpy(out, &b, 4);
	memcpy(out + 4, &c, 4);
	memcpy(out + 8, &d, 4);
	out[12] = 0;
	return 1;
#else
	return -1;
#endif
}

NT_EXPORT int nt_have_nt_backend(void)
{
	return (nt_cpu_features() & NT_CPU_SSE2) != 0;
}

uint64_t nt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
