// SPDX-License-Identifier: Apache-2.0
/*
 * Model of memmap_init_zone_device(): one descriptor per PFN, initialised
 * the way the kernel initialises a ZONE_DEVICE struct page.
 *
 * Descriptor layout (x86-64 struct page; 64 bytes, plus the fields that
 * configurations add for 80 and 96 bytes):
 *    0 flags            zone | node | section links, PG_reserved, PG_head
 *    8 lru.next         overwritten by pgmap (head) or compound_head (tail)
 *   16 lru.prev         overwritten by zone_device_data = NULL
 *   24 mapping          TAIL_MAPPING on compound tails
 *   32 index, 40 private (head[1]: nr_pages of the folio)
 *   48 _mapcount (-1)   52 _refcount    56 memcg_data
 *   64 virtual          (80, 96: WANT_PAGE_VIRTUAL)
 *   72 _last_cpupid     (80, 96: LAST_CPUPID_NOT_IN_PAGE_FLAGS)
 *   80, 88 KMSAN shadow/origin (96)
 * Bit positions are the model's own; what matters is which stores happen,
 * in which order, and which fields depend on the PFN (section links and
 * virtual), exactly as in the series. The pageblock migratetype bitmap the
 * kernel also writes every 512 PFNs is outside the descriptors and not
 * modelled.
 */
#include <string.h>
#include "nttrace_native.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define F_FLAGS 0
#define F_LRU_NEXT 8
#define F_LRU_PREV 16
#define F_MAPPING 24
#define F_INDEX 32
#define F_PRIVATE 40
#define F_MAPCOUNT 48
#define F_REFCOUNT 52
#define F_MEMCG 56
#define F_VIRTUAL 64
#define F_LAST_CPUPID 72

#define PG_HEAD (1ull << 6)
#define PG_RESERVED (1ull << 10)
#define SECTION_PGSHIFT 32
#define SECTION_PFN_SHIFT 15 /* 128 MiB sections */
#define ZONES_PGSHIFT 51
#define NODES_PGSHIFT 54
#define TAIL_MAPPING 0x400ull
#define LAST_CPUPID_MASK ((1ull << 21) - 1)
#define PAGE_OFFSET_BASE 0xffff888000000000ull
#define MAX_WORDS 12

static inline void st64(char *p, int off, uint64_t v) { __builtin_memcpy(p + off, &v, 8); }
static inline void st32(char *p, int off, uint32_t v) { __builtin_memcpy(p + off, &v, 4); }
static inline uint64_t ld64(const char *p, int off) { uint64_t v; __builtin_memcpy(&v, p + off, 8); return v; }

static inline uint64_t page_links(uint64_t pfn, uint32_t zone, uint32_t nid)
{
	return ((uint64_t)nid << NODES_PGSHIFT) | ((uint64_t)zone << ZONES_PGSHIFT) |
	       ((pfn >> SECTION_PFN_SHIFT) << SECTION_PGSHIFT);
}

static inline uint64_t page_virtual(uint64_t pfn) { return PAGE_OFFSET_BASE + (pfn << 12); }

/* FS_DAX, PRIVATE, COHERENT and PCI_P2PDMA start at 0; GENERIC keeps 1. */
static inline int refcount_reset(uint32_t type) { return type != NT_PGMAP_GENERIC; }

/* __init_single_page() + __init_zone_device_page(), field by field. */
static void slow_init_one(char *p, const struct nt_memmap_args *a, uint64_t pfn)
{
	for (uint32_t off = 0; off < a->desc_size; off += 8) /* mm_zero_struct_page() */
		st64(p, off, 0);
	st64(p, F_FLAGS, page_links(pfn, a->zone_idx, a->nid)); /* set_page_links() */
	st32(p, F_REFCOUNT, 1);                                /* init_page_count() */
	st32(p, F_MAPCOUNT, (uint32_t)-1);                     /* page_mapcount_reset() */
	if (a->desc_size >= 80)
		st64(p, F_LAST_CPUPID, LAST_CPUPID_MASK);      /* page_cpupid_reset_last() */
	st64(p, F_LRU_NEXT, (uint64_t)(uintptr_t)(p + 8));     /* INIT_LIST_HEAD(&page->lru) */
	st64(p, F_LRU_PREV, (uint64_t)(uintptr_t)(p + 8));
	if (a->desc_size >= 80)
		st64(p, F_VIRTUAL, page_virtual(pfn));         /* set_page_address() */
	st64(p, F_FLAGS, ld64(p, F_FLAGS) | PG_RESERVED);      /* __SetPageReserved() */
	st64(p, F_LRU_NEXT, a->pgmap);                         /* page->pgmap = pgmap */
	st64(p, F_LRU_PREV, 0);                                /* zone_device_data = NULL */
	if (refcount_reset(a->pgmap_type))
		st32(p, F_REFCOUNT, 0);                        /* set_page_count(page, 0) */
}

