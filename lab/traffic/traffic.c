// SPDX-License-Identifier: Apache-2.0
/*
 * The lab's memory-traffic plugin for QEMU's TCG (plugin API version 1, as
 * Debian 12's QEMU 7.2 has it). It models memory traffic, not time.
 *
 * At translation every instruction is decoded from its bytes (model.c's
 * tm_decode, tm_flow): a window marker gets an execution callback, every
 * other instruction a memory callback carrying its entry in a table of
 * guest instruction addresses (its class: ordinary, NT store, fast string;
 * whether it is a call or a return; a user space instruction shares one
 * entry a class, its address not kept). Between the guest's open and close
 * markers each access is classed by where it lands
 * (qemu_plugin_hwaddr_phys_addr(), which in QEMU 7.2 is an offset in QEMU's
 * RAMBlock list, not a guest physical address: the pmem device's range is
 * given in those terms, from the monitor's `info ramblock`) and run through
 * two LLC models that differ only in the fast-string rule (model.h:
 * fast-string stores read for ownership, or not for lines they write
 * whole), charged to its instruction and the call site of the function
 * running it (a shadow of the call stacks, below); outside a window the
 * callback returns at once. Each window's counts go to the output file as
 * one JSON line at its close: per target under each rule, per (instruction
 * address, caller) that was charged anything (model.h says who is charged
 * what), and the TCG thread's and QEMU's CPU time the window took.
 *
 * Arguments (-plugin libtraffic.so,KEY=VALUE,...):
 *   out=PATH          the JSON-lines output (required)
 *   pmem=START:SIZE   the pmem device's RAMBlock range, hex or decimal (required)
 *   llc=BYTES ways=N line=BYTES wc=N   the model's geometry (default: 32 MiB,
 *                     16 ways, 64-byte lines, 10 write-combining buffers)
 *   model=0           the windows' CPU time only: no memory callback, no model
 *                     (what the same windows cost without the model)
 *
 * The windows and the models are global: the lab runs TCG single-threaded
 * (one host thread for every vCPU), so callbacks never run concurrently;
 * the plugin refuses a multi-threaded TCG (it cannot tell, so the lab's
 * driver passes what it runs: mttcg=0).
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <qemu-plugin.h>
#include "model.h"

#if !defined(QEMU_PLUGIN_VERSION) || QEMU_PLUGIN_VERSION != 1
#error "traffic.c is written against QEMU plugin API version 1 (QEMU 7.2's qemu-plugin.h)"
#endif

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* The two rules a window is counted under (model.h: string store). */
enum { RULE_RFO, RULE_NO_RFO, RULES };
static const char *const rule_keys[RULES] = { "counts", "counts_fast_string_no_rfo" };

static struct tm_model *models[RULES];
static struct tm_params params = { 32u << 20, 16, 64, 10, 0 };
static int modelled = 1;          /* model=0: the windows' CPU time only */
static uint64_t pmem_start, pmem_size;
static FILE *out;
static int open_window = -1;      /* the window open now, or -1 */
static int windows;               /* windows opened so far */
static uint64_t io_accesses, pmem_min, pmem_max, pmem_first;
static int pmem_seen;
static uint64_t translated, marked, unclosed;
static struct timespec opened_thread, opened_process;

static const char *const target_names[TM_TARGETS] = { "dram", "pmem" };
static const char *const class_names[] = { [TM_INSN_OTHER] = "ordinary", [TM_INSN_NT_STORE] = "nt",
					   [TM_INSN_FAST_STRING] = "fast-string" };

/* -- the guest's instruction addresses ----------------------------------------
 * One entry a (kernel address, class, call or return), made at translation
 * and kept: the kernel patches its own code (alternatives turn a jump to a
 * return thunk into a return), so one address may hold another instruction
 * later, translated again. User space addresses (the lower half) share one
 * entry a class. */
struct pc_entry {
	uint64_t pc;              /* 0: user space */
	int cls;
	int flow;                 /* TM_FLOW_*: a call or a return */
	uint64_t last_caller;     /* the last (caller, source) pair it was charged as */
	uint32_t last_src;
	struct pc_entry *next;
};

