// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
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
 * and from BTF: NTTRACE_MODES, NTTRACE_REASONS (enum sizes)
 *
 * Attach (NTTRACE_VIA_*): TRACEPOINT, the default; or, for the migrate_fn
 * probe, FENTRY or KPROBE on migrate_pages() itself: whole-function latency,
 * and a way in on kernels without the migrate tracepoints. There mode and
 * reason are parameters (NTTRACE_FN_MODE/_REASON by name for fentry, the
 * NTTRACE_FN_MODE_REG/_REASON_REG argument registers for kprobes, both from
 * BTF's prototype of migrate_pages) and no page counts exist: the return
 * value (pages not migrated, or -errno) is recorded instead.
 */
#include "common.h"
#include "inflight.h"

/*
 * Cost per event matters (the probe is meant to stay on, and every event
 * arrives with the caches cold from migrating pages): each program touches
 * one in-flight slot and at most one per-CPU row, reads ctx fields directly,
 * and calls no helper but the clock and the task id. Array lookups are
 * inlined by the verifier; hash lookups are not.
 *
 * Rows are indexed mode * NTTRACE_REASONS + reason, with both bounds from the
 * running kernel's enums (NTTRACE_MODES, NTTRACE_REASONS); out-of-range
 * values land in the last row, which user space reports. A row holds the
 * counters and the row's log2 latency histogram together, so one lookup
 * serves both.
 *
 * In-flight calls: inflight.h's direct-mapped table. Two tasks whose ids
 * share its index bits and that are inside migrate_pages() at the same time
 * lose one call's latency (counted as unpaired, never paired with the wrong
 * start).
 */
#define NTTRACE_ROWS (NTTRACE_MODES * NTTRACE_REASONS + 1)
#define NTTRACE_INFLIGHT_SLOTS 16384  /* a power of two (inflight.h) */

struct migrate_stats {
	u64 calls;          /* paired start/done                          */
	u64 succeeded;      /* pages                                      */
	u64 failed;
	u64 thp_succeeded;
	u64 thp_failed;
	u64 sum_ns;
	u64 max_ns;
	u64 unpaired;       /* done without a start (attached mid-call)   */
	u64 errors;         /* function mode: calls that returned -errno  */
	u64 hist[NTTRACE_SLOTS];  /* calls by log2(latency in ns)         */
};

struct migrate_inflight {
	u64 ts;             /* inflight.h: 0 is a free slot               */
	u32 tid;
	u32 mode;
	s32 reason;
	u32 pad;
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

BPF_ARRAY(migrate_inflight, struct migrate_inflight, NTTRACE_INFLIGHT_SLOTS);
BPF_PERCPU_ARRAY(migrate_stats, struct migrate_stats, NTTRACE_ROWS);
#if NTTRACE_RECORD
BPF_PERF_OUTPUT(migrate_records);
#endif

static __always_inline u32 row_of(u32 mode, s32 reason)
{
	if (mode >= NTTRACE_MODES || reason < 0 || reason >= NTTRACE_REASONS)
		return NTTRACE_ROWS - 1;
	return mode * NTTRACE_REASONS + (u32)reason;
}

static __always_inline struct migrate_inflight *inflight_slot(u32 tid)
{
	u32 idx = inflight_index(tid, NTTRACE_INFLIGHT_SLOTS);

	return migrate_inflight.lookup(&idx);
}

static __always_inline int migrate_enter(u32 mode, s32 reason)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct migrate_inflight *slot = inflight_slot(tid);
	struct migrate_inflight start = { .mode = mode, .reason = reason };

	/* a call it displaces is counted as unpaired at its end */
	if (slot)
		INFLIGHT_START(slot, tid, start);
	return 0;
}

/* Account the call that ends `now` in its row: its latency when its start
 * was seen (consuming that start), else as unpaired. Returns the start, or
 * 0 for an unpaired call. */
static __always_inline u64 account_call(struct migrate_stats *s, struct migrate_inflight *f, u64 now)
{
	if (!f) {
		s->unpaired++;
		return 0;
	}
	u64 start = INFLIGHT_END(f);
	u64 delta = now - start;

	s->calls++;
	NTTRACE_LATENCY(s, delta);
	return start;
}

#if defined(NTTRACE_VIA_TRACEPOINT)
int nttrace_migrate_start(void *ctx)
{
	return migrate_enter(TP_FIELD(ctx, u32, NTTRACE_START_MODE), TP_FIELD(ctx, s32, NTTRACE_START_REASON));
}

int nttrace_migrate_done(void *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct migrate_inflight *f = INFLIGHT_FIND(inflight_slot(tid), tid);
	u64 now = bpf_ktime_get_ns();
	u32 mode = TP_FIELD(ctx, u32, NTTRACE_DONE_MODE);
	s32 reason = TP_FIELD(ctx, s32, NTTRACE_DONE_REASON);
	u32 row = row_of(mode, reason);
	struct migrate_stats *s = migrate_stats.lookup(&row);

	if (!s)
		return 0;
	s->succeeded += TP_FIELD(ctx, u64, NTTRACE_DONE_SUCCEEDED);
	s->failed += TP_FIELD(ctx, u64, NTTRACE_DONE_FAILED);
	s->thp_succeeded += TP_FIELD(ctx, u64, NTTRACE_DONE_THP_SUCCEEDED);
	s->thp_failed += TP_FIELD(ctx, u64, NTTRACE_DONE_THP_FAILED);
#if NTTRACE_RECORD
	u64 start = account_call(s, f, now);

	if (!start)
		return 0;
	struct migrate_record r = {
		.ts = start, .latency_ns = now - start,
		.succeeded = TP_FIELD(ctx, u64, NTTRACE_DONE_SUCCEEDED),
		.failed = TP_FIELD(ctx, u64, NTTRACE_DONE_FAILED),
		.pid = tid, .mode = mode, .reason = reason,
	};
	migrate_records.perf_submit(ctx, &r, sizeof(r));
#else
	account_call(s, f, now);
#endif
	return 0;
}
#else /* function mode */

static __always_inline int migrate_fn_exit(void *ctx, int ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct migrate_inflight *f = INFLIGHT_FIND(inflight_slot(tid), tid);
	u64 now = bpf_ktime_get_ns();
	u32 row = f ? row_of(f->mode, f->reason) : NTTRACE_ROWS - 1;
	struct migrate_stats *s = migrate_stats.lookup(&row);

	if (!s || !account_call(s, f, now))
		return 0;
	if (ret > 0)
		s->failed += ret;
	else if (ret < 0)
		s->errors++;
	return 0;
}

#if defined(NTTRACE_VIA_FENTRY)
KFUNC_PROBE(migrate_pages, NTTRACE_FN_PARAMS)
{
	return migrate_enter((u32)NTTRACE_FN_MODE, (s32)NTTRACE_FN_REASON);
}

KRETFUNC_PROBE(migrate_pages, NTTRACE_FN_PARAMS, int ret)
{
	return migrate_fn_exit(ctx, ret);
}
#else
int nttrace_migrate_fn_entry(struct pt_regs *ctx)
{
	return migrate_enter((u32)NTTRACE_FN_MODE_REG(ctx), (s32)NTTRACE_FN_REASON_REG(ctx));
}

int nttrace_migrate_fn_return(struct pt_regs *ctx)
{
	return migrate_fn_exit(ctx, (int)PT_REGS_RC(ctx));
}
#endif
#endif
