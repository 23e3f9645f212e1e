// SPDX-License-Identifier: Apache-2.0
/* The LLC / write-combining model and the instruction decoder (model.h). */
#include <stdlib.h>
#include <string.h>
#include "model.h"

struct tm_wc {
	uint64_t line;            /* line number + 1; 0 = free */
	uint64_t mask;            /* bytes held, one bit a byte */
	uint64_t stamp;
	int target;
	uint32_t src;             /* the NT store that opened it */
};

struct tm_model {
	struct tm_params p;
	uint64_t sets;
	uint64_t *tag;            /* sets * ways: line number + 1, 0 = invalid */
	uint64_t *stamp;          /* LRU: the clock at the last use */
	uint64_t *pend;           /* no-RFO rule: bytes string stores wrote of a line not read; 0 = none */
	uint32_t *wsrc;           /* the store that made the line dirty */
	uint32_t *psrc;           /* the string store that allocated a pending line */
	uint8_t *dirty;
	uint8_t *target;
	uint64_t clock;
	uint64_t full_mask;
	unsigned wc_used;
	struct tm_wc *wc;
	struct tm_counts c[TM_TARGETS];
	struct tm_source_counts *by_src[TM_TARGETS];   /* per source, grown on demand */
	uint32_t src_cap, src_span;
};

static const struct tm_source_counts no_counts;

struct tm_model *tm_new(const struct tm_params *p)
{
	if (!p->line || p->line > 64 || (p->line & (p->line - 1)) || !p->ways || !p->wc_buffers ||
	    p->llc_bytes < (uint64_t)p->ways * p->line || p->llc_bytes % ((uint64_t)p->ways * p->line) ||
	    p->fast_string_no_rfo > 1)
		return NULL;
	struct tm_model *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->p = *p;
	m->sets = p->llc_bytes / ((uint64_t)p->ways * p->line);
	size_t n = m->sets * p->ways;
	m->tag = calloc(n, sizeof(*m->tag));
	m->stamp = calloc(n, sizeof(*m->stamp));
	m->pend = calloc(n, sizeof(*m->pend));
	m->wsrc = calloc(n, sizeof(*m->wsrc));
	m->psrc = calloc(n, sizeof(*m->psrc));
	m->dirty = calloc(n, 1);
	m->target = calloc(n, 1);
	m->wc = calloc(p->wc_buffers, sizeof(*m->wc));
	if (!m->tag || !m->stamp || !m->pend || !m->wsrc || !m->psrc || !m->dirty || !m->target || !m->wc) {
		tm_free(m);
		return NULL;
	}
	m->full_mask = p->line == 64 ? ~(uint64_t)0 : (((uint64_t)1 << p->line) - 1);
	return m;
}

void tm_free(struct tm_model *m)
{
	if (!m)
		return;
	free(m->tag);
	free(m->stamp);
	free(m->pend);
	free(m->wsrc);
	free(m->psrc);
	free(m->dirty);
	free(m->target);
	free(m->wc);
	for (int t = 0; t < TM_TARGETS; t++)
		free(m->by_src[t]);
	free(m);
}

void tm_reset(struct tm_model *m)
{
	size_t n = m->sets * m->p.ways;

	memset(m->tag, 0, n * sizeof(*m->tag));
	memset(m->dirty, 0, n);
	memset(m->pend, 0, n * sizeof(*m->pend));
	memset(m->wc, 0, m->p.wc_buffers * sizeof(*m->wc));
	m->wc_used = 0;
	memset(m->c, 0, sizeof(m->c));
	for (int t = 0; t < TM_TARGETS; t++)
		if (m->by_src[t])
			memset(m->by_src[t], 0, m->src_span * sizeof(*m->by_src[t]));
	m->src_span = 0;
}

const struct tm_counts *tm_counts(const struct tm_model *m, int target)
{
	return &m->c[target];
}

uint32_t tm_source_span(const struct tm_model *m)
{
	return m->src_span;
}

const struct tm_source_counts *tm_source_counts(const struct tm_model *m, uint32_t src, int target)
{
	return src < m->src_span ? &m->by_src[target][src] : &no_counts;
}

/* Source src's counts on target, the table grown to hold it. The model
 * cannot go on without them, so running out of memory ends the process. */