#define KERNEL_HALF 0xffff800000000000ull
#define CHUNK 4096
static struct pc_entry **buckets;
static uint64_t n_buckets, n_entries;
static struct pc_entry *chunk;
static unsigned chunk_used = CHUNK;
static struct pc_entry user_entries[TM_INSN_FAST_STRING + 1];

static uint64_t mix(uint64_t a, uint64_t b)
{
	return (a ^ (b * 0xff51afd7ed558ccdull)) * 0x9e3779b97f4a7c15ull;
}

static void grow_buckets(void)
{
	uint64_t n = n_buckets ? n_buckets * 2 : 1u << 16;
	struct pc_entry **b = calloc(n, sizeof(*b));

	if (!b)
		abort();
	for (uint64_t i = 0; i < n_buckets; i++)
		for (struct pc_entry *e = buckets[i], *next; e; e = next) {
			next = e->next;
			uint64_t h = mix(e->pc, (uint64_t)(e->cls | e->flow << 8)) >> 20 & (n - 1);
			e->next = b[h];
			b[h] = e;
		}
	free(buckets);
	buckets = b;
	n_buckets = n;
}

static struct pc_entry *entry_of(uint64_t pc, int cls, int flow)
{
	if (pc < KERNEL_HALF)
		return &user_entries[cls];
	if (n_entries >= n_buckets)
		grow_buckets();
	uint64_t h = mix(pc, (uint64_t)(cls | flow << 8)) >> 20 & (n_buckets - 1);
	for (struct pc_entry *e = buckets[h]; e; e = e->next)
		if (e->pc == pc && e->cls == cls && e->flow == flow)
			return e;
	if (chunk_used == CHUNK) {      /* entries stay where they are: callbacks hold them */
		chunk = calloc(CHUNK, sizeof(*chunk));
		if (!chunk)
			abort();
		chunk_used = 0;
	}
	struct pc_entry *e = &chunk[chunk_used++];
	e->pc = pc;
	e->cls = cls;
	e->flow = flow;
	e->next = buckets[h];
	buckets[h] = e;
	n_entries++;
	return e;
}

/* -- who called: a shadow of the kernel's call stacks ----------------------------
 * A near call's push stores its return address at a stack slot, a return's
 * pop loads it, an IRET loads the interrupted context from the frame above
 * whatever the interrupt pushed (TCG's helper loads reach the memory
 * callbacks): the callbacks see the slots' addresses. The shadow keeps, for
 * each kernel stack (16 KiB, THREAD_SIZE, aligned: a task's, an interrupt
 * stack), the (slot, call site) of each call the window has seen on it whose
 * return it has not; a call, return or IRET at a slot drops that stack's
 * entries at or below it (entry code that moves a return address before it
 * returns, as error_entry does, leaves a call its return never matches: the
 * IRET that ends the interrupt drops it). The stack of the last call, return
 * or IRET is the running one (a context switch returns on the next task's
 * stack; an interrupt's first call is on its own), and an access's caller is
 * the call site on its top: the function that called the one running, or
 * none known when the window has seen no call on it (frames entered before
 * the window opened are not known). Only kernel calls are followed, only in
 * windows. */
#define STACK_REGION(slot) ((slot) >> 14)
struct shadow_stack {
	uint64_t region;          /* 0: a free slot of the table */
	unsigned top, cap;
	uint64_t *slot, *site;
};
#define STACKS 1024               /* stacks a window can follow: more are not followed */
static struct shadow_stack stacks[STACKS];
static struct shadow_stack *running;

static struct shadow_stack *stack_of(uint64_t slot)
{
	uint64_t region = STACK_REGION(slot);

	if (running && running->region == region)
		return running;
	for (uint64_t h = mix(region, 0) >> 20 & (STACKS - 1), n = 0; n < STACKS; n++, h = (h + 1) & (STACKS - 1)) {
		if (stacks[h].region == region)
			return &stacks[h];
		if (!stacks[h].region) {
			stacks[h].region = region;
			stacks[h].top = 0;
			return &stacks[h];
		}
	}
	return NULL;
}

static void shadow_reset(void)
{
	for (unsigned i = 0; i < STACKS; i++) {
		stacks[i].region = 0;
		stacks[i].top = 0;
	}
	running = NULL;
}

