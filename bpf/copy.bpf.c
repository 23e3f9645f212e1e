// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * copy probe: calls and bytes of the kernel's page/folio copy routines, so a
 * user sees which one really ran: folio_copy, folio_mc_copy (cached) and
 * folio_mc_copy_nt, copy_mc_page_nt (NT demotion series). One program per
 * routine present in kallsyms, fentry where BTF describes the routine and
 * kprobe otherwise; the loader emits NTTRACE_COPY_ROUTINES as a list of
 * COPY_{FOLIO,PAGE}_{FENTRY,KPROBE}(idx, symbol) entries.
 *
 * Folio size from BTF: NTTRACE_FOLIO_FLAGS (offset of folio.flags),
 * NTTRACE_PG_HEAD (bit number of PG_head), NTTRACE_FOLIO_ORDER (byte offset
 * of the order: folio._flags_1 low byte, or folio._folio_order).
 */
#include "common.h"

struct copy_stats {
	u64 calls;
	u64 bytes;
};

BPF_ARRAY(copy_stats, struct copy_stats, 16);

static __always_inline void account(int idx, u64 bytes)
{
	struct copy_stats *s = copy_stats.lookup(&idx);

	if (s) {
		__sync_fetch_and_add(&s->calls, 1);
		__sync_fetch_and_add(&s->bytes, bytes);
	}
}

static __always_inline u64 folio_bytes(void *folio)
{
	u64 flags = KREAD(folio, u64, NTTRACE_FOLIO_FLAGS);

	if (!(flags & (1ull << NTTRACE_PG_HEAD)))
		return 4096;
	return 4096ull << (KREAD(folio, u8, NTTRACE_FOLIO_ORDER) & 63);
}

#define COPY_FOLIO_FENTRY(idx, sym) KFUNC_PROBE(sym, void *dst, void *src) { account(idx, folio_bytes(src)); return 0; }
#define COPY_PAGE_FENTRY(idx, sym) KFUNC_PROBE(sym, void *to, void *from) { account(idx, 4096); return 0; }
#define COPY_FOLIO_KPROBE(idx, sym) int nttrace_copy_##sym(struct pt_regs *ctx) { account(idx, folio_bytes((void *)PT_REGS_PARM2(ctx))); return 0; }
#define COPY_PAGE_KPROBE(idx, sym) int nttrace_copy_##sym(struct pt_regs *ctx) { account(idx, 4096); return 0; }

NTTRACE_COPY_ROUTINES
