// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * page_ref probe: counts page_ref:page_ref_set events. Opt-in: on the
 * zone-device template series (revisions 4 to 8), enabling this tracepoint
 * makes memmap_init_zone_device() fall back to the per-page slow path, so
 * observing it changes what is observed. The per-call count during
 * memmap_init_zone_device() lives in the memmap probe (NTTRACE_PAGE_REF).
 */
BPF_ARRAY(page_ref_set_total, u64, 1);

int nttrace_page_ref_set(void *ctx)
{
	int zero = 0;
	u64 *n = page_ref_set_total.lookup(&zero);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