static struct tm_source_counts *charge(struct tm_model *m, int target, uint32_t src)
{
	if (src >= m->src_cap) {
		uint32_t cap = m->src_cap ? m->src_cap : 1024;
		while (cap <= src)
			cap *= 2;
		for (int t = 0; t < TM_TARGETS; t++) {
			struct tm_source_counts *grown = realloc(m->by_src[t], cap * sizeof(*grown));
			if (!grown)
				abort();
			memset(grown + m->src_cap, 0, (cap - m->src_cap) * sizeof(*grown));
			m->by_src[t] = grown;
		}
		m->src_cap = cap;
	}
	if (src >= m->src_span)
		m->src_span = src + 1;
	return &m->by_src[target][src];
}

static void wc_emit(struct tm_model *m, struct tm_wc *w)
{
	struct tm_counts *c = &m->c[w->target];
	struct tm_source_counts *s = charge(m, w->target, w->src);

	if (w->mask == m->full_mask) {
		c->nt_line_writes++;
		s->nt_line_writes++;
	} else {
		uint64_t bytes = (uint64_t)__builtin_popcountll(w->mask);
		c->nt_partial_writes++;
		c->nt_partial_bytes += bytes;
		s->nt_partial_bytes += bytes;
	}
	w->line = 0;
	w->mask = 0;
	m->wc_used--;
}

/* A cached access to a line a WC buffer holds: the buffer goes out first. */
static void wc_flush_line(struct tm_model *m, uint64_t line)
{
	for (unsigned i = 0; i < m->p.wc_buffers; i++)
		if (m->wc[i].line == line + 1) {
			wc_emit(m, &m->wc[i]);
			return;
		}
}

/* A line string stores allocated without reading it and did not write
 * whole: its read for ownership is due now, charged to the string store. */
static void settle_pending(struct tm_model *m, size_t i)
{
	if (!m->pend[i])
		return;
	m->c[m->target[i]].fills_store++;
	charge(m, m->target[i], m->psrc[i])->fills_store++;
	m->pend[i] = 0;
}

/* A dirty line written to its target, charged to the store that dirtied it. */
static void write_back(struct tm_model *m, size_t i)
{
	m->c[m->target[i]].writebacks++;
	charge(m, m->target[i], m->wsrc[i])->writebacks++;
	m->dirty[i] = 0;
}

enum access { LOAD, STORE, STRING_STORE };

/* The line through the LLC for a cached access (mask: the bytes it touches
 * in the line); returns its way index. */
static size_t cached_line(struct tm_model *m, int target, uint64_t line, enum access kind, uint64_t mask,
			  uint32_t src)
{
	uint64_t set = line % m->sets;
	size_t base = set * m->p.ways, victim = base;

	if (m->wc_used)
		wc_flush_line(m, line);
	m->clock++;
	for (size_t i = base; i < base + m->p.ways; i++) {
		if (m->tag[i] == line + 1) {
			m->stamp[i] = m->clock;
			if (m->pend[i]) {
				if (kind != STRING_STORE) {
					settle_pending(m, i);
				} else if ((m->pend[i] |= mask) == m->full_mask) {
					m->pend[i] = 0;
					m->c[target].string_full_lines++;
				}
			}
			return i;
		}
		if (m->tag[victim] && (!m->tag[i] || m->stamp[i] < m->stamp[victim]))
			victim = i;
	}
	if (m->tag[victim]) {
		int vt = m->target[victim];
		settle_pending(m, victim);
		if (m->dirty[victim])
			write_back(m, victim);
		m->c[vt].evictions++;
		charge(m, vt, src)->evictions++;
	}
	m->tag[victim] = line + 1;
	m->stamp[victim] = m->clock;
	m->dirty[victim] = 0;
	m->target[victim] = (uint8_t)target;
	if (kind == STRING_STORE && m->p.fast_string_no_rfo) {
		if (mask == m->full_mask) {
			m->c[target].string_full_lines++;
		} else {
			m->pend[victim] = mask;
			m->psrc[victim] = src;
		}
		return victim;
	}
	if (kind == LOAD) {
		m->c[target].fills_load++;
		charge(m, target, src)->fills_load++;
	} else {
		m->c[target].fills_store++;
		charge(m, target, src)->fills_store++;
	}
	return victim;
}