/* prep_compound_tail() + set_page_count(page, 0) on an initialised tail. */
static void make_tail(char *p, const char *head)
{
	st64(p, F_MAPPING, TAIL_MAPPING);
	st64(p, F_LRU_NEXT, (uint64_t)(uintptr_t)head | 1);   /* set_compound_head() */
	st64(p, F_PRIVATE, 0);
	st32(p, F_REFCOUNT, 0);
}

/* prep_compound_head(): folio metadata lives in the first tail. */
static void prep_compound_head(char *head, uint32_t desc_size, uint32_t order)
{
	char *first_tail = head + desc_size;

	st64(first_tail, F_FLAGS, (ld64(first_tail, F_FLAGS) & ~0xffull) | order);
	st64(first_tail, F_PRIVATE, 1ull << order);
}

static void memmap_slow(const struct nt_memmap_args *a)
{
	uint64_t per = 1ull << a->order;
	char *base = a->descs;

	for (uint64_t i = 0; i < a->nr; i += per) {
		char *head = base + i * a->desc_size;

		slow_init_one(head, a, a->start_pfn + i);
		if (per == 1)
			continue;
		st64(head, F_FLAGS, ld64(head, F_FLAGS) | PG_HEAD);   /* __SetPageHead() */
		for (uint64_t t = 1; t < per && i + t < a->nr; t++) {
			char *p = head + t * a->desc_size;
			slow_init_one(p, a, a->start_pfn + i + t);
			make_tail(p, head);
			if (t == 1)
				prep_compound_head(head, a->desc_size, a->order);
		}
	}
}

static inline void store_word(char *p, uint32_t off, uint64_t v, int nt)
{
#if defined(__x86_64__)
	if (nt) {
		__asm__ volatile("movnti %1, %0" : "=m"(*(uint64_t *)(p + off)) : "r"(v));
		return;
	}
#endif
	st64(p, off, v);
}

/*
 * Template kept in registers: the invariant words are loaded once, and only
 * the PFN-dependent words (flags' section links, virtual) are recomputed per
 * descriptor, so no store is ever re-read by a wider load.
 */
static inline void emit_from_template(char *p, const uint64_t *w, uint32_t words, uint64_t flags,
				      uint64_t pfn, int has_virtual, int nt)
{
	store_word(p, 0, flags, nt);
	for (uint32_t k = 1; k < words; k++) {
		uint64_t v = (has_virtual && k == F_VIRTUAL / 8) ? page_virtual(pfn) : w[k];
		store_word(p, 8 * k, v, nt);
	}
}

#if defined(__x86_64__)
/*
 * Vector emitters for the template paths: the template sits in registers;
 * flags (word 0) and virtual (word 8) are blended in per descriptor, and each
 * descriptor leaves as whole 16/32/64-byte stores, streaming (NT) or cached.
 * One MOVNTI per 8 bytes issues 8 stores per 64-byte descriptor and, on the
 * CPUs measured, runs at a fraction of the write bandwidth.
 */
__attribute__((target("avx512f")))
static void emit64_avx512(char *p, const uint64_t *w, uint64_t flags, int nt)
{
	__m512i v = _mm512_loadu_si512((const void *)w);
	v = _mm512_mask_set1_epi64(v, 0x1, (long long)flags);
	if (nt)
		_mm512_stream_si512((__m512i *)p, v);
	else
		_mm512_store_si512((__m512i *)p, v);
}

/* `count` consecutive 64-byte descriptors from one template, in one loop:
 * no call per descriptor, the template held in a zmm register. */