/* A return or an IRET at slot: its stack's frames at or below it are over. */
static void shadow_drop(uint64_t slot)
{
	struct shadow_stack *s = stack_of(slot);

	running = s;
	if (!s)
		return;
	while (s->top && s->slot[s->top - 1] <= slot)
		s->top--;
}

static void shadow_call(uint64_t slot, uint64_t site)
{
	shadow_drop(slot);
	struct shadow_stack *s = running;
	if (!s)
		return;
	if (s->top == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->slot = realloc(s->slot, s->cap * sizeof(*s->slot));
		s->site = realloc(s->site, s->cap * sizeof(*s->site));
		if (!s->slot || !s->site)
			abort();
	}
	s->slot[s->top] = slot;
	s->site[s->top++] = site;
}

/* An access a call, return or IRET makes of a stack slot: 8 bytes, outside
 * the CPU entry area. TCG reports with an instruction's accesses also what
 * its helpers load (an IRET's and an interrupt's segment descriptors, 4
 * bytes each, from the GDT in the entry area), and an interrupt delivered
 * after an instruction is reported as that instruction's; the entry area's
 * own stacks are the entry code's trampolines (a user fault's error_entry
 * pushes there and returns elsewhere). */
#define CPU_ENTRY_AREA 0xfffffe0000000000ull
#define CPU_ENTRY_AREA_END 0xfffffe8000000000ull

static int is_stack_slot(uint64_t vaddr, qemu_plugin_meminfo_t info)
{
	return qemu_plugin_mem_size_shift(info) == 3 && !(vaddr >= CPU_ENTRY_AREA && vaddr < CPU_ENTRY_AREA_END);
}

static uint64_t shadow_caller(void)
{
	return running && running->top ? running->site[running->top - 1] : 0;
}

/* -- sources: what the models charge -------------------------------------------
 * One source number a (instruction entry, caller's call site), given the
 * first time a window charges it; 0 is never given. */
struct source {
	struct pc_entry *e;
	uint64_t caller;
};
static struct source *by_src;     /* source number -> its pair; 0 unused */
static uint32_t n_src, src_cap;
static uint32_t *pair_table;      /* open addressing: source numbers, 0 = free */
static uint64_t pair_slots;

static uint64_t pair_hash(const struct pc_entry *e, uint64_t caller, uint64_t n)
{
	return mix((uint64_t)(uintptr_t)e, caller) >> 17 & (n - 1);
}

static void grow_pairs(void)
{
	uint64_t n = pair_slots ? pair_slots * 2 : 1u << 16;
	uint32_t *t = calloc(n, sizeof(*t));

	if (!t)
		abort();
	for (uint32_t src = 1; src <= n_src; src++) {
		uint64_t h = pair_hash(by_src[src].e, by_src[src].caller, n);
		while (t[h])
			h = (h + 1) & (n - 1);
		t[h] = src;
	}
	free(pair_table);
	pair_table = t;
	pair_slots = n;
}

static uint32_t source_of(struct pc_entry *e, uint64_t caller)
{
	if (e->last_src && e->last_caller == caller)
		return e->last_src;
	if (2 * ((uint64_t)n_src + 1) >= pair_slots)
		grow_pairs();
	uint64_t h = pair_hash(e, caller, pair_slots);
	for (; pair_table[h]; h = (h + 1) & (pair_slots - 1)) {
		struct source *s = &by_src[pair_table[h]];
		if (s->e == e && s->caller == caller)
			break;
	}
	if (!pair_table[h]) {
		if (n_src + 1 >= src_cap) {
			src_cap = src_cap ? src_cap * 2 : 4096;
			by_src = realloc(by_src, src_cap * sizeof(*by_src));
			if (!by_src)
				abort();
		}
		pair_table[h] = ++n_src;
		by_src[n_src] = (struct source){ e, caller };
	}
	e->last_caller = caller;
	e->last_src = pair_table[h];
	return e->last_src;
}

