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

	TRAFFIC_WINDOW_OPEN();
	nt_copy_movq_unrolled(pm + PMEM_DST, pm + PMEM_SRC, COPY);
	TRAFFIC_WINDOW_CLOSE();
	say("cached_pmem_pmem", "nt_copy_movq_unrolled", "pmem", "pmem", COPY, PMEM_DST);

	TRAFFIC_WINDOW_OPEN();
	nt_copy_generic(pm + PMEM_DST, pm + PMEM_SRC, COPY);
	nt_drain();
	TRAFFIC_WINDOW_CLOSE();
	say("nt_pmem_pmem", "nt_copy_generic", "pmem", "pmem", COPY, PMEM_DST);

	TRAFFIC_WINDOW_OPEN();
	nt_copy_movq_unrolled(pm + PMEM_DST, dram, COPY);
	TRAFFIC_WINDOW_CLOSE();
	say("cached_dram_pmem", "nt_copy_movq_unrolled", "dram", "pmem", COPY, PMEM_DST);

	TRAFFIC_WINDOW_OPEN();
	nt_copy_generic(pm + PMEM_DST, dram, COPY);
	nt_drain();
	TRAFFIC_WINDOW_CLOSE();
	say("nt_dram_pmem", "nt_copy_generic", "dram", "pmem", COPY, PMEM_DST);

	/* the demotion shape: 4 KiB pages DRAM -> pmem, each way the native reference has */
	for (int method = 0; method < NT_PAGE_COUNT; method++) {
		char label[64];
		if (method == NT_PAGE_REP_MOVSB || !nt_page_method_supported(method))
			continue;
		snprintf(label, sizeof(label), "pages_%s", nt_page_method_name(method));
		TRAFFIC_WINDOW_OPEN();
		for (int p = 0; p < PAGES; p++)
			nt_copy_page(method, pm + PMEM_DST + p * 4096ul, dram + p * 4096ul);
		nt_drain();
		TRAFFIC_WINDOW_CLOSE();
		say(label, nt_page_method_name(method), "dram", "pmem", PAGES * 4096ul, PMEM_DST);
	}

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
