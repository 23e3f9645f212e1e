// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * memmap probe: each memmap_init_zone_device() call (ZONE_DEVICE memmap
 * init when a pmem/DAX namespace binds): latency, nr_pages, pgmap type,
 * vmemmap_shift and NUMA node, aggregated per (pgmap type, node) and emitted
 * as one record per call (the calls are rare).
 *
 * Attach, chosen by the loader:
 *   NTTRACE_VIA_FENTRY  fentry/fexit on memmap_init_zone_device
 *   NTTRACE_VIA_KPROBE  kprobe/kretprobe on memmap_init_zone_device
 *   NTTRACE_VIA_UPROBE  uprobe/uretprobe on the native reference's model,
 *                       nttrace_memmap_init_zone_device_model(args), whose
 *                       args struct carries the same facts
 * Offsets from BTF: NTTRACE_PGMAP_TYPE, NTTRACE_PGMAP_VMEMMAP_SHIFT,
 * NTTRACE_ZONE_NODE (-1 when the kernel has no zone->node), and
 * NTTRACE_ALTMAP_BASE_PFN/_RESERVE/_FREE (-1 when absent): with map=dev the
 * first PFNs hold the struct pages themselves (the altmap), and the kernel
 * initialises nr_pages - (reserve + free) descriptors, as its own pr_debug
 * line counts them. A valid altmap starts at start_pfn; an unused one is 0.
 * NTTRACE_PAGE_REF: also count page_ref_set events seen on the same task
 * while a call is in flight (the template-path inference).
 */
#include "common.h"
#include "inflight.h"

struct memmap_inflight {
	u64 ts;             /* inflight.h: 0 is a free slot */
	u32 tid;
	u32 pad;
	u64 j0;             /* jiffies at entry: the kernel's own pr_debug clock */
	u64 nr_pages;
	u64 nr_init;
	u64 start_pfn;
	u64 vmemmap_shift;
	u64 page_ref_sets;
	u32 pgmap_type;
	s32 nid;
};

struct memmap_record {
	u64 ts;
	u64 latency_ns;
	u64 nr_pages;
	u64 nr_init;
	u64 start_pfn;
	u64 vmemmap_shift;
	u64 page_ref_sets;
	u64 jiffies;        /* jiffies elapsed between entry and return */
	u32 pid;
	u32 pgmap_type;
	s32 nid;
	u32 pad;
};

struct memmap_key {
	u32 pgmap_type;
	s32 nid;
};

struct memmap_stats {
	u64 calls;
	u64 pages;          /* descriptors initialised (nr_init) */
	u64 page_ref_sets;
	u64 sum_ns;
	u64 max_ns;
	u64 hist[NTTRACE_SLOTS];  /* calls by log2(latency in ns) */
};

#define NTTRACE_INFLIGHT_SLOTS 1024  /* a power of two (inflight.h) */
BPF_ARRAY(memmap_inflight, struct memmap_inflight, NTTRACE_INFLIGHT_SLOTS);
BPF_HASH(memmap_stats, struct memmap_key, struct memmap_stats, 64);
/* never written: a new row's first value (too big for the stack) */
BPF_ARRAY(memmap_stats_zero, struct memmap_stats, 1);
/* calls whose start found no slot or displaced another task's call (inflight.h) */
BPF_ARRAY(memmap_lost, u64, 1);
BPF_PERF_OUTPUT(memmap_records);

static __always_inline struct memmap_inflight *memmap_slot(u32 tid)
{
	u32 idx = inflight_index(tid, NTTRACE_INFLIGHT_SLOTS);

	return memmap_inflight.lookup(&idx);
}

static __always_inline int memmap_enter(struct memmap_inflight *f)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct memmap_inflight *slot = memmap_slot(tid);

	f->j0 = bpf_jiffies64();
	if (!slot || INFLIGHT_START(slot, tid, *f)) {
		int zero = 0;
		u64 *lost = memmap_lost.lookup(&zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
	}
	return 0;
}