static void mem_cb(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
	(void)vcpu;
	if (open_window < 0)
		return;
	struct pc_entry *e = udata;
	int store = qemu_plugin_mem_is_store(info);

	if (e->flow && is_stack_slot(vaddr, info)) {
		if (e->flow == TM_FLOW_CALL && store)
			shadow_call(vaddr, e->pc);
		else if (e->flow != TM_FLOW_CALL && !store)
			shadow_drop(vaddr);
	}
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
		io_accesses++;
		return;
	}
	uint64_t addr = qemu_plugin_hwaddr_phys_addr(hw);
	unsigned size = 1u << qemu_plugin_mem_size_shift(info);
	int target = addr - pmem_start < pmem_size ? TM_PMEM : TM_DRAM;
	uint32_t src = source_of(e, e->pc ? shadow_caller() : 0);

	if (target == TM_PMEM) {
		uint64_t off = addr - pmem_start;
		if (!pmem_seen) {
			pmem_first = pmem_min = pmem_max = off;
			pmem_seen = 1;
		}
		pmem_min = off < pmem_min ? off : pmem_min;
		pmem_max = off > pmem_max ? off : pmem_max;
	}
	for (int r = 0; r < RULES; r++) {
		if (!store)
			tm_load(models[r], target, addr, size, src);
		else if (e->cls == TM_INSN_NT_STORE)
			tm_nt_store(models[r], target, addr, size, src);
		else if (e->cls == TM_INSN_FAST_STRING)
			tm_string_store(models[r], target, addr, size, src);
		else
			tm_store(models[r], target, addr, size, src);
	}
}

static void write_counts(const char *name, const struct tm_counts *c, const char *sep)
{
	fprintf(out, "\"%s\":{\"loads\":%" PRIu64 ",\"stores\":%" PRIu64 ",\"nt_stores\":%" PRIu64
		",\"fills_load\":%" PRIu64 ",\"fills_store\":%" PRIu64 ",\"writebacks\":%" PRIu64
		",\"writebacks_at_close\":%" PRIu64 ",\"nt_line_writes\":%" PRIu64 ",\"nt_partial_writes\":%" PRIu64
		",\"nt_partial_bytes\":%" PRIu64 ",\"nt_invalidates\":%" PRIu64 ",\"string_stores\":%" PRIu64
		",\"string_full_lines\":%" PRIu64 ",\"evictions\":%" PRIu64 "}%s",
		name, c->loads, c->stores, c->nt_stores, c->fills_load, c->fills_store, c->writebacks,
		c->writebacks_at_close, c->nt_line_writes, c->nt_partial_writes, c->nt_partial_bytes,
		c->nt_invalidates, c->string_stores, c->string_full_lines, c->evictions, sep);
}

static int source_charged(const struct tm_source_counts *s)
{
	return s->fills_load || s->fills_store || s->writebacks || s->nt_line_writes || s->nt_partial_bytes ||
	       s->evictions;
}

static void write_source_counts(const struct tm_model *m, uint32_t src)
{
	fputc('[', out);
	for (int t = 0; t < TM_TARGETS; t++) {
		const struct tm_source_counts *s = tm_source_counts(m, src, t);
		fprintf(out, "%s%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, t ? "," : "",
			s->fills_load, s->fills_store, s->writebacks, s->nt_line_writes, s->nt_partial_bytes,
			s->evictions);
	}
	fputc(']', out);
}

/* Every (instruction address, caller's call site) the window charged
 * anything to, under both rules: [address, class, call site or "", the RFO
 * rule's counts, the no-RFO rule's], each counts list the fields for DRAM
 * then for the device. */
static void write_sources(void)
{
	int first = 1;

	fprintf(out, ",\"sources\":{\"targets\":[\"dram\",\"pmem\"],\"fields\":[\"fills_load\",\"fills_store\","
		"\"writebacks\",\"nt_line_writes\",\"nt_partial_bytes\",\"evictions\"],\"rows\":[");
	for (uint32_t src = 1; src <= n_src; src++) {
		int charged = 0;
		for (int r = 0; r < RULES; r++)
			charged |= source_charged(tm_source_counts(models[r], src, TM_DRAM)) ||
				   source_charged(tm_source_counts(models[r], src, TM_PMEM));
		if (!charged)
			continue;
		const struct source *s = &by_src[src];
		if (s->e->pc)
			fprintf(out, "%s[\"%" PRIx64 "\",\"%s\",", first ? "" : ",", s->e->pc, class_names[s->e->cls]);
		else
			fprintf(out, "%s[\"user\",\"%s\",", first ? "" : ",", class_names[s->e->cls]);
		if (s->caller)
			fprintf(out, "\"%" PRIx64 "\",", s->caller);
		else
			fprintf(out, "\"\",");
		for (int r = 0; r < RULES; r++) {
			write_source_counts(models[r], src);
			fputc(r + 1 < RULES ? ',' : ']', out);
		}
		first = 0;
	}
	fprintf(out, "]}");
}

