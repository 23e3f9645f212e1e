// SPDX-License-Identifier: Apache-2.0
/*
 * traffic-guest: the lab guest's workload for the traffic plugin's own
 * tests. It runs the native reference's copies (the C files of native/, linked in) on a
 * devdax mapping of the pmem device and on anonymous DRAM, each inside one
 * plugin window (window.h), and writes what each window did as JSON, so the
 * host can set the plugin's counts against first principles.
 *
 *   traffic-guest /dev/daxX.Y OUT.json
 *   traffic-guest window open|close     (a window around what a script runs next)
 *   traffic-guest hold MIB READY         (MIB of anonymous memory touched, READY
 *                                         written, then held until killed)
 *
 * Every buffer is touched before the first window: no page fault (and no
 * kernel write to the device's memmap) falls inside one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "nttrace_native.h"
#include "window.h"

#define MiB (1ul << 20)
#define COPY (16 * MiB)           /* the copies' size */
#define MAP (64 * MiB)            /* of the devdax device: src at 0, dst at 32 MiB */
#define PMEM_SRC 0
#define PMEM_DST (32 * MiB)
#define PROBE_OFF (48 * MiB + 0x1238)   /* the mapping probe's 8-byte store */
#define PAGES 256                 /* the page copies: 1 MiB */
#define STRING (1 * MiB)          /* the fast-string copies and fills */
#define PARTIAL_LINES 256         /* the partial NT writes: 8 bytes of each of 256 lines */
/* the warm cache: a resident set of 16 MiB of the device (8 lines in each of
 * the model's 32768 sets), then a 16 MiB copy from the next 16 MiB to dst */
#define RESIDENT (16 * MiB)
#define WARM_SRC (16 * MiB)

static FILE *log_f;
static int first = 1;

static void say(const char *label, const char *what, const char *src, const char *dst, unsigned long bytes,
		unsigned long dst_off)
{
	fprintf(log_f, "%s\n  {\"label\":\"%s\",\"what\":\"%s\",\"src\":\"%s\",\"dst\":\"%s\",\"bytes\":%lu,"
		"\"dst_offset\":%lu}", first ? "" : ",", label, what, src, dst, bytes, dst_off);
	first = 0;
	fflush(log_f);
}

static void touch(unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i += 4096)
		p[i] = (unsigned char)i;
}

/* The fast-string stores: rep stosb and rep stosq, as the kernel's
 * clear_page_erms and memset use them (copy-shaped: src is not read). */
static void fill_rep_stosb(void *dst, const void *src, size_t len)
{
	(void)src;
	__asm__ volatile("rep stosb" : "+D"(dst), "+c"(len) : "a"(0x5a) : "memory");
}

static void fill_rep_stosq(void *dst, const void *src, size_t len)
{
	size_t quads = len / 8;

	(void)src;
	__asm__ volatile("rep stosq" : "+D"(dst), "+c"(quads) : "a"(0x5a5a5a5a5a5a5a5aull) : "memory");
}

/* A copy (or fill) in a window of its own: len bytes to dst_off of the
 * device's mapping from the device's source, DRAM or nothing, drained
 * after when its stores are NT. */
struct copy_window {
	const char *label, *what;
	nt_copy_fn fn;
	int nt;
	const char *src;          /* "pmem", "dram" or "" */
	size_t len;
	unsigned long dst_off;
};

static void run_window(const struct copy_window *c, unsigned char *pm, unsigned char *dram)
{
	const unsigned char *src = !strcmp(c->src, "pmem") ? pm + PMEM_SRC : !strcmp(c->src, "dram") ? dram : NULL;

	TRAFFIC_WINDOW_OPEN();
	c->fn(pm + c->dst_off, src, c->len);
	if (c->nt)
		nt_drain();
	TRAFFIC_WINDOW_CLOSE();
	say(c->label, c->what, c->src, "pmem", c->len, c->dst_off);
}

/* One 8-byte MOVNTI: a partial line in a write-combining buffer. */
static void movnti8(void *dst, uint64_t v)
{
	__asm__ volatile("movnti %1, %0" : "=m"(*(uint64_t *)dst) : "r"(v));
}