static __always_inline int memmap_exit(void *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct memmap_inflight *f = INFLIGHT_FIND(memmap_slot(tid), tid);
	int z = 0;
	struct memmap_stats *zero = memmap_stats_zero.lookup(&z), *s = 0;

	if (!f)
		return 0;
	u64 delta = bpf_ktime_get_ns() - f->ts;
	struct memmap_key key = { .pgmap_type = f->pgmap_type, .nid = f->nid };
	if (zero)
		s = memmap_stats.lookup_or_try_init(&key, zero);
	if (s) {
		__sync_fetch_and_add(&s->calls, 1);
		__sync_fetch_and_add(&s->pages, f->nr_init);
		__sync_fetch_and_add(&s->page_ref_sets, f->page_ref_sets);
		NTTRACE_LATENCY_SHARED(s, delta);
	}
	struct memmap_record r = {
		.ts = f->ts, .latency_ns = delta, .nr_pages = f->nr_pages, .nr_init = f->nr_init, .start_pfn = f->start_pfn,
		.vmemmap_shift = f->vmemmap_shift, .page_ref_sets = f->page_ref_sets,
		.jiffies = bpf_jiffies64() - f->j0,
		.pid = tid, .pgmap_type = f->pgmap_type, .nid = f->nid,
	};
	INFLIGHT_END(f);
	memmap_records.perf_submit(ctx, &r, sizeof(r));
	return 0;
}

static __always_inline void fill_from_kernel(struct memmap_inflight *f, void *zone, u64 start_pfn,
					     u64 nr_pages, void *pgmap)
{
	f->nr_pages = nr_pages;
	f->nr_init = nr_pages;
	f->start_pfn = start_pfn;
#if NTTRACE_ALTMAP_BASE_PFN >= 0
	if (KREAD(pgmap, u64, NTTRACE_ALTMAP_BASE_PFN) == start_pfn) {
		u64 skip = KREAD(pgmap, u64, NTTRACE_ALTMAP_RESERVE) + KREAD(pgmap, u64, NTTRACE_ALTMAP_FREE);
		if (skip < nr_pages)
			f->nr_init = nr_pages - skip;
	}
#endif
	f->pgmap_type = KREAD(pgmap, u32, NTTRACE_PGMAP_TYPE);
	f->vmemmap_shift = KREAD(pgmap, u64, NTTRACE_PGMAP_VMEMMAP_SHIFT);
#if NTTRACE_ZONE_NODE >= 0
	f->nid = KREAD(zone, s32, NTTRACE_ZONE_NODE);
#else
	f->nid = -1;
#endif
}

#if defined(NTTRACE_VIA_FENTRY)
KFUNC_PROBE(memmap_init_zone_device, void *zone, unsigned long start_pfn, unsigned long nr_pages, void *pgmap)
{
	struct memmap_inflight f = {};
	fill_from_kernel(&f, zone, start_pfn, nr_pages, pgmap);
	return memmap_enter(&f);
}

KRETFUNC_PROBE(memmap_init_zone_device, void *zone, unsigned long start_pfn, unsigned long nr_pages, void *pgmap)
{
	return memmap_exit(ctx);
}
#elif defined(NTTRACE_VIA_KPROBE)
int nttrace_memmap_entry(struct pt_regs *ctx)
{
	struct memmap_inflight f = {};
	fill_from_kernel(&f, (void *)PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx),
			 (void *)PT_REGS_PARM4(ctx));
	return memmap_enter(&f);
}

int nttrace_memmap_return(struct pt_regs *ctx)
{
	return memmap_exit(ctx);
}
#elif defined(NTTRACE_VIA_UPROBE)
/* struct nt_memmap_args in native/nttrace_native.h */
struct nt_memmap_args {
	u64 descs;
	u64 nr;
	u32 desc_size;
	u32 pgmap_type;
	u32 order;
	u32 method;
	u64 start_pfn;
	u32 nid;
	u32 zone_idx;
	u64 pgmap;
	u64 elapsed_ns;
};

int nttrace_memmap_entry(struct pt_regs *ctx)
{
	struct nt_memmap_args a = {};
	struct memmap_inflight f = {};

	bpf_probe_read_user(&a, sizeof(a), (void *)PT_REGS_PARM1(ctx));
	f.nr_pages = a.nr;
	f.nr_init = a.nr;
	f.start_pfn = a.start_pfn;
	f.pgmap_type = a.pgmap_type;
	f.vmemmap_shift = a.order;
	f.nid = a.nid;
	return memmap_enter(&f);
}

int nttrace_memmap_return(struct pt_regs *ctx)
{
	return memmap_exit(ctx);
}
#endif

#if NTTRACE_PAGE_REF
int nttrace_memmap_page_ref_set(void *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct memmap_inflight *f = INFLIGHT_FIND(memmap_slot(tid), tid);

	if (f)
		__sync_fetch_and_add(&f->page_ref_sets, 1);
	return 0;
}
#endif