__attribute__((target("avx512f")))
static void emit_run64_avx512(char *p, uint64_t count, const uint64_t *w, uint64_t flags_base,
			      uint64_t pfn, int nt)
{
	__m512i v = _mm512_loadu_si512((const void *)w);

	for (uint64_t i = 0; i < count; i++, p += 64, pfn++) {
		__m512i d = _mm512_mask_set1_epi64(v, 0x1, (long long)(flags_base | page_links(pfn, 0, 0)));
		if (nt)
			_mm512_stream_si512((__m512i *)p, d);
		else
			_mm512_store_si512((__m512i *)p, d);
	}
}

/* `count` consecutive 64-byte descriptors with eight straight-line 8-byte
 * MOVNTIs each, the template's invariant words held in registers: the
 * stores of the series' fixed-size 64-byte memcpy_nontemporal() (v8 7/9),
 * without its per-copy loads of the in-memory template. */
static void emit_run64_movnti(char *p, uint64_t count, const uint64_t *w, uint64_t flags_base, uint64_t pfn)
{
	const uint64_t w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7];

	for (uint64_t i = 0; i < count; i++, p += 64, pfn++) {
		uint64_t flags = flags_base | page_links(pfn, 0, 0);

		__asm__ volatile(
			"movnti %[f], 0(%[d])\n\tmovnti %[w1], 8(%[d])\n\t"
			"movnti %[w2], 16(%[d])\n\tmovnti %[w3], 24(%[d])\n\t"
			"movnti %[w4], 32(%[d])\n\tmovnti %[w5], 40(%[d])\n\t"
			"movnti %[w6], 48(%[d])\n\tmovnti %[w7], 56(%[d])\n\t"
			:
			: [d] "r"(p), [f] "r"(flags), [w1] "r"(w1), [w2] "r"(w2), [w3] "r"(w3), [w4] "r"(w4),
			  [w5] "r"(w5), [w6] "r"(w6), [w7] "r"(w7)
			: "memory");
	}
}

__attribute__((target("avx2")))
static void emit_avx2(char *p, const uint64_t *w, uint32_t words, uint64_t flags, uint64_t virt, int nt)
{
	for (uint32_t k = 0; k < words; k += 4) {
		uint64_t a = k == 0 ? flags : w[k];
		if (k == F_VIRTUAL / 8 && virt)
			a = virt;
		__m256i v = _mm256_set_epi64x((long long)w[k + 3], (long long)w[k + 2], (long long)w[k + 1], (long long)a);
		if (nt)
			_mm256_stream_si256((__m256i *)(p + 8 * k), v);
		else
			_mm256_store_si256((__m256i *)(p + 8 * k), v);
	}
}

static void emit_sse2(char *p, const uint64_t *w, uint32_t words, uint64_t flags, uint64_t virt, int nt)
{
	for (uint32_t k = 0; k < words; k += 2) {
		uint64_t a = k == 0 ? flags : w[k];
		if (k == F_VIRTUAL / 8 && virt)
			a = virt;
		__m128i v = _mm_set_epi64x((long long)w[k + 1], (long long)a);
		if (nt)
			_mm_stream_si128((__m128i *)(p + 8 * k), v);
		else
			_mm_store_si128((__m128i *)(p + 8 * k), v);
	}
}

enum { EMIT_WORDS, EMIT_SSE2, EMIT_AVX2, EMIT_AVX512 };

/* The widest store the CPU has that every descriptor's alignment allows. */
static int choose_emitter(const struct nt_memmap_args *a)
{
	unsigned f = nt_cpu_features();
	uintptr_t base = (uintptr_t)a->descs;

	if (a->desc_size == 64 && (f & NT_CPU_AVX512F) && !(base & 63))
		return EMIT_AVX512;
	if (a->desc_size % 32 == 0 && (f & NT_CPU_AVX2) && !(base & 31))
		return EMIT_AVX2;
	if ((f & NT_CPU_SSE2) && !(base & 15))
		return EMIT_SSE2;
	return EMIT_WORDS;
}

static inline __attribute__((always_inline)) void emit_vec(int how, char *p, const uint64_t *w, uint32_t words,
							    uint64_t flags, uint64_t pfn, int has_virtual, int nt)
{
	uint64_t virt = has_virtual ? page_virtual(pfn) : 0;

	switch (how) {
	case EMIT_AVX512: emit64_avx512(p, w, flags, nt); return;
	case EMIT_AVX2: emit_avx2(p, w, words, flags, virt, nt); return;
	case EMIT_SSE2: emit_sse2(p, w, words, flags, virt, nt); return;
	default: emit_from_template(p, w, words, flags, pfn, has_virtual, nt); return;
	}
}
#endif