static double seconds_since(clockid_t clock, const struct timespec *then)
{
	struct timespec now;

	clock_gettime(clock, &now);
	return (double)(now.tv_sec - then->tv_sec) + (double)(now.tv_nsec - then->tv_nsec) / 1e9;
}

static void close_window(const char *how)
{
	double thread_s = seconds_since(CLOCK_THREAD_CPUTIME_ID, &opened_thread);
	double process_s = seconds_since(CLOCK_PROCESS_CPUTIME_ID, &opened_process);

	fprintf(out, "{\"window\":%d,\"closed_by\":\"%s\",\"cpu_s\":{\"tcg_thread\":%.6f,\"qemu\":%.6f}", open_window,
		how, thread_s, process_s);
	if (modelled) {
		for (int r = 0; r < RULES; r++)
			tm_close(models[r]);
		fprintf(out, ",\"io_accesses\":%" PRIu64, io_accesses);
		if (pmem_seen)
			fprintf(out, ",\"pmem_offsets\":{\"first\":%" PRIu64 ",\"min\":%" PRIu64 ",\"max\":%" PRIu64 "}",
				pmem_first, pmem_min, pmem_max);
		for (int r = 0; r < RULES; r++) {
			fprintf(out, ",\"%s\":{", rule_keys[r]);
			for (int t = 0; t < TM_TARGETS; t++)
				write_counts(target_names[t], tm_counts(models[r], t), t + 1 < TM_TARGETS ? "," : "");
			fputc('}', out);
		}
		write_sources();
	}
	fprintf(out, "}\n");
	fflush(out);
	open_window = -1;
}

static void marker_cb(unsigned int vcpu, void *kind)
{
	(void)vcpu;
	if ((uintptr_t)kind == TM_INSN_MARKER_OPEN) {
		if (open_window >= 0) {
			unclosed++;
			close_window("open");   /* a window left open by a guest that died: closed, and said */
		}
		if (modelled)
			for (int r = 0; r < RULES; r++)
				tm_reset(models[r]);
		io_accesses = pmem_seen = 0;
		shadow_reset();
		open_window = windows++;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &opened_thread);
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &opened_process);
	} else if (open_window >= 0) {
		close_window("close");
	}
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	(void)id;
	size_t n = qemu_plugin_tb_n_insns(tb);

	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		int kind = tm_decode(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn));

		translated++;
		if (kind == TM_INSN_MARKER_OPEN || kind == TM_INSN_MARKER_CLOSE) {
			marked++;
			qemu_plugin_register_vcpu_insn_exec_cb(insn, marker_cb, QEMU_PLUGIN_CB_NO_REGS,
							       (void *)(uintptr_t)kind);
			continue;
		}
		if (modelled)
			qemu_plugin_register_vcpu_mem_cb(insn, mem_cb, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
							 entry_of(qemu_plugin_insn_vaddr(insn), kind,
								  tm_flow(qemu_plugin_insn_data(insn),
									  qemu_plugin_insn_size(insn))));
	}
}

static void at_exit(qemu_plugin_id_t id, void *p)
{
	(void)id;
	(void)p;
	if (open_window >= 0) {
		unclosed++;
		close_window("exit");
	}
	fprintf(out, "{\"end\":true,\"windows\":%d,\"unclosed\":%" PRIu64 ",\"translated_insns\":%" PRIu64
		",\"translated_markers\":%" PRIu64 ",\"kernel_insn_entries\":%" PRIu64 ",\"sources\":%" PRIu32 "}\n",
		windows, unclosed, translated, marked, n_entries, n_src);
	fclose(out);
	for (int r = 0; r < RULES; r++)
		tm_free(models[r]);
}

