// SPDX-License-Identifier: Apache-2.0
/*
 * Tables, self-tests and timing loops of the native reference, and the
 * CPython module init that lets setuptools build the library as
 * nttrace._native (Python loads it with ctypes; the module itself is empty).
 */
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#include "nttrace_native.h"

static const nt_copy_fn primitive_fns[NT_PRIM_COUNT] = {
	nt_copy_memcpy, nt_copy_rep_movsb, nt_copy_rep_movsq, nt_copy_movq_unrolled,
	nt_copy_generic, nt_copy_mixed,
};
static const char *const primitive_names[NT_PRIM_COUNT] = {
	"memcpy", "rep_movsb", "rep_movsq", "movq_unrolled", "nt_generic", "nt_mixed",
};

NT_EXPORT nt_copy_fn nt_primitive_fn(int prim)
{
	return (prim >= 0 && prim < NT_PRIM_COUNT) ? primitive_fns[prim] : NULL;
}

NT_EXPORT const char *nt_primitive_name(int prim)
{
	return (prim >= 0 && prim < NT_PRIM_COUNT) ? primitive_names[prim] : "?";
}

#define GUARD 64
#define GUARD_BYTE 0xA5

static void record(struct nt_selftest_result *r, size_t size, size_t so, size_t dof)
{
	if (r->failures++ == 0) {
		r->first_size = (int64_t)size;
		r->first_src_off = (int64_t)so;
		r->first_dst_off = (int64_t)dof;
	}
}

/* One case: copy `size` bytes from src+so to dst+dof; the destination must
 * equal what memcpy gives, with GUARD bytes on each side untouched. */
static int one_case(nt_copy_fn fn, int fixed_variant, unsigned char *src, unsigned char *dst,
		    unsigned char *expect, size_t size, size_t so, size_t dof)
{
	size_t span = GUARD + 64 + size + GUARD;

	memset(dst, GUARD_BYTE, span);
	memset(expect, GUARD_BYTE, span);
	memcpy(expect + GUARD + dof, src + so, size);
	if (fn)
		fn(dst + GUARD + dof, src + so, size);
	else if (fixed_variant == 0)
		nt_copy_fixed_a(dst + GUARD + dof, src + so, size);
	else
		nt_copy_fixed_b(dst + GUARD + dof, src + so, size);
	nt_drain();
	return memcmp(dst, expect, span) == 0;
}

NT_EXPORT int nt_selftest_copy(int prim, size_t exhaustive_max, size_t max_size, size_t sample_stride,
			       size_t src_offsets, struct nt_selftest_result *out)
{
	nt_copy_fn fn = nt_primitive_fn(prim);
	size_t cap = GUARD + 64 + max_size + GUARD + 64;
	unsigned char *src = malloc(cap), *dst = aligned_alloc(64, (cap + 63) & ~63ul), *expect = malloc(cap);

	memset(out, 0, sizeof(*out));
	out->first_size = out->first_src_off = out->first_dst_off = -1;
	if (!fn || !src || !dst || !expect || sample_stride == 0 || src_offsets == 0 || src_offsets > 64) {
		free(src); free(dst); free(expect);
		return -1;
	}
	for (size_t i = 0; i < cap; i++)
		src[i] = (unsigned char)(i * 131 + 7);
	for (size_t size = 0; size <= max_size; size++) {
		int exhaustive = size <= exhaustive_max;
		if (!exhaustive && (size % sample_stride) && size != max_size)
			continue;
		for (size_t so = 0; so < src_offsets; so++) {
			for (size_t dof = 0; dof < 64; dof++) {
				/* Above the exhaustive range: every offset pair that
				 * differs in its low 3 bits, plus a few others. */
				if (!exhaustive && ((so * 64 + dof) % 7) != (size % 7))
					continue;
				out->cases++;
				if (!one_case(fn, 0, src, dst, expect, size, so, dof))
					record(out, size, so, dof);
			}
		}
	}
	free(src); free(dst); free(expect);
	return 0;
}

NT_EXPORT int nt_selftest_fixed(int variant, struct nt_selftest_result *out)
{
	static const size_t sizes[] = { 4, 8, 16, 32, 48, 64, 80, 96 };
	size_t cap = GUARD + 64 + 96 + GUARD + 64;
	unsigned char *src = malloc(cap), *dst = aligned_alloc(64, 512), *expect = malloc(cap);

	memset(out, 0, sizeof(*out));
	out->first_size = out->first_src_off = out->first_dst_off = -1;
	if (!src || !dst || !expect) {
		free(src); free(dst); free(expect);
		return -1;
	}
	for (size_t i = 0; i < cap; i++)
		src[i] = (unsigned char)(i * 29 + 3);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (size_t so = 0; so < 8; so++)
			for (size_t dof = 0; dof < 8; dof++) {
				out->cases++;
				if (!one_case(NULL, variant, src, dst, expect, sizes[k], so, dof))
					record(out, sizes[k], so, dof);
			}
	free(src); free(dst); free(expect);
	return 0;
}

/* Time `iters` copies of `len` bytes, walking src and dst forward by `len`
 * through `span` bytes (span == len: the same bytes every time); one drain
 * at the end, inside the timed interval, so NT primitives pay for their
 * write-back. */
NT_EXPORT uint64_t nt_bench_copy_ns(int prim, void *dst, const void *src, size_t len, size_t span, uint64_t iters)
{
	nt_copy_fn fn = nt_primitive_fn(prim);
	size_t off = 0;

	if (!fn || span < len || len == 0)
		return 0;
	uint64_t t0 = nt_now_ns();
	for (uint64_t i = 0; i < iters; i++) {
		fn((char *)dst + off, (const char *)src + off, len);
		off += len;
		if (off + len > span)
			off = 0;
		__asm__ volatile("" ::: "memory");
	}
	nt_drain();
	return nt_now_ns() - t0;
}

/* The v8 7/9 microbenchmark loop: `iters` fixed-size copies to one
 * destination; the drain only closes the round, as wmb() did there. */
NT_EXPORT uint64_t nt_bench_fixed_ns(int variant, void *dst, const void *src, size_t len, uint64_t iters)
{
	uint64_t t0 = nt_now_ns();

	for (uint64_t i = 0; i < iters; i++) {
		if (variant == 0)
			nt_copy_fixed_a(dst, src, len);
		else
			nt_copy_fixed_b(dst, src, len);
		__asm__ volatile("" ::: "memory");
	}
	nt_drain();
	return nt_now_ns() - t0;
}

static struct PyModuleDef native_module = {
	PyModuleDef_HEAD_INIT, "_native",
	"nttrace native reference (C functions loaded through ctypes)", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
	return PyModule_Create(&native_module);
}
