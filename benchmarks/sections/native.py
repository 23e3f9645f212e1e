# SPDX-License-Identifier: Apache-2.0
"""Native reference: the C reference's memmap model, page copies and copy
table, from one `nttrace bench native --json`
run (the CPU itself, no kernel)."""
from __future__ import annotations

RAW = "native-epyc-vm-2026-11-30.json"
COMMAND = "nttrace bench native --json"     # the run's raw file does not record its command


def _made(raw: dict) -> str:
    return (f"{raw['method']['runs']} runs after a dropped one, {raw['method']['cell_s']} s cells; epyc-vm "
            f"({raw['cpu']['model']}, {raw['cpu']['cpus']} CPUs, LLC {raw['cpu']['llc_bytes'] >> 20} MiB), 2026-11-30. "
            f"Command: `{COMMAND}`.")


MEMMAP_VARIANTS = (("slow", "slow path (per-field stores, kernel order)"), ("template_cached", "template, cached stores"),
                   ("template_nt", "template, NT streaming stores, drained"),
                   ("template_nt_compound", "template NT, compound (order 9)"),
                   ("nt_write_limit", "pure NT write limit over the same array"))


def native_memmap(raw: dict) -> str:
    m = raw["memmap_model"]
    rows = [f"**Memmap model at the seeds' scale.** {m['namespace_bytes'] >> 30} GiB namespace = "
            f"{m['descriptors']:,} descriptors of "
            f"{m['descriptor_size']} bytes, pgmap {m['pgmap_type']}. Median of {m['runs_ms']['slow']['n']} (min..max):",
            "", "| variant | ms | |", "|---|---:|---|"]
    for key, label in MEMMAP_VARIANTS:
        r = m["runs_ms"][key]
        note = ""
        if key == "template_nt":
            note = f"{m['reduction_pct']:.1f}% shorter than slow"
        elif key == "nt_write_limit":
            note = f"template NT = limit x{m['template_nt_over_limit']:.2f}"
        value = f"**{r['median']:.1f}**" if key == "template_nt" else f"{r['median']:.1f}"
        rows.append(f"| {label} | {value} ({r['min']:.1f}..{r['max']:.1f}) | {note} |")
    seeds = "; ".join(f"{k}: {v['base']} -> {v['series']} ms, {v['reduction_pct']}%" for k, v in m["seed"].items())
    rows += ["", f"The seeds, measured in the kernel: {seeds}. {_made(raw)}"]
    return "\n".join(rows)


PAGE_COPY_LABELS = {
    "memcpy": "memcpy", "rep_movsb": "rep movsb",
    "movnti_prefetchnta/per_page": "MOVNTI + prefetchnta (copy_mc_page_nt shape), drained per page",
    "movnti_prefetchnta/per_folio": "MOVNTI + prefetchnta, drained once per folio",
    "avx2_stream/per_page": "AVX2 streaming, drained per page", "avx512_stream/per_page": "AVX-512 streaming, drained per page",
    "avx512_stream/per_folio": "AVX-512 streaming, drained once per folio"}


def native_page_copy(raw: dict) -> str:
    pc = raw["page_copy"]
    rows = [f"**Cold 4 KiB page copies (the demotion copy).** {pc['bytes'] >> 30} GiB source and destination, "
            "an eviction pass before every variant, "
            f"{pc['folio_pages'] * 4 // 1024} MiB folios ({pc['folio_pages']} pages) for \"per folio\":", "",
            "| copy | GB/s median (min) | vs memcpy, same run |", "|---|---:|---:|"]
    for r in pc["rows"]:
        ratio = f"{r['vs_memcpy_median']:.2f}"
        if r["primitive"].startswith("movnti"):
            ratio = f"**{ratio}**"
        rows.append(f"| {PAGE_COPY_LABELS.get(r['primitive'], r['primitive'])} | {r['gbps_median']:.2f} "
                    f"({r['gbps_min']:.2f}) | {ratio} |")
    rows += ["", _made(raw)]
    return "\n".join(rows)


def native_copy_table(raw: dict) -> str:
    t = raw["copy_table"]
    cols = ("movq_unrolled", "rep_movsq", "rep_movsb", "memcpy")
    rows = ["**Copy table (batch-page-copy reply), GB/s median; seed = AMD EPYC 9655.** Copies walk forward "
            f"through {t['span_bytes'] >> 20} MiB buffers (the reply's buffer size).", "",
            "| size | movq unrolled | rep movsq | rep movsb | memcpy | seed movq / movsq / movsb / memcpy |",
            "|---:|---:|---:|---:|---:|---|"]
    for size, r in t["rows"].items():
        rows.append(f"| {size} | " + " | ".join(f"{r[c]['gbps_median']:.2f}" for c in cols) + " | "
                    + " / ".join(f"{r[c]['seed_zen5_gbps']:.2f}" for c in cols) + " |")
    rows += ["", _made(raw)]
    return "\n".join(rows)


BLOCKS = {name: (fn, [RAW]) for name, fn in (
    ("native-memmap", native_memmap), ("native-page-copy", native_page_copy),
    ("native-copy-table", native_copy_table))}