static uint64_t byte_mask(uint64_t n, uint64_t off)
{
	return (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << off;
}

/* Each line [addr, addr + size) touches, with the bytes it touches there. */
static void each_line(struct tm_model *m, int target, uint64_t addr, unsigned size, enum access kind, uint32_t src)
{
	uint64_t end = addr + (size ? size : 1);

	while (addr < end) {
		uint64_t line = addr / m->p.line, off = addr % m->p.line;
		uint64_t n = m->p.line - off < end - addr ? m->p.line - off : end - addr;
		size_t i = cached_line(m, target, line, kind, byte_mask(n, off), src);

		if (kind != LOAD && !m->dirty[i]) {
			m->dirty[i] = 1;
			m->wsrc[i] = src;
		}
		addr += n;
	}
}

void tm_load(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src)
{
	m->c[target].loads++;
	each_line(m, target, addr, size, LOAD, src);
}

void tm_store(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src)
{
	m->c[target].stores++;
	each_line(m, target, addr, size, STORE, src);
}

void tm_string_store(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src)
{
	m->c[target].string_stores++;
	each_line(m, target, addr, size, STRING_STORE, src);
}

static void nt_line(struct tm_model *m, int target, uint64_t line, uint64_t mask, uint32_t src)
{
	uint64_t set = line % m->sets;
	size_t base = set * m->p.ways;
	struct tm_wc *w = NULL, *lru = NULL;

	for (size_t i = base; i < base + m->p.ways; i++)
		if (m->tag[i] == line + 1) {
			settle_pending(m, i);
			if (m->dirty[i])
				write_back(m, i);
			m->tag[i] = 0;
			m->c[target].nt_invalidates++;
			break;
		}
	m->clock++;
	for (unsigned i = 0; i < m->p.wc_buffers; i++) {
		struct tm_wc *e = &m->wc[i];
		if (e->line == line + 1) {
			w = e;
			break;
		}
		if (!lru || (lru->line && (!e->line || e->stamp < lru->stamp)))
			lru = e;
	}
	if (!w) {
		w = lru;
		if (w->line)
			wc_emit(m, w);
		w->line = line + 1;
		w->target = target;
		w->src = src;
		m->wc_used++;
	}
	w->mask |= mask;
	w->stamp = m->clock;
	if (w->mask == m->full_mask)
		wc_emit(m, w);
}

void tm_nt_store(struct tm_model *m, int target, uint64_t addr, unsigned size, uint32_t src)
{
	uint64_t end = addr + (size ? size : 1);

	m->c[target].nt_stores++;
	while (addr < end) {
		uint64_t line = addr / m->p.line, off = addr % m->p.line;
		uint64_t n = m->p.line - off < end - addr ? m->p.line - off : end - addr;

		nt_line(m, target, line, byte_mask(n, off), src);
		addr += n;
	}
}

void tm_close(struct tm_model *m)
{
	size_t n = m->sets * m->p.ways;

	for (unsigned i = 0; i < m->p.wc_buffers; i++)
		if (m->wc[i].line)
			wc_emit(m, &m->wc[i]);
	for (size_t i = 0; i < n; i++) {
		if (!m->tag[i])
			continue;
		settle_pending(m, i);
		if (m->dirty[i]) {
			m->c[m->target[i]].writebacks_at_close++;
			write_back(m, i);
		}
	}
}

/* -- the decoder --------------------------------------------------------- */
static int is_legacy_prefix(uint8_t b)
{
	switch (b) {
	case 0x66: case 0x67: case 0xf0: case 0xf2: case 0xf3:
	case 0x2e: case 0x36: case 0x3e: case 0x26: case 0x64: case 0x65:
		return 1;
	}
	return 0;
}

/* ModRM names memory (mod != 11): the store forms, not the register ones. */
static int modrm_is_memory(const uint8_t *p, size_t left)
{
	return left >= 1 && (p[0] >> 6) != 3;
}

int tm_decode(const uint8_t *b, size_t n)
{
	size_t i = 0;
	int opsize = 0, rep = 0, repne = 0;

	if (n == 7 && b[0] == 0x0f && b[1] == 0x1f && b[2] == 0x80) {
		uint32_t disp = (uint32_t)b[3] | (uint32_t)b[4] << 8 | (uint32_t)b[5] << 16 | (uint32_t)b[6] << 24;
		if (disp == (TM_MARKER_MAGIC | TM_MARKER_OPEN))
			return TM_INSN_MARKER_OPEN;
		if (disp == (TM_MARKER_MAGIC | TM_MARKER_CLOSE))
			return TM_INSN_MARKER_CLOSE;
		return TM_INSN_OTHER;
	}
	while (i < n && is_legacy_prefix(b[i])) {
		opsize |= b[i] == 0x66;
		rep |= b[i] == 0xf3;
		repne |= b[i] == 0xf2;
		i++;
	}
	if (i < n && (b[i] & 0xf0) == 0x40)      /* REX */
		i++;
	if (i >= n)
		return TM_INSN_OTHER;
	/* rep movs / rep stos (F2 repeats them as F3 does) */
	if ((rep || repne) && (b[i] == 0xa4 || b[i] == 0xa5 || b[i] == 0xaa || b[i] == 0xab))
		return TM_INSN_FAST_STRING;
	if (b[i] == 0xc5 || b[i] == 0xc4) {      /* VEX: 64-bit mode, so never LDS/LES */
		unsigned map, pp;
		size_t op;
		if (b[i] == 0xc5) {
			if (i + 2 >= n)
				return TM_INSN_OTHER;
			map = 1;
			pp = b[i + 1] & 3;
			op = i + 2;
		} else {
			if (i + 3 >= n)
				return TM_INSN_OTHER;
			map = b[i + 1] & 0x1f;
			pp = b[i + 2] & 3;
			op = i + 3;
		}
		if (map != 1 || op >= n)
			return TM_INSN_OTHER;
		/* VMOVNTPS (pp 0) / VMOVNTPD (pp 1) 2B; VMOVNTDQ 66 E7; VMASKMOVDQU 66 F7 (register form, stores to [rDI]) */
		if (b[op] == 0x2b && pp <= 1 && modrm_is_memory(b + op + 1, n - op - 1))
			return TM_INSN_NT_STORE;
		if (b[op] == 0xe7 && pp == 1 && modrm_is_memory(b + op + 1, n - op - 1))
			return TM_INSN_NT_STORE;
		if (b[op] == 0xf7 && pp == 1)
			return TM_INSN_NT_STORE;
		return TM_INSN_OTHER;
	}
	if (b[i] != 0x0f || i + 1 >= n)
		return TM_INSN_OTHER;
	i++;
	switch (b[i]) {
	case 0xc3:   /* MOVNTI m32/m64, r (no mandatory prefix) */
		return !opsize && !rep && !repne && modrm_is_memory(b + i + 1, n - i - 1)
			? TM_INSN_NT_STORE : TM_INSN_OTHER;
	case 0x2b:   /* MOVNTPS, 66: MOVNTPD, F3/F2: MOVNTSS/MOVNTSD */
	case 0xe7:   /* MOVNTQ, 66: MOVNTDQ */
		return modrm_is_memory(b + i + 1, n - i - 1) ? TM_INSN_NT_STORE : TM_INSN_OTHER;
	case 0xf7:   /* MASKMOVQ, 66: MASKMOVDQU: register operands, the store goes to [rDI] */
		return TM_INSN_NT_STORE;
	}
	return TM_INSN_OTHER;
}

int tm_flow(const uint8_t *b, size_t n)
{
	size_t i = 0;

	while (i < n && is_legacy_prefix(b[i]))
		i++;
	if (i < n && (b[i] & 0xf0) == 0x40)      /* REX */
		i++;
	if (i >= n)
		return TM_FLOW_NONE;
	if (b[i] == 0xe8)
		return TM_FLOW_CALL;
	if (b[i] == 0xff && i + 1 < n && ((b[i + 1] >> 3) & 7) == 2)
		return TM_FLOW_CALL;
	if (b[i] == 0xc3 || b[i] == 0xc2)
		return TM_FLOW_RET;
	if (b[i] == 0xcf)
		return TM_FLOW_IRET;
	return TM_FLOW_NONE;
}
