// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * In-flight calls: what a call's start (a function's entry, a begin
 * tracepoint) leaves for its end (the return, the done tracepoint) on the
 * same task. Every nttrace program that times a call pairs its two ends
 * this way.
 *
 * A probe declares its own table, so that user space reads it like any other
 * of its maps (nttrace.bpf.map_decls), and the lookup of a task's slot (bcc
 * rewrites a map's lookup only outside a macro):
 *
 *	struct <probe>_inflight { u64 ts; u32 tid; ... };     ts and tid by these names
 *	BPF_ARRAY(<probe>_inflight, struct <probe>_inflight, SLOTS);
 *	u32 i = inflight_index(tid, SLOTS);  ... <probe>_inflight.lookup(&i)
 *
 * and goes through the macros below with the slot it looked up.
 *
 * The table is direct-mapped: a task's slot is the low bits of its thread id
 * (SLOTS a power of two), tagged with the whole id; ts 0 marks a free slot.
 * An array rather than a hash keyed by the thread id because the verifier
 * inlines an array lookup (a hash lookup is a helper call, and migrate's
 * programs run on every migrate_pages() call of a probe meant to stay on), and
 * because its slots exist from the start: a start never fails to go in for
 * want of room. The price: two tasks whose ids share those low bits, inside
 * the same kind of call at the same time. The later start displaces the
 * earlier (INFLIGHT_START says so); the earlier call's end finds no start of
 * its own and is counted by the probe as unpaired or lost, never paired with
 * the other task's start.
 */
#ifndef NTTRACE_INFLIGHT_H
#define NTTRACE_INFLIGHT_H

/* The slot of task `tid` in a table of `slots` entries (a power of two). */
static __always_inline u32 inflight_index(u32 tid, u32 slots)
{
	return tid & (slots - 1);
}

/*
 * Start task `tid`'s call: `start`, a struct of the table's type that the
 * caller has filled, goes into `slot` (not NULL) tagged with the tid and
 * stamped with the time, taken last so that what the caller read to fill it
 * is not part of the call's latency. Evaluates to 1 when the slot held
 * another task's call in flight (displaced: that call is lost), else 0.
 */
#define INFLIGHT_START(slot, tid, start) ({                                      \
		int __nt_displaced = (slot)->ts != 0 && (slot)->tid != (u32)(tid);  \
		(start).tid = (u32)(tid);                                            \
		(start).ts = bpf_ktime_get_ns();                                     \
		*(slot) = (start);                                                   \
		__nt_displaced;                                                      \
	})

/*
 * Task `tid`'s call in flight: `slot` when it holds that task's start, else
 * NULL (its start was not seen: attached mid-call, or displaced).
 */
#define INFLIGHT_FIND(slot, tid) ({                                              \
		typeof(slot) __nt_s = (slot);                                        \
		(__nt_s && __nt_s->ts != 0 && __nt_s->tid == (u32)(tid)) ? __nt_s : 0;  \
	})

/* End the call in `f` (a slot INFLIGHT_FIND returned): frees the slot and
 * evaluates to the call's start time. */
#define INFLIGHT_END(f) ({                                                       \
		u64 __nt_start = (f)->ts;                                            \
		(f)->ts = 0;                                                         \
		__nt_start;                                                          \
	})

#endif
