// SPDX-License-Identifier: Apache-2.0
/*
 * The traffic model the lab's QEMU plugin runs (traffic.c), kept free of
 * QEMU's API so the unit tests drive it directly (libtraffic-model.so):
 * the x86 decoder that tells a non-temporal store and a fast-string
 * instruction from the instruction's bytes, and a set-associative LLC with
 * write-combining buffers, counting per memory target (DRAM, the pmem
 * device) and per source (the caller's number for the instruction that made
 * the access: the plugin gives each guest instruction address one).
 *
 * It models memory traffic, not time: no latency, bandwidth or queueing.
 *
 * Policies (one line each, the model's whole contract):
 *   load          hit: nothing; miss: fill the line from its target (LRU victim out)
 *   store         write-allocate: a miss fills the line first (a read for
 *                 ownership from its target); the line becomes dirty
 *   string store  a store of a fast-string instruction (rep movs, rep stos):
 *                 under the RFO rule (fast_string_no_rfo 0) an ordinary store;
 *                 under the no-RFO rule (1) a miss allocates the line without
 *                 reading it, and the read for ownership is counted only when
 *                 the line is not written whole by string stores before any
 *                 other access to it, its eviction or the window's close (the
 *                 SDM's fast-string operation: full-line writes need no RFO)
 *   NT store      no allocate: a cached copy of the line is invalidated (written
 *                 back first when dirty); the bytes go to a write-combining
 *                 buffer, which writes the line to its target when all 64 bytes
 *                 are in it (a full-line write) or when it is evicted or flushed
 *                 (a partial write of the bytes it holds)
 *   victim        LRU; a dirty victim is written back to its target
 *   window open   the LLC and the WC buffers start empty (nothing counted)
 *   window close  the WC buffers are flushed and every dirty line written back,
 *                 counted in the window (so every store's eventual write reaches
 *                 the window that made it)
 * A cached access to a line held in a WC buffer flushes that buffer first.
 *
 * Who a count is charged to (tm_source_counts): a fill and the evictions it
 * causes to the access that missed; a write-back to the store that made the
 * line dirty; a deferred read for ownership to the string store that
 * allocated the line; a WC buffer's write to the NT store that opened it.
 */
#ifndef NTTRACE_TRAFFIC_MODEL_H
#define NTTRACE_TRAFFIC_MODEL_H

#include <stddef.h>
#include <stdint.h>

enum tm_target { TM_DRAM, TM_PMEM, TM_TARGETS };

/* What one window counts for one target. Fills, write-backs and evictions
 * are lines; loads and stores are the guest's accesses (one a memory operation). */
struct tm_counts {
	uint64_t loads;
	uint64_t stores;          /* ordinary (cached) stores */
	uint64_t nt_stores;
	uint64_t fills_load;      /* lines read from the target by a load miss */
	uint64_t fills_store;     /* lines read from the target for ownership (a store miss, or a
				     string store's line not written whole under the no-RFO rule) */
	uint64_t writebacks;      /* dirty lines written to the target (victims, invalidations, the close) */
	uint64_t writebacks_at_close;   /* of them, at the window's close */
	uint64_t nt_line_writes;  /* full 64-byte lines written from a WC buffer */
	uint64_t nt_partial_writes;     /* partial lines written from a WC buffer */
	uint64_t nt_partial_bytes;
	uint64_t nt_invalidates;  /* NT stores that found their line cached */
	uint64_t string_stores;   /* stores of fast-string instructions */
	uint64_t string_full_lines;     /* lines string stores wrote whole with no read (no-RFO rule) */
	uint64_t evictions;       /* lines of this target evicted from the LLC to make room for a fill */
};

/* What one source caused in one window on one target (who is charged: model.h's head). */
struct tm_source_counts {
	uint64_t fills_load;
	uint64_t fills_store;
	uint64_t writebacks;
	uint64_t nt_line_writes;
	uint64_t nt_partial_bytes;
	uint64_t evictions;       /* lines of this target its fills evicted */
};

struct tm_params {
	uint64_t llc_bytes;
	unsigned ways;
	unsigned line;            /* bytes; a power of two, at most 64 (one mask bit a byte) */
	unsigned wc_buffers;
	unsigned fast_string_no_rfo;    /* the string-store rule: 0 RFO, 1 no RFO for whole lines */
};

struct tm_model;

struct tm_model *tm_new(const struct tm_params *p);
void tm_free(struct tm_model *m);
/* Empties the LLC and the WC buffers and zeroes the counts (a window's open). */
void tm_reset(struct tm_model *m);
/* One guest access at address addr of size bytes, made by source src (any
 * number; 0 is as good as any other). Both targets share one address space
 * (the plugin's RAMBlock offsets): a line is its address, whatever the target. */
void tm_load(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src);
void tm_store(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src);
void tm_string_store(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src);
void tm_nt_store(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src);
/* A window's close: WC buffers flushed, deferred reads for ownership counted, dirty lines written back. */
void tm_close(struct tm_model *m);
const struct tm_counts *tm_counts(const struct tm_model *m, int target);
/* One past the highest source the window charged anything to (0: none). */
uint32_t tm_source_span(const struct tm_model *m);
/* What source src caused on target in the window (zeros for a source never charged). */
const struct tm_source_counts *tm_source_counts(const struct tm_model *m, uint32_t src, int target);

/* The decoder. Returns TM_INSN_NT_STORE for the non-temporal stores
 * (MOVNTI 0F C3, MOVNTQ 0F E7, MOVNTDQ 66 0F E7, MOVNTPS/PD [66] 0F 2B,
 * MOVNTSS/SD F3/F2 0F 2B, MASKMOVQ/MASKMOVDQU [66] 0F F7, and the VEX forms
 * VMOVNTPS/PD/DQ C4/C5 map 0F 2B/E7, VMASKMOVDQU), TM_INSN_FAST_STRING for
 * the repeated string stores (F3 or F2 with MOVS A4/A5, STOS AA/AB),
 * TM_INSN_MARKER_OPEN or _CLOSE for the window markers (below), else
 * TM_INSN_OTHER. Legacy prefixes and a REX prefix may precede the opcode. */
enum tm_insn { TM_INSN_OTHER, TM_INSN_NT_STORE, TM_INSN_MARKER_OPEN, TM_INSN_MARKER_CLOSE, TM_INSN_FAST_STRING };
int tm_decode(const uint8_t *bytes, size_t n);

/* Whether an instruction enters or leaves a function: TM_FLOW_CALL for a
 * near call (E8 rel32, FF /2), TM_FLOW_RET for a near return (C3, C2 iw),
 * TM_FLOW_IRET for an interrupt's return (IRET, CF, with REX.W: IRETQ),
 * else TM_FLOW_NONE; legacy prefixes (a notrack or bnd prefix) and REX may
 * precede them. The plugin follows the return address each pushes or pops
 * (an IRET pops the interrupted context's) to know a function's caller. */
enum tm_flow { TM_FLOW_NONE, TM_FLOW_CALL, TM_FLOW_RET, TM_FLOW_IRET };
int tm_flow(const uint8_t *bytes, size_t n);

/* The window markers: `nopl disp32(%rax)` (0F 1F 80 + disp32), a 7-byte
 * NOP, with disp32 = TM_MARKER_MAGIC | TM_MARKER_OPEN or _CLOSE. The plugin
 * sees the displacement when it translates the instruction; executing it
 * changes nothing in the guest. */
#define TM_MARKER_MAGIC 0x4e540000u    /* "NT" */
#define TM_MARKER_OPEN  0x0001u
#define TM_MARKER_CLOSE 0x0002u

#endif