/* One load a line: the lines of [p, p + len) resident in the LLC. */
static void read_lines(const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i += 64)
		(void)*(const volatile uint64_t *)(p + i);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "window")) {
		if (!strcmp(argv[2], "open"))
			TRAFFIC_WINDOW_OPEN();
		else if (!strcmp(argv[2], "close"))
			TRAFFIC_WINDOW_CLOSE();
		else
			return 2;
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "hold")) {
		size_t len = strtoul(argv[2], NULL, 0) * MiB;
		unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 3;
		}
		touch(p, len);
		FILE *f = fopen(argv[3], "w");
		if (!f || fclose(f)) {
			perror(argv[3]);
			return 3;
		}
		for (;;)
			pause();
	}
	if (argc != 3) {
		fprintf(stderr, "usage: traffic-guest /dev/daxX.Y OUT.json\n");
		return 2;
	}
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 3;
	}
	unsigned char *pm = mmap(NULL, MAP, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (pm == MAP_FAILED) {
		perror("mmap devdax");
		return 3;
	}
	unsigned char *dram = mmap(NULL, COPY, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
				   -1, 0);
	if (dram == MAP_FAILED) {
		perror("mmap anonymous");
		return 3;
	}
	log_f = fopen(argv[2], "w");
	if (!log_f) {
		perror(argv[2]);
		return 3;
	}
	touch(pm, MAP);
	touch(dram, COPY);
	for (size_t i = 0; i < COPY; i += 8)
		*(uint64_t *)(pm + PMEM_SRC + i) = i * 0x9e3779b97f4a7c15ull;
	memcpy(dram, pm + PMEM_SRC, COPY);
	fprintf(log_f, "{\"windows\":[");

	/* 0: nothing: what the kernel does in a window on its own */
	TRAFFIC_WINDOW_OPEN();
	TRAFFIC_WINDOW_CLOSE();
	say("empty", "nothing", "", "", 0, 0);

	static const struct copy_window copies[] = {
		{ "cached_pmem_pmem", "nt_copy_movq_unrolled", nt_copy_movq_unrolled, 0, "pmem", COPY, PMEM_DST },
		{ "nt_pmem_pmem", "nt_copy_generic", nt_copy_generic, 1, "pmem", COPY, PMEM_DST },
		{ "cached_dram_pmem", "nt_copy_movq_unrolled", nt_copy_movq_unrolled, 0, "dram", COPY, PMEM_DST },
		{ "nt_dram_pmem", "nt_copy_generic", nt_copy_generic, 1, "dram", COPY, PMEM_DST },
	};
	/* the fast strings, each method: every destination line written whole
	 * (aligned), and a copy 8 bytes off, whose first and last lines are not */
	static const struct copy_window strings[] = {
		{ "string_movsb_dram_pmem", "rep movsb", nt_copy_rep_movsb, 0, "dram", STRING, PMEM_DST },
		{ "string_movsq_dram_pmem", "rep movsq", nt_copy_rep_movsq, 0, "dram", STRING, PMEM_DST },
		{ "string_stosb_pmem", "rep stosb", fill_rep_stosb, 0, "", STRING, PMEM_DST },
		{ "string_stosq_pmem", "rep stosq", fill_rep_stosq, 0, "", STRING, PMEM_DST },
		{ "string_movsb_dram_pmem_misaligned", "rep movsb", nt_copy_rep_movsb, 0, "dram", STRING - 16, PMEM_DST + 8 },
	};
	for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++)
		run_window(&copies[i], pm, dram);

	/* the demotion shape: 4 KiB pages DRAM -> pmem, each way the native reference has */
	for (int method = 0; method < NT_PAGE_COUNT; method++) {
		char label[64];
		if (!nt_page_method_supported(method))
			continue;
		snprintf(label, sizeof(label), "pages_%s", nt_page_method_name(method));
		TRAFFIC_WINDOW_OPEN();
		for (int p = 0; p < PAGES; p++)
			nt_copy_page(method, pm + PMEM_DST + p * 4096ul, dram + p * 4096ul);
		nt_drain();
		TRAFFIC_WINDOW_CLOSE();
		say(label, nt_page_method_name(method), "dram", "pmem", PAGES * 4096ul, PMEM_DST);
	}

	for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
		run_window(&strings[i], pm, dram);

	/* partial NT lines: 8 bytes of each of 256 lines, then drained */
	TRAFFIC_WINDOW_OPEN();
	for (int l = 0; l < PARTIAL_LINES; l++)
		movnti8(pm + PMEM_DST + 64ul * l + 16, (uint64_t)l);
	nt_drain();
	TRAFFIC_WINDOW_CLOSE();
	say("nt_partial_pmem", "movnti, 8 bytes a line", "", "pmem", PARTIAL_LINES * 8ul, PMEM_DST);

	/* a warm cache: the resident set, then an ordinary and an NT copy */
	TRAFFIC_WINDOW_OPEN();
	read_lines(pm, RESIDENT);
	nt_copy_movq_unrolled(pm + PMEM_DST, pm + WARM_SRC, COPY);
	TRAFFIC_WINDOW_CLOSE();
	say("warm_cached_pmem_pmem", "nt_copy_movq_unrolled after a resident set", "pmem", "pmem", COPY, PMEM_DST);

	TRAFFIC_WINDOW_OPEN();
	read_lines(pm, RESIDENT);
	nt_copy_generic(pm + PMEM_DST, pm + WARM_SRC, COPY);
	nt_drain();
	TRAFFIC_WINDOW_CLOSE();
	say("warm_nt_pmem_pmem", "nt_copy_generic after a resident set", "pmem", "pmem", COPY, PMEM_DST);

	/* the mapping probe: one 8-byte store at a known offset of the device */
	TRAFFIC_WINDOW_OPEN();
	*(volatile uint64_t *)(pm + PROBE_OFF) = 0x4e54747261666663ull;
	TRAFFIC_WINDOW_CLOSE();
	say("probe", "one 8-byte store", "", "pmem", 8, PROBE_OFF);

	fprintf(log_f, "\n],\"features\":%u}\n", nt_cpu_features());
	if (fclose(log_f)) {
		perror(argv[2]);
		return 3;
	}
	return 0;
}
