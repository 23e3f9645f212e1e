// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * reclaim probe: page reclaim episodes, from the vmscan tracepoints, paired
 * per task:
 *   direct  mm_vmscan_direct_reclaim_begin .. _end   (an allocating task)
 *   memcg   mm_vmscan_memcg_reclaim_begin  .. _end   (limit hit, memory.reclaim)
 *   node    mm_vmscan_node_reclaim_begin   .. _end   (zone_reclaim_mode)
 *   kswapd  mm_vmscan_kswapd_wake .. mm_vmscan_kswapd_sleep (kswapd's own
 *           context: a wake while awake continues the episode)
 * Pages reclaimed come from each _end record's nr_reclaimed; kswapd's sleep
 * carries none, so its episode sums mm_vmscan_lru_shrink_inactive's
 * nr_reclaimed (LRU pages; slab freed by kswapd is not counted). Demotion runs
 * inside reclaim, in the reclaiming task: migrate:mm_migrate_pages with
 * reason MR_DEMOTION adds its succeeded pages to the task's open episode.
 *
 * Defined by the loader from the format files: NTTRACE_END_NR_RECLAIMED
 * (one template serves the three _end events; the loader checks they agree),
 * NTTRACE_SHRINK_NR_RECLAIMED, NTTRACE_DONE_SUCCEEDED, NTTRACE_DONE_REASON;
 * from BTF: NTTRACE_MR_DEMOTION (-1 when the kernel has none).
 */
#include "common.h"
#include "inflight.h"

#define RECLAIM_DIRECT 0
#define RECLAIM_MEMCG 1
#define RECLAIM_NODE 2
#define RECLAIM_KSWAPD 3
#define NTTRACE_RECLAIM_KINDS 4

struct reclaim_stats {
	u64 episodes;       /* paired begin/end                           */
	u64 reclaimed;      /* pages                                      */
	u64 demoted;        /* MR_DEMOTION pages migrated inside          */
	u64 sum_ns;
	u64 max_ns;
	u64 unpaired;       /* end without a begin seen (attached mid-episode) */
	u64 hist[NTTRACE_SLOTS];  /* episodes by log2(latency in ns)      */
};

struct reclaim_inflight {
	u64 ts;             /* inflight.h: 0 is a free slot               */
	u32 tid;
	u32 kind;
	u64 reclaimed;      /* kswapd: summed from lru_shrink_inactive    */
	u64 demoted;
};

#define NTTRACE_INFLIGHT_SLOTS 4096  /* a power of two (inflight.h) */
BPF_ARRAY(reclaim_inflight, struct reclaim_inflight, NTTRACE_INFLIGHT_SLOTS);
BPF_PERCPU_ARRAY(reclaim_stats, struct reclaim_stats, NTTRACE_RECLAIM_KINDS);

static __always_inline struct reclaim_inflight *reclaim_slot(u32 tid)
{
	u32 idx = inflight_index(tid, NTTRACE_INFLIGHT_SLOTS);

	return reclaim_inflight.lookup(&idx);
}

/* The task's episode in flight, or NULL. */
static __always_inline struct reclaim_inflight *reclaim_episode(void)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();

	return INFLIGHT_FIND(reclaim_slot(tid), tid);
}

static __always_inline int reclaim_begin(u32 kind)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct reclaim_inflight *slot = reclaim_slot(tid);
	struct reclaim_inflight f = { .kind = kind };

	if (!slot)
		return 0;
	if (kind == RECLAIM_KSWAPD && INFLIGHT_FIND(slot, tid))
		return 0;   /* woken again before it slept: the same episode */
	/* an episode it displaces is counted as unpaired at its end */
	INFLIGHT_START(slot, tid, f);
	return 0;
}

static __always_inline int reclaim_end(u32 kind, u64 nr_reclaimed, int from_record)
{
	struct reclaim_inflight *f = reclaim_episode();
	struct reclaim_stats *s = reclaim_stats.lookup(&kind);

	if (!s)
		return 0;
	if (!f || f->kind != kind) {
		s->unpaired++;
		return 0;
	}
	u64 delta = bpf_ktime_get_ns() - INFLIGHT_END(f);

	s->episodes++;
	s->reclaimed += from_record ? nr_reclaimed : f->reclaimed;
	s->demoted += f->demoted;
	NTTRACE_LATENCY(s, delta);
	return 0;
}

int nttrace_reclaim_direct_begin(void *ctx) { return reclaim_begin(RECLAIM_DIRECT); }
int nttrace_reclaim_memcg_begin(void *ctx) { return reclaim_begin(RECLAIM_MEMCG); }
int nttrace_reclaim_node_begin(void *ctx) { return reclaim_begin(RECLAIM_NODE); }
int nttrace_reclaim_kswapd_wake(void *ctx) { return reclaim_begin(RECLAIM_KSWAPD); }

int nttrace_reclaim_direct_end(void *ctx)
{
	return reclaim_end(RECLAIM_DIRECT, TP_FIELD(ctx, u64, NTTRACE_END_NR_RECLAIMED), 1);
}

int nttrace_reclaim_memcg_end(void *ctx)
{
	return reclaim_end(RECLAIM_MEMCG, TP_FIELD(ctx, u64, NTTRACE_END_NR_RECLAIMED), 1);
}

int nttrace_reclaim_node_end(void *ctx)
{
	return reclaim_end(RECLAIM_NODE, TP_FIELD(ctx, u64, NTTRACE_END_NR_RECLAIMED), 1);
}

int nttrace_reclaim_kswapd_sleep(void *ctx) { return reclaim_end(RECLAIM_KSWAPD, 0, 0); }

int nttrace_reclaim_shrink_inactive(void *ctx)
{
	struct reclaim_inflight *f = reclaim_episode();

	if (f && f->kind == RECLAIM_KSWAPD)
		f->reclaimed += TP_FIELD(ctx, u64, NTTRACE_SHRINK_NR_RECLAIMED);
	return 0;
}

int nttrace_reclaim_migrate_done(void *ctx)
{
	struct reclaim_inflight *f;

	if (NTTRACE_MR_DEMOTION < 0 || TP_FIELD(ctx, s32, NTTRACE_DONE_REASON) != NTTRACE_MR_DEMOTION)
		return 0;
	f = reclaim_episode();
	if (f)
		f->demoted += TP_FIELD(ctx, u64, NTTRACE_DONE_SUCCEEDED);
	return 0;
}