static int number(const char *s, uint64_t *v)
{
	char *end;

	*v = strtoull(s, &end, 0);
	return *s && !*end;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
	const char *path = NULL;
	int have_pmem = 0, mttcg = -1;
	uint64_t v;

	if (info->system_emulation == false || strcmp(info->target_name, "x86_64") != 0) {
		fprintf(stderr, "traffic: needs qemu-system-x86_64 (got %s)\n", info->target_name);
		return -1;
	}
	if (info->version.min > QEMU_PLUGIN_VERSION || info->version.cur < QEMU_PLUGIN_VERSION) {
		fprintf(stderr, "traffic: built for plugin API %d, QEMU offers %d..%d\n", QEMU_PLUGIN_VERSION,
			info->version.min, info->version.cur);
		return -1;
	}
	for (int i = 0; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		if (!eq) {
			fprintf(stderr, "traffic: argument '%s' is not KEY=VALUE\n", argv[i]);
			return -1;
		}
		*eq = 0;
		const char *k = argv[i], *val = eq + 1;
		if (!strcmp(k, "out")) {
			path = val;
		} else if (!strcmp(k, "pmem")) {
			char *colon = strchr(val, ':');
			if (!colon) {
				fprintf(stderr, "traffic: pmem=START:SIZE\n");
				return -1;
			}
			*colon = 0;
			if (!number(val, &pmem_start) || !number(colon + 1, &pmem_size) || !pmem_size) {
				fprintf(stderr, "traffic: pmem=START:SIZE, numbers\n");
				return -1;
			}
			have_pmem = 1;
		} else if (!strcmp(k, "mttcg") && number(val, &v)) {
			mttcg = (int)v;
		} else if (!strcmp(k, "llc") && number(val, &v)) {
			params.llc_bytes = v;
		} else if (!strcmp(k, "ways") && number(val, &v)) {
			params.ways = (unsigned)v;
		} else if (!strcmp(k, "line") && number(val, &v)) {
			params.line = (unsigned)v;
		} else if (!strcmp(k, "wc") && number(val, &v)) {
			params.wc_buffers = (unsigned)v;
		} else if (!strcmp(k, "model") && number(val, &v) && v <= 1) {
			modelled = (int)v;
		} else {
			fprintf(stderr, "traffic: unknown or bad argument %s=%s\n", k, val);
			return -1;
		}
	}
	if (!path || !have_pmem || mttcg != 0) {
		fprintf(stderr, "traffic: needs out=PATH, pmem=START:SIZE and mttcg=0 (-accel tcg,thread=single)\n");
		return -1;
	}
	for (int c = 0; c <= TM_INSN_FAST_STRING; c++)
		user_entries[c].cls = c;
	for (int r = 0; r < RULES; r++) {
		struct tm_params rule = params;
		rule.fast_string_no_rfo = r == RULE_NO_RFO;
		models[r] = modelled ? tm_new(&rule) : NULL;
		if (modelled && !models[r]) {
			fprintf(stderr, "traffic: bad geometry: llc=%" PRIu64 " ways=%u line=%u wc=%u\n", params.llc_bytes,
				params.ways, params.line, params.wc_buffers);
			return -1;
		}
	}
	out = fopen(path, "w");
	if (!out) {
		perror(path);
		return -1;
	}
	fprintf(out, "{\"model\":{\"what\":\"memory traffic, not time\",\"llc_bytes\":%" PRIu64 ",\"ways\":%u,"
		"\"line\":%u,\"wc_buffers\":%u,\"sets\":%" PRIu64 ",\"policy\":\"loads allocate; stores write-allocate, "
		"write-back; NT stores no-allocate (invalidate), write-combined; LRU; empty at a window's open, "
		"written back at its close\",\"rules\":{\"counts\":\"fast-string stores read for ownership as "
		"ordinary stores do\",\"counts_fast_string_no_rfo\":\"fast-string stores that write a line whole "
		"read nothing (the SDM's fast-string operation)\"},\"modelled\":%s},"
		"\"pmem_ramblock\":{\"start\":%" PRIu64 ",\"size\":%" PRIu64 "},"
		"\"qemu\":\"%s\",\"plugin_api\":%d}\n",
		params.llc_bytes, params.ways, params.line, params.wc_buffers,
		params.llc_bytes / ((uint64_t)params.ways * params.line), modelled ? "true" : "false", pmem_start,
		pmem_size, info->target_name,
		QEMU_PLUGIN_VERSION);
	fflush(out);
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