static void load_template(uint64_t *w, const char *tpl, uint32_t words)
{
	for (uint32_t k = 0; k < words; k++)
		w[k] = ld64(tpl, 8 * k);
}

/* nt: streaming stores; movnti: only 8-byte MOVNTI, one per word, as the
 * series' fixed-size memcpy_nontemporal() stores a template (else the
 * widest store the CPU has, choose_emitter()). */
static inline __attribute__((always_inline)) void memmap_template(const struct nt_memmap_args *a, int nt, int movnti)
{
	uint64_t per = 1ull << a->order, section_mask = ((1ull << 19) - 1) << SECTION_PGSHIFT;
	uint32_t words = a->desc_size / 8;
	int has_virtual = a->desc_size >= 80;
	char head_tpl[128] __attribute__((aligned(64))), tail_tpl[128] __attribute__((aligned(64)));
	uint64_t hw[MAX_WORDS] = { 0 }, tw[MAX_WORDS] = { 0 };
	char *base = a->descs;

	/* Seed both templates through the slow path once (the series' "first
	 * real page seeds the reusable template"). */
	slow_init_one(head_tpl, a, a->start_pfn);
	if (per > 1)
		st64(head_tpl, F_FLAGS, ld64(head_tpl, F_FLAGS) | PG_HEAD);
	load_template(hw, head_tpl, words);
	uint64_t head_flags = hw[0] & ~section_mask;
	if (per > 1) {
		slow_init_one(tail_tpl, a, a->start_pfn + 1);
		make_tail(tail_tpl, base);
		load_template(tw, tail_tpl, words);
	}
	uint64_t tail_flags = tw[0] & ~section_mask;
#if defined(__x86_64__)
	int how = movnti ? EMIT_WORDS : choose_emitter(a);
#define EMIT(p, w, flags, pfn) emit_vec(how, p, w, words, flags, pfn, has_virtual, nt)
#else
	(void)movnti;
#define EMIT(p, w, flags, pfn) emit_from_template(p, w, words, flags, pfn, has_virtual, 0)
#endif

#if defined(__x86_64__)
	int movnti64 = movnti && a->desc_size == 64;

	if ((how == EMIT_AVX512 || movnti64) && per == 1) {
		if (movnti64)
			emit_run64_movnti(base, a->nr, hw, head_flags, a->start_pfn);
		else
			emit_run64_avx512(base, a->nr, hw, head_flags, a->start_pfn, nt);
		if (nt)
			nt_drain();
		return;
	}
#endif
	for (uint64_t i = 0; i < a->nr; i += per) {
		uint64_t pfn = a->start_pfn + i;
		char *head = base + i * a->desc_size;

		EMIT(head, hw, head_flags | page_links(pfn, 0, 0), pfn);
		if (per == 1)
			continue;
		tw[F_LRU_NEXT / 8] = (uint64_t)(uintptr_t)head | 1;  /* per-compound field */
		uint64_t tails = (i + per <= a->nr ? per : a->nr - i) - 1;
#if defined(__x86_64__)
		if (movnti64) {
			emit_run64_movnti(head + 64, tails, tw, tail_flags, pfn + 1);
		} else if (how == EMIT_AVX512) {
			emit_run64_avx512(head + 64, tails, tw, tail_flags, pfn + 1, nt);
		} else
#endif
		for (uint64_t t = 1; t <= tails; t++)
			EMIT(head + t * a->desc_size, tw, tail_flags | page_links(pfn + t, 0, 0), pfn + t);
		/* The head metadata in the first tail is written with cached
		 * stores, so the tails' NT stores must be drained first. */
		if (nt)
			nt_drain();
		if (i + 1 < a->nr)
			prep_compound_head(head, a->desc_size, a->order);
	}
	if (nt)
		nt_drain();
#undef EMIT
}

/*
 * The hazard: refresh the PFN-dependent fields in an in-memory template and
 * then copy the template with memcpy, whose wide loads overlap the narrow
 * stores just made and wait on store-to-load forwarding.
 */
