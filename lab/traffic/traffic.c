// SPDX-License-Identifier: Apache-2.0
/*
 * The lab's memory-traffic plugin for QEMU's TCG (plugin API version 1, as
 * Debian 12's QEMU 7.2 has it). It models memory traffic, not time.
 *
 * At translation every instruction is decoded from its bytes (model.c's
 * tm_decode): a window marker gets an execution callback, every other
 * instruction a memory callback, told whether it is a non-temporal store.
 * Between the guest's open and close markers each access is classed by where
 * it lands (qemu_plugin_hwaddr_phys_addr(), which in QEMU 7.2 is an offset in
 * QEMU's RAMBlock list, not a guest physical address: the pmem device's range
 * is given in those terms, from the monitor's `info ramblock`) and run
 * through the LLC model; outside a window the callback returns at once.
 * Each window's counts go to the output file as one JSON line at its close.
 *
 * Arguments (-plugin libtraffic.so,KEY=VALUE,...):
 *   out=PATH          the JSON-lines output (required)
 *   pmem=START:SIZE   the pmem device's RAMBlock range, hex or decimal (required)
 *   llc=BYTES ways=N line=BYTES wc=N   the model's geometry (default: 32 MiB,
 *                     16 ways, 64-byte lines, 10 write-combining buffers)
 *
 * The windows and the model are global: the lab runs TCG single-threaded
 * (one host thread for every vCPU), so callbacks never run concurrently;
 * the plugin refuses a multi-threaded TCG (it cannot tell, so the lab's
 * driver passes what it runs: mttcg=0).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <qemu-plugin.h>
#include "model.h"

#if !defined(QEMU_PLUGIN_VERSION) || QEMU_PLUGIN_VERSION != 1
#error "traffic.c is written against QEMU plugin API version 1 (QEMU 7.2's qemu-plugin.h)"
#endif

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static struct tm_model *model;
static struct tm_params params = { 32u << 20, 16, 64, 10 };
static uint64_t pmem_start, pmem_size;
static FILE *out;
static int open_window = -1;      /* the window open now, or -1 */
static int windows;               /* windows opened so far */
static uint64_t io_accesses, pmem_min, pmem_max, pmem_first;
static int pmem_seen;
static uint64_t translated, marked, unclosed;

static const char *const target_names[TM_TARGETS] = { "dram", "pmem" };

static void mem_cb(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *nt)
{
	(void)vcpu;
	if (open_window < 0)
		return;
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
		io_accesses++;
		return;
	}
	uint64_t addr = qemu_plugin_hwaddr_phys_addr(hw);
	unsigned size = 1u << qemu_plugin_mem_size_shift(info);
	int target = addr - pmem_start < pmem_size ? TM_PMEM : TM_DRAM;
	int store = qemu_plugin_mem_is_store(info);

	if (target == TM_PMEM) {
		uint64_t off = addr - pmem_start;
		if (!pmem_seen) {
			pmem_first = pmem_min = pmem_max = off;
			pmem_seen = 1;
		}
		pmem_min = off < pmem_min ? off : pmem_min;
		pmem_max = off > pmem_max ? off : pmem_max;
	}
	if (!store)
		tm_load(model, target, addr, size);
	else if (nt)
		tm_nt_store(model, target, addr, size);
	else
		tm_store(model, target, addr, size);
}

static void write_counts(const char *name, const struct tm_counts *c, const char *sep)
{
	fprintf(out, "\"%s\":{\"loads\":%" PRIu64 ",\"stores\":%" PRIu64 ",\"nt_stores\":%" PRIu64
		",\"fills_load\":%" PRIu64 ",\"fills_store\":%" PRIu64 ",\"writebacks\":%" PRIu64
		",\"writebacks_at_close\":%" PRIu64 ",\"nt_line_writes\":%" PRIu64 ",\"nt_partial_writes\":%" PRIu64
		",\"nt_partial_bytes\":%" PRIu64 ",\"nt_invalidates\":%" PRIu64 "}%s",
		name, c->loads, c->stores, c->nt_stores, c->fills_load, c->fills_store, c->writebacks,
		c->writebacks_at_close, c->nt_line_writes, c->nt_partial_writes, c->nt_partial_bytes,
		c->nt_invalidates, sep);
}

static void close_window(const char *how)
{
	tm_close(model);
	fprintf(out, "{\"window\":%d,\"closed_by\":\"%s\",\"io_accesses\":%" PRIu64 ",", open_window, how, io_accesses);
	if (pmem_seen)
		fprintf(out, "\"pmem_offsets\":{\"first\":%" PRIu64 ",\"min\":%" PRIu64 ",\"max\":%" PRIu64 "},",
			pmem_first, pmem_min, pmem_max);
	fprintf(out, "\"counts\":{");
	for (int t = 0; t < TM_TARGETS; t++)
		write_counts(target_names[t], tm_counts(model, t), t + 1 < TM_TARGETS ? "," : "");
	fprintf(out, "}}\n");
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
		tm_reset(model);
		io_accesses = pmem_seen = 0;
		open_window = windows++;
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
		qemu_plugin_register_vcpu_mem_cb(insn, mem_cb, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
						 kind == TM_INSN_NT_STORE ? (void *)1 : NULL);
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
		",\"translated_markers\":%" PRIu64 "}\n", windows, unclosed, translated, marked);
	fclose(out);
	tm_free(model);
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
		} else {
			fprintf(stderr, "traffic: unknown or bad argument %s=%s\n", k, val);
			return -1;
		}
	}
	if (!path || !have_pmem || mttcg != 0) {
		fprintf(stderr, "traffic: needs out=PATH, pmem=START:SIZE and mttcg=0 (-accel tcg,thread=single)\n");
		return -1;
	}
	model = tm_new(&params);
	if (!model) {
		fprintf(stderr, "traffic: bad geometry: llc=%" PRIu64 " ways=%u line=%u wc=%u\n", params.llc_bytes,
			params.ways, params.line, params.wc_buffers);
		return -1;
	}
	out = fopen(path, "w");
	if (!out) {
		perror(path);
		return -1;
	}
	fprintf(out, "{\"model\":{\"what\":\"memory traffic, not time\",\"llc_bytes\":%" PRIu64 ",\"ways\":%u,"
		"\"line\":%u,\"wc_buffers\":%u,\"sets\":%" PRIu64 ",\"policy\":\"loads allocate; stores write-allocate, "
		"write-back; NT stores no-allocate (invalidate), write-combined; LRU; empty at a window's open, "
		"written back at its close\"},\"pmem_ramblock\":{\"start\":%" PRIu64 ",\"size\":%" PRIu64 "},"
		"\"qemu\":\"%s\",\"plugin_api\":%d}\n",
		params.llc_bytes, params.ways, params.line, params.wc_buffers,
		params.llc_bytes / ((uint64_t)params.ways * params.line), pmem_start, pmem_size, info->target_name,
		QEMU_PLUGIN_VERSION);
	fflush(out);
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
