/*
 * migrate probe: every migrate_pages() call, from the pair of tracepoints
 * migrate:mm_migrate_pages_start (entry: mode, reason) and
 * migrate:mm_migrate_pages (exit: page counts, mode, reason), paired per
 * task. Aggregates per (mode, reason) in the kernel; user space only reads
 * the maps. No kprobe needed.
 *
 * Defined by the loader from the format files:
 *   NTTRACE_START_MODE, NTTRACE_START_REASON,
 *   NTTRACE_DONE_SUCCEEDED, NTTRACE_DONE_FAILED, NTTRACE_DONE_THP_SUCCEEDED,
 *   NTTRACE_DONE_THP_FAILED, NTTRACE_DONE_MODE, NTTRACE_DONE_REASON
 *   NTTRACE_RECORD (0/1): also emit one record per call
 */
#include "common.h"

struct migrate_key {
	u32 mode;
	s32 reason;
};

struct migrate_stats {
	u64 calls;          /* paired start/done                          */
	u64 succeeded;      /* pages                                      */
	u64 failed;
	u64 thp_succeeded;
	u64 thp_failed;
	u64 sum_ns;
	u64 max_ns;
	u64 unpaired;       /* done without a start (attached mid-call)   */
};

struct migrate_inflight {
	u64 ts;
	u32 mode;
	s32 reason;
};

struct migrate_record {
	u64 ts;
	u64 latency_ns;
	u64 succeeded;
	u64 failed;
	u32 pid;
	u32 mode;
	s32 reason;
	u32 pad;
};

BPF_HASH(migrate_inflight, u32, struct migrate_inflight, 16384);
BPF_HASH(migrate_stats, struct migrate_key, struct migrate_stats, 256);
BPF_HISTOGRAM(migrate_latency, struct nttrace_hist_key, 4096);
BPF_ARRAY(migrate_lost, u64, 1);
#if NTTRACE_RECORD
BPF_PERF_OUTPUT(migrate_records);
#endif

int nttrace_migrate_start(void *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct migrate_inflight f = {
		.ts = bpf_ktime_get_ns(),
		.mode = TP_READ(ctx, u32, NTTRACE_START_MODE),
		.reason = TP_READ(ctx, s32, NTTRACE_START_REASON),
	};

	if (migrate_inflight.update(&tid, &f) < 0) {
		int zero = 0;
		u64 *lost = migrate_lost.lookup(&zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
	}
	return 0;
}

int nttrace_migrate_done(void *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct migrate_key key = {
		.mode = TP_READ(ctx, u32, NTTRACE_DONE_MODE),
		.reason = TP_READ(ctx, s32, NTTRACE_DONE_REASON),
	};
	struct migrate_stats zero = {}, *s;
	struct migrate_inflight *f;

	s = migrate_stats.lookup_or_try_init(&key, &zero);
	if (!s)
		return 0;
	__sync_fetch_and_add(&s->succeeded, TP_READ(ctx, u64, NTTRACE_DONE_SUCCEEDED));
	__sync_fetch_and_add(&s->failed, TP_READ(ctx, u64, NTTRACE_DONE_FAILED));
	__sync_fetch_and_add(&s->thp_succeeded, TP_READ(ctx, u64, NTTRACE_DONE_THP_SUCCEEDED));
	__sync_fetch_and_add(&s->thp_failed, TP_READ(ctx, u64, NTTRACE_DONE_THP_FAILED));

	f = migrate_inflight.lookup(&tid);
	if (!f) {
		__sync_fetch_and_add(&s->unpaired, 1);
		return 0;
	}
	u64 delta = bpf_ktime_get_ns() - f->ts;
	migrate_inflight.delete(&tid);
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->sum_ns, delta);
	if (delta > s->max_ns)
		s->max_ns = delta;
	struct nttrace_hist_key hk = { .a = key.mode, .b = key.reason, .slot = bpf_log2l(delta) };
	migrate_latency.increment(hk);
#if NTTRACE_RECORD
	struct migrate_record r = {
		.ts = f->ts, .latency_ns = delta,
		.succeeded = TP_READ(ctx, u64, NTTRACE_DONE_SUCCEEDED),
		.failed = TP_READ(ctx, u64, NTTRACE_DONE_FAILED),
		.pid = tid, .mode = key.mode, .reason = key.reason,
	};
	migrate_records.perf_submit(ctx, &r, sizeof(r));
#endif
	return 0;
}