static void memmap_template_refresh_copy(const struct nt_memmap_args *a)
{
	uint64_t per = 1ull << a->order;
	char head_tpl[128] __attribute__((aligned(64))), tail_tpl[128] __attribute__((aligned(64)));
	char *base = a->descs;

	slow_init_one(head_tpl, a, a->start_pfn);
	if (per > 1) {
		st64(head_tpl, F_FLAGS, ld64(head_tpl, F_FLAGS) | PG_HEAD);
		slow_init_one(tail_tpl, a, a->start_pfn + 1);
		make_tail(tail_tpl, base);
	}
	uint64_t keep = ~(((1ull << 19) - 1) << SECTION_PGSHIFT);
	for (uint64_t i = 0; i < a->nr; i += per) {
		uint64_t pfn = a->start_pfn + i;
		char *head = base + i * a->desc_size;

		st64(head_tpl, F_FLAGS, (ld64(head_tpl, F_FLAGS) & keep) | page_links(pfn, 0, 0));
		if (a->desc_size >= 80)
			st64(head_tpl, F_VIRTUAL, page_virtual(pfn));
		switch (a->desc_size) { /* constant sizes, as the kernel's sizeof(struct page) */
		case 64: __builtin_memcpy(head, head_tpl, 64); break;
		case 80: __builtin_memcpy(head, head_tpl, 80); break;
		default: __builtin_memcpy(head, head_tpl, 96); break;
		}
		if (per == 1)
			continue;
		st64(tail_tpl, F_LRU_NEXT, (uint64_t)(uintptr_t)head | 1);
		for (uint64_t t = 1; t < per && i + t < a->nr; t++) {
			char *p = head + t * a->desc_size;
			st64(tail_tpl, F_FLAGS, (ld64(tail_tpl, F_FLAGS) & keep) | page_links(pfn + t, 0, 0));
			if (a->desc_size >= 80)
				st64(tail_tpl, F_VIRTUAL, page_virtual(pfn + t));
			switch (a->desc_size) {
			case 64: __builtin_memcpy(p, tail_tpl, 64); break;
			case 80: __builtin_memcpy(p, tail_tpl, 80); break;
			default: __builtin_memcpy(p, tail_tpl, 96); break;
			}
		}
		if (i + 1 < a->nr)
			prep_compound_head(head, a->desc_size, a->order);
	}
}

/* The uprobe target. Returns 0, or -1 for bad arguments. */
NT_EXPORT int nttrace_memmap_init_zone_device_model(struct nt_memmap_args *a)
{
	if (!a || !a->descs || (a->desc_size != 64 && a->desc_size != 80 && a->desc_size != 96) ||
	    a->order > 30 || a->method >= NT_MEMMAP_COUNT || a->pgmap_type < 1 || a->pgmap_type > 5)
		return -1;
	if ((a->method == NT_MEMMAP_TEMPLATE_NT || a->method == NT_MEMMAP_TEMPLATE_MOVNTI) && !nt_have_nt_backend())
		return -1;
	uint64_t t0 = nt_now_ns();
	switch (a->method) {
	case NT_MEMMAP_SLOW: memmap_slow(a); break;
	case NT_MEMMAP_TEMPLATE_CACHED: memmap_template(a, 0, 0); break;
	case NT_MEMMAP_TEMPLATE_NT: memmap_template(a, 1, 0); break;
	case NT_MEMMAP_TEMPLATE_MOVNTI: memmap_template(a, 1, 1); break;
	case NT_MEMMAP_TEMPLATE_REFRESH_COPY: memmap_template_refresh_copy(a); break;
	}
	a->elapsed_ns = nt_now_ns() - t0;
	return 0;
}

/* page_ref_set events the kernel's path would emit for this call: two per
 * head (init_page_count, then the reset) or one for GENERIC, two per tail on
 * the slow path; only the template seeding on the template paths. */
NT_EXPORT uint32_t nt_memmap_refcount_stores(const struct nt_memmap_args *a)
{
	uint64_t per = 1ull << a->order, heads = (a->nr + per - 1) / per, tails = a->nr - heads;
	uint64_t per_head = refcount_reset(a->pgmap_type) ? 2 : 1;

	if (a->method == NT_MEMMAP_SLOW)
		return (uint32_t)(heads * per_head + tails * 2);
	return (uint32_t)(per_head + (per > 1 ? 2 : 0));
}
