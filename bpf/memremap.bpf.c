// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * memremap probe: each memremap_pages() call (ZONE_DEVICE memory mapped by
 * a driver: HMM's DEVICE_PRIVATE chunks, P2PDMA, pmem/DAX), with its
 * latency, the pages its ranges span and the pgmap type, aggregated per type
 * and emitted as one record per call (the calls are rare). The whole call
 * includes memmap_init_zone_device() for each range, the path the template
 * series changes.
 *
 * Attach, chosen by the loader:
 *   NTTRACE_VIA_FENTRY  fentry/fexit on memremap_pages(pgmap, nid)
 *   NTTRACE_VIA_KPROBE  kprobe/kretprobe on it
 * Offsets from BTF: NTTRACE_PGMAP_TYPE, NTTRACE_PGMAP_NR_RANGE and
 * NTTRACE_PGMAP_RANGES (struct range { u64 start, end; }[nr_range]).
 */
#include "common.h"
#include "inflight.h"

/* the pages of the first four ranges (pmem and HMM map one; P2PDMA and CXL a few) */
#define MEMREMAP_PAGE_SHIFT 12

struct memremap_inflight {
	u64 ts;             /* inflight.h: 0 is a free slot */
	u32 tid;
	u32 pgmap_type;
	u64 pages;
	s32 nid;
	u32 pad;
};

struct memremap_record {
	u64 ts;
	u64 latency_ns;
	u64 pages;
	u32 pid;
	u32 pgmap_type;
	s32 nid;
	u32 failed;         /* memremap_pages() returned an error pointer */
};

struct memremap_stats {
	u64 calls;
	u64 pages;
	u64 failed;
	u64 sum_ns;
	u64 max_ns;
	u64 hist[NTTRACE_SLOTS];  /* calls by log2(latency in ns) */
};

#define NTTRACE_INFLIGHT_SLOTS 256  /* a power of two (inflight.h) */
BPF_ARRAY(memremap_inflight, struct memremap_inflight, NTTRACE_INFLIGHT_SLOTS);
BPF_HASH(memremap_stats, u32, struct memremap_stats, 16);
/* never written: a new row's first value (too big for the stack) */
BPF_ARRAY(memremap_stats_zero, struct memremap_stats, 1);
/* calls whose start found no slot or displaced another task's call (inflight.h) */
BPF_ARRAY(memremap_lost, u64, 1);
BPF_PERF_OUTPUT(memremap_records);

static __always_inline u64 memremap_range_pages(void *pgmap, int i)
{
	u64 start = KREAD(pgmap, u64, NTTRACE_PGMAP_RANGES + i * 16);
	u64 end = KREAD(pgmap, u64, NTTRACE_PGMAP_RANGES + i * 16 + 8);

	return (end + 1 - start) >> MEMREMAP_PAGE_SHIFT;
}

static __always_inline u64 memremap_span(void *pgmap)
{
	u32 nr = KREAD(pgmap, u32, NTTRACE_PGMAP_NR_RANGE);
	u64 pages = 0;

	/* straight-line, one comparison a range: a loop's data-dependent exits
	 * made the verifier's path count explode */
	if (nr > 0) pages += memremap_range_pages(pgmap, 0);
	if (nr > 1) pages += memremap_range_pages(pgmap, 1);
	if (nr > 2) pages += memremap_range_pages(pgmap, 2);
	if (nr > 3) pages += memremap_range_pages(pgmap, 3);
	return pages;
}

static __always_inline struct memremap_inflight *memremap_slot(u32 tid)
{
	u32 idx = inflight_index(tid, NTTRACE_INFLIGHT_SLOTS);

	return memremap_inflight.lookup(&idx);
}

static __always_inline int memremap_enter(void *pgmap, int nid)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct memremap_inflight *slot = memremap_slot(tid);
	struct memremap_inflight f = {
		.pages = memremap_span(pgmap), .pgmap_type = KREAD(pgmap, u32, NTTRACE_PGMAP_TYPE), .nid = nid,
	};

	if (!slot || INFLIGHT_START(slot, tid, f)) {
		int zero = 0;
		u64 *lost = memremap_lost.lookup(&zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
	}
	return 0;
}

static __always_inline int memremap_exit(void *ctx, u64 ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct memremap_inflight *f = INFLIGHT_FIND(memremap_slot(tid), tid);
	int z = 0;
	struct memremap_stats *zero = memremap_stats_zero.lookup(&z), *s = 0;

	if (!f)
		return 0;
	u64 delta = bpf_ktime_get_ns() - f->ts;
	u32 failed = ret >= (u64)-4095;      /* IS_ERR_VALUE */
	u32 key = f->pgmap_type;
	if (zero)
		s = memremap_stats.lookup_or_try_init(&key, zero);
	if (s) {
		__sync_fetch_and_add(&s->calls, 1);
		__sync_fetch_and_add(&s->pages, failed ? 0 : f->pages);
		__sync_fetch_and_add(&s->failed, failed);
		NTTRACE_LATENCY_SHARED(s, delta);
	}
	struct memremap_record r = {
		.ts = f->ts, .latency_ns = delta, .pages = f->pages, .pid = tid, .pgmap_type = f->pgmap_type,
		.nid = f->nid, .failed = failed,
	};
	INFLIGHT_END(f);
	memremap_records.perf_submit(ctx, &r, sizeof(r));
	return 0;
}

#if defined(NTTRACE_VIA_FENTRY)
KFUNC_PROBE(memremap_pages, void *pgmap, int nid)
{
	return memremap_enter(pgmap, nid);
}

KRETFUNC_PROBE(memremap_pages, void *pgmap, int nid, void *ret)
{
	return memremap_exit(ctx, (u64)ret);
}
#else
int nttrace_memremap_entry(struct pt_regs *ctx)
{
	return memremap_enter((void *)PT_REGS_PARM1(ctx), (int)PT_REGS_PARM2(ctx));
}

int nttrace_memremap_return(struct pt_regs *ctx)
{
	return memremap_exit(ctx, PT_REGS_RC(ctx));
}
#endif
