"""BENCHMARKS.md's generated tables, made from the raw files beside this
script: each block between

    <!-- generated: NAME -->  ...  <!-- end generated: NAME -->

is rewritten from the raw file(s) BLOCKS names, so a figure in those tables
is the figure in its raw file. tests/test_benchmarks_doc.py fails when the
document and its raw data disagree.

    python3 benchmarks/render.py           # rewrite BENCHMARKS.md's generated blocks
    python3 benchmarks/render.py --check   # exit 1 when a block differs from its raw data

Each block's raw files are named in its first line; the script that made a
raw file is named in the block (nttrace's own `bench` commands, or the
scripts beside this one: whole_command.py, ci_run.py, snapshot_read_ab.py).
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "BENCHMARKS.md"


def _load(name: str):
    text = (HERE / name).read_text()
    return json.loads(text) if name.endswith(".json") else text


def _ms(x: float) -> str:
    return f"{x:.2f}"


def idle_connections(raw: dict) -> str:
    ab = raw["idle_connections_ab"]
    rr = ab["p99_ratio_per_round"]
    rows = ["| condition | scrapes | p50 ms | p99 ms | max ms |", "|---|--:|--:|--:|--:|"]
    for cond, label in (("none", "no idle connections"), ("idle", f"{ab['idle_connections']} idle connections open")):
        c = ab[cond]
        rows.append(f"| {label} | {c['n']} | {_ms(c['p50_ms'])} | {_ms(c['p99_ms'])} | {_ms(c['max_ms'])} |")
    rows.append("")
    rows.append(f"p99 with the idle connections / without: x{ab['p99_ratio']:.2f} pooled; per round "
                f"{min(rr):.2f} .. {max(rr):.2f} (median {statistics.median(rr):.2f}); {ab['rounds']} interleaved "
                f"rounds of {ab['scrapes_per_round']} scrapes a condition, one scraper.")
    return "\n".join(rows)


def perf_binding(raw: dict) -> str:
    sys.path.insert(0, str(HERE.parent))     # the checkout: the lab package's own summary
    from lab.perf_binding import summarize
    rows = ["| path | runs | page faults, median (min..max) | of the pages touched | task-clock / thread CPU time, median |",
            "|---|--:|--:|--:|--:|"]
    for path, s in summarize(raw).items():
        rows.append(f"| {path} | {s['n']} | {s['faults_median']:.0f} ({s['faults_min']:.0f}..{s['faults_max']:.0f}) | "
                    f"{s['faults_median'] / raw['pages']:.4f} | {s['task_clock_over_cpu']:.4f} |")
    rows.append("")
    rows.append(f"Work: {raw['pages']} pages first-touched and {raw['spin_s']} s of CPU a run; the paths alternate "
                f"run by run. Binding: {Path(raw['module']).name}, can count: {raw['can_count']}.")
    return "\n".join(rows)


def _ab_rows(ab: dict, metrics: tuple[str, ...]) -> list[str]:
    out = ["| namespace | figure | base median [95% CI] | patched median [95% CI] | change [95% CI] | p | significant | n |",
           "|---|---|--:|--:|--:|--:|---|--:|"]
    for r in ab["baseline_comparison"]:
        if r["check"] != "kernel.memmap_latency" or r["metric"] not in metrics:
            continue
        st = r["stats"]

        def side(d):
            ci = d.get("median_ci")
            return f"{d['median']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{d['median']:.2f}"
        ci = st.get("change_ci")
        change = f"{st['change_pct']:+.1f}% [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else f"{st['change_pct']:+.1f}%"
        p = "-" if st["p"] is None else (f"{st['p']:.4f}" if st["p"] >= 0.0001 else f"{st['p']:.1e}")
        out.append(f"| {r['subject']} | {r['label']} | {side(st['base'])} | {side(st['current'])} | {change} | {p} | "
                   f"{'yes' if st['significant'] else 'no'} | {r['runs'][0]}/{r['runs'][1]} |")
    return out


LAB_METRICS = ("first_bind_ms", "rebind_ms.median", "rebind_ms.mean", "rebind_ns_per_page.median")


def lab_ab(raw: dict) -> str:
    ab, run = raw["ab"], raw["run"]
    lines = _ab_rows(ab, LAB_METRICS)
    lines.append("")
    lines.append(f"{run['boots']} boots a side, interleaved ({' '.join(s + str(k) for s, k in run['order'])}), "
                 f"scenarios {', '.join(run['scenarios'])}; wall time of the whole run "
                 f"{int(run['wall_s'] // 60)} m {int(run['wall_s'] % 60):02d} s. Command: `{run['command']}`."
                 + (f" Conditions: {run['conditions']}." if run.get("conditions") else ""))
    return "\n".join(lines)


MEMMAP_VARIANTS = (("slow", "slow path (per-field stores, kernel order)"), ("template_cached", "template, cached stores"),
                   ("template_nt", "template, NT streaming stores, drained"),
                   ("template_nt_compound", "template NT, compound (order 9)"),
                   ("nt_write_limit", "pure NT write limit over the same array"))


def native_memmap(raw: dict) -> str:
    m = raw["memmap_model"]
    rows = [f"{m['namespace_bytes'] >> 30} GiB namespace = {m['descriptors']:,} descriptors of "
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
    rows += ["", f"The seeds, measured in the kernel: {seeds}."]
    return "\n".join(rows)


PAGE_COPY_LABELS = {
    "memcpy": "memcpy", "rep_movsb": "rep movsb",
    "movnti_prefetchnta/per_page": "MOVNTI + prefetchnta (copy_mc_page_nt shape), drained per page",
    "movnti_prefetchnta/per_folio": "MOVNTI + prefetchnta, drained once per folio",
    "avx2_stream/per_page": "AVX2 streaming, drained per page", "avx512_stream/per_page": "AVX-512 streaming, drained per page",
    "avx512_stream/per_folio": "AVX-512 streaming, drained once per folio"}


def native_page_copy(raw: dict) -> str:
    pc = raw["page_copy"]
    rows = [f"{pc['bytes'] >> 30} GiB source and destination, an eviction pass before every variant, "
            f"{pc['folio_pages'] * 4 // 1024} MiB folios ({pc['folio_pages']} pages) for \"per folio\":", "",
            "| copy | GB/s median (min) | vs memcpy, same run |", "|---|---:|---:|"]
    for r in pc["rows"]:
        ratio = f"{r['vs_memcpy_median']:.2f}"
        if r["primitive"].startswith("movnti"):
            ratio = f"**{ratio}**"
        rows.append(f"| {PAGE_COPY_LABELS.get(r['primitive'], r['primitive'])} | {r['gbps_median']:.2f} "
                    f"({r['gbps_min']:.2f}) | {ratio} |")
    return "\n".join(rows)


def native_fixed_nt(raw: dict) -> str:
    f = raw["fixed_size_nt"]
    rows = [f"ns per copy to one destination, offsets {f['offsets']}:", "",
            "| bytes | variant A (no alignment check) | variant B (unaligned -> generic) | B/A | seeds B/A |",
            "|---:|---:|---:|---:|---:|"]
    for size, r in f["rows"].items():
        rows.append(f"| {size} | {r['variant_a_ns']:.2f} | {r['variant_b_ns']:.1f} | {r['b_over_a']:.1f} | "
                    f"{r['seed_b_over_a']:.2f} |")
    return "\n".join(rows)


def native_hazards(raw: dict) -> str:
    h = raw["hazards"]
    mixed = ", ".join(f"{int(k) // 1024} KiB x{v['mixed_over_generic']:.2f}" if int(k) >= 1024 else
                      f"{k} B x{v['mixed_over_generic']:.2f}" for k, v in h["mixed_nt"]["rows"].items())
    sf = h["store_forwarding"]
    ns = sf["ns_per_descriptor"]
    return "\n".join([
        f"* Mixed cached and NT stores in one line (`nt_mixed` against all-NT `nt_generic` with overlapping unaligned "
        f"MOVNTI heads and tails), offsets {h['mixed_nt']['offsets']}: {mixed} slower. The reference's fast paths "
        "never mix.",
        f"* Refreshing PFN fields in an in-memory template and copying it with memcpy (16-byte loads over 8-byte "
        f"stores), {sf['descriptors']} L2-resident descriptors: {ns['template_refresh_copy']:.2f} ns/descriptor against "
        f"{ns['template_cached']:.2f} for the register template (x{sf['refresh_copy_over_register_template']:.1f}), and "
        f"x{sf['refresh_copy_over_slow']:.2f} the slow path ({ns['slow']:.2f})."])


def native_copy_table(raw: dict) -> str:
    t = raw["copy_table"]
    cols = ("movq_unrolled", "rep_movsq", "rep_movsb", "memcpy")
    rows = [f"Copies walk forward through {t['span_bytes'] >> 20} MiB buffers (the reply's buffer size).", "",
            "| size | movq unrolled | rep movsq | rep movsb | memcpy | seed movq / movsq / movsb / memcpy |",
            "|---:|---:|---:|---:|---:|---|"]
    for size, r in t["rows"].items():
        rows.append(f"| {size} | " + " | ".join(f"{r[c]['gbps_median']:.2f}" for c in cols) + " | "
                    + " / ".join(f"{r[c]['seed_zen5_gbps']:.2f}" for c in cols) + " |")
    return "\n".join(rows)


ORDER_NAMES = {"probe": "probe", "empty": "empty", "clock_only": "clock"}


def probe_rounds(raw: dict) -> str:
    """The probe measured in rounds (the migrate probe) against its references, round by round."""
    m = next(r for r in raw.values() if "rounds" in r)
    rows = ["| round | order | migrate probe, ns/event (start / done) | empty | clock only | probe / clock only |",
            "|---|---|---:|---:|---:|---:|"]
    for i, r in enumerate(m["rounds"], 1):
        per = " / ".join(f"{p['ns_per_event']:.0f}" for p in r["probe_programs"])
        rows.append(f"| {i} | {', '.join(ORDER_NAMES[s] for s in r['order'])} | {r['probe']:.0f} ({per}) | "
                    f"{r['empty']:.0f} | {r['clock_only']:.0f} | {r['ratio_to_clock_only']:.2f} |")
    refs = m["reference_ns_per_event"]
    rows.append(f"| **median** | | **{m['ns_per_event']:.0f}** | {refs['empty']:.0f} | {refs['clock_only']:.0f} | "
                f"**{m['ratio_to_clock_only']:.2f}** |")
    return "\n".join(rows)


def probe_each(raw: dict) -> str:
    """Every other probe alone under its exercise's benchmark workload."""
    rows = ["| probe | status | ns/event, all its programs | programs (ns/event, runs) | workload |", "|---|---|--:|---|---|"]
    for name, r in raw.items():
        if "rounds" in r:
            continue
        if r.get("status") != "measured":
            rows.append(f"| {name} | unavailable: {r.get('reason')} | | | |")
            continue
        progs = "; ".join(f"{p['name']} {p['ns_per_event']:.0f} ({p['run_cnt']})" if p["ns_per_event"] is not None
                          else f"{p['name']} - (0)" for p in r["programs"])
        rows.append(f"| {name} | measured | "
                    f"{r['ns_per_event']:.0f} | {progs} | {r.get('workload', 'native memmap model calls')} |")
    return "\n".join(rows)


def migrate_program_ab(raw: dict) -> str:
    """The previous migrate program against the current one (benchmarks/migrate_program_ab.py)."""
    labels = {"7923064:bpf/migrate.bpf.c": "previous (LRU hash in-flight map, histogram in a second per-CPU array)",
              "bpf/migrate.bpf.c": "current (direct-mapped in-flight array, one per-CPU row)",
              "clock_only": "clock only"}
    floor = raw["clock_only"]["median"]
    rows = ["| | rounds, ns/event | median | vs clock only |", "|---|---|---:|---:|"]
    for key, r in raw.items():
        bold = key == "bpf/migrate.bpf.c"
        med, ratio = f"{r['median']:.0f}", f"{r['median'] / floor:.2f}"
        rows.append(f"| {labels.get(key, key)} | {', '.join(f'{x:.0f}' for x in r['rounds'])} | "
                    + (f"**{med}** | **{ratio}** |" if bold else f"{med} | {ratio} |"))
    cur, prev = raw["bpf/migrate.bpf.c"]["median"], raw["7923064:bpf/migrate.bpf.c"]["median"]
    rows += ["", f"The current program costs {cur / prev:.2f} of the previous one ({len(raw['clock_only']['rounds'])} "
                 "rounds, medians)."]
    return "\n".join(rows)


def snapshot_read(raw: dict) -> str:
    """A migrate snapshot read through the handed-over descriptors against bcc's tables."""
    per = raw["us_per_snapshot"]
    med = {k: statistics.median(v) for k, v in per.items()}
    rows = ["| reader | rounds, us a snapshot | median |", "|---|---|--:|"]
    rows += [f"| {k} | {', '.join(f'{x:.0f}' for x in v)} | {med[k]:.0f} |" for k, v in per.items()]
    rows += ["", f"handover / bcc: x{med['handover'] / med['bcc']:.2f} ({len(per['bcc'])} alternating rounds, one "
                 f"process holding both, the same rows read by both). Command: `.venv/bin/python {raw['command']}`."]
    return "\n".join(rows)


def _overhead_row(label: str, r: dict, bold: bool) -> str:
    m, q = r["median_pages_per_s"], r["ratio_quartiles"]
    ratio = f"**{r['median_ratio']:.3f}**" if bold else f"{r['median_ratio']:.3f}"
    return (f"| {label} | {m['probes']:,.0f} / {m['none']:,.0f} | {ratio} ({q[0]:.3f} .. {q[2]:.3f}) | "
            f"{r['slowdown_pct']:+.1f}% |")


def overhead(raw: dict) -> str:
    """Probes against none and the A/A, compaction on this host."""
    rows = ["| run | median pages/s, probes / none | per-round ratio probes/none: median (quartiles) | "
            "slower with the probes |", "|---|---:|---:|---:|",
            _overhead_row("probes against none", raw["probes"], True),
            _overhead_row("A/A: none against none", raw["aa"], False)]
    return "\n".join(rows)


def _one_demotion_ms(r: dict) -> str:
    cells = []
    for cond in ("probes", "none"):
        s = sorted(run[1] * 1e3 for rnd in r["rounds"] for run in rnd[cond]["runs"])
        cells.append(f"{s[0]:.0f} / {statistics.median(s):.0f} ms")
    return ", ".join(cells)


def overhead_demotion(raw: dict) -> str:
    """Both runs of the lab's demotion overhead (one boot)."""
    rows = ["| run | median pages/s, probes / none | per-round ratio: median (quartiles) | one demotion: fastest / "
            "median, probes / none |", "|---|---:|---:|---:|"]
    for label, r, bold in (("probes against none", raw["probes"], True), ("A/A: none against none", raw["aa"], False)):
        m, q = r["median_pages_per_s"], r["ratio_quartiles"]
        ratio = f"**{r['median_ratio']:.3f}**" if bold else f"{r['median_ratio']:.3f}"
        rows.append(f"| {label} | {m['probes']:,.0f} / {m['none']:,.0f} | {ratio} ({q[0]:.3f} .. {q[2]:.3f}) | "
                    f"{_one_demotion_ms(r)} |")
    pages = sorted(run[0] for r in (raw["probes"], raw["aa"]) for rnd in r["rounds"] for c in ("probes", "none")
                   for run in rnd[c]["runs"])
    rows += ["", f"Pages demoted a demotion: {pages[0]:,} .. {pages[-1]:,}. One boot."]
    return "\n".join(rows)


def daemon_stops(raw: dict) -> str:
    """The lab's daemon_stops scenario: SIGTERM to exit, and the daemon's
    own account of each step ("stopped in ... (http ..., probe X ...)")."""
    runs = raw["runs"]
    steps: dict[str, list[float]] = {}
    for r in runs:
        line = next(x for x in r["stopped"] if x.startswith("stopped in"))
        for name, sec in re.findall(r"([\w ]+?) (\d+\.\d+)s(?:, |\)$)", line[line.index("(") + 1:]):
            steps.setdefault(name, []).append(float(sec))
    rows = ["| | median [min..max], s |", "|---|--:|",
            f"| SIGTERM to exit, measured by the sender | {_med_range([r['stop_s'] for r in runs], '.2f')} |"]
    rows += [f"| the daemon's own step: {name} | {_med_range(v, '.2f')} |" for name, v in steps.items()]
    hung = sum(1 for r in runs if r["stacks_at_10s"])
    rows += ["", f"{len(runs)} daemons started and stopped one after another in one boot of nt-v3 ({raw['kernel']}; "
                 f"QEMU TCG: emulated times), probes {', '.join(raw['probes'])}; {hung} still running after 10 s; "
                 f"exit codes {', '.join(sorted({str(r['rc']) for r in runs}))}. Command: `python3 -m lab.lab DIR "
                 f"--kernel nt-v3 --scenarios demotion,daemon_stops --append nttrace.daemon_stops={len(runs)}` "
                 "(the raw file is the guest's daemon_stops.json)."]
    return "\n".join(rows)


def _daemon_cells(d: dict) -> dict:
    return {"ready": f"{d['ready_s']:.2f} s", "idle": f"{100 * d['idle_cpu_share']:.2f}%",
            "rss": f"{d['rss_kib_idle'] / 1024:.1f} / {d['rss_kib_after_load'] / 1024:.1f} MiB",
            "lat": f"{d['scrape_ms']['p50']:.1f} / {d['scrape_ms']['p99']:.1f} / {d['scrape_ms']['max']:.1f} ms",
            "rate": f"{d['scrapes_per_s']:.0f}"}


def daemon_versions(raw: dict) -> str:
    """The daemon's first version against the session-2 one (one run each)."""
    a, b = _daemon_cells(raw["first"]), _daemon_cells(raw["current"])
    labels = (("ready", "start to READY=1 (bcc compiling the program)"), ("idle", "idle CPU share over 10 s"),
              ("rss", "resident memory, idle / after the load"), ("lat", "scrape latency p50 / p99 / max"),
              ("rate", "scrapes per second"))
    rows = ["| | first version | current |", "|---|---:|---:|"]
    rows += [f"| {label} | {a[k]} | {b[k]} |" for k, label in labels]
    rows += ["", f"One run each: {raw['current']['scrapes']} scrapes from {raw['current']['concurrency']} threads."]
    return "\n".join(rows)


def _med_range(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}..{format(max(values), fmt)}]"


def daemon_loader_ab(raw: dict) -> str:
    before, after = raw["before_in_process_bcc"], raw["after_loader_handover"]
    fields = (("start to READY=1", lambda d: d["ready_s"], ".2f", " s"),
              ("resident memory, idle", lambda d: d["rss_kib_idle"] / 1024, ".1f", " MiB"),
              ("resident memory, after the scrapes", lambda d: d["rss_kib_after_load"] / 1024, ".1f", " MiB"),
              ("scrape latency p50", lambda d: d["scrape_ms"]["p50"], ".2f", " ms"),
              ("scrape latency p99", lambda d: d["scrape_ms"]["p99"], ".2f", " ms"),
              ("scrape latency max", lambda d: d["scrape_ms"]["max"], ".1f", " ms"),
              ("scrapes per second (4 threads)", lambda d: d["scrapes_per_s"], ".0f", ""),
              ("idle CPU share over 10 s", lambda d: 100 * d["idle_cpu_share"], ".1f", "%"))
    rows = ["| | before | after | after / before |", "|---|---:|---:|---:|"]
    for label, get, fmt, unit in fields:
        b, a = [get(d) for d in before], [get(d) for d in after]
        rows.append(f"| {label} | {_med_range(b, fmt)}{unit} | {_med_range(a, fmt)}{unit} | "
                    f"{statistics.median(a) / statistics.median(b):.2f} |")
    rows += ["", f"Medians [min..max] of {len(before)} and {len(after)} rounds. Command: {raw['command']}."]
    return "\n".join(rows)


def memory_floor(raw: dict) -> str:
    """The daemon's resident memory against the least a Python exporter holds."""
    bare = raw["bare"]["summary"]["peak_rss_mib"]["median"]
    floor = raw["exporter"]["summary"]["peak_rss_mib"]["median"]
    daemon = statistics.median(d["rss_kib_idle"] for d in raw["daemon"]["after_loader_handover"]) / 1024
    rows = ["| process | resident MiB (median) |", "|---|--:|",
            f"| a bare Python (`{raw['bare']['command']}`), peak | {bare:.1f} |",
            f"| Python importing what an exporter needs (`{raw['exporter']['command']}`), peak | {floor:.1f} |",
            f"| the daemon, idle, default probe set (the loader A/B's 'after' rounds) | {daemon:.1f} |", "",
            f"The daemon is x{daemon / floor:.2f} that floor. Floors: {len(raw['bare']['runs'])} runs each "
            f"(`python3 benchmarks/whole_command.py`), {raw['bare']['taken']}; the daemon's figure is from "
            "`nttrace bench daemon`, 2026-11-30."]
    return "\n".join(rows)


# A whole command's figures (benchmarks/whole_command.py): key, row label, format.
WHOLE_FIGURES = (("wall_s", "wall s", ".2f"), ("user_s", "user CPU s", ".2f"), ("sys_s", "system CPU s", ".2f"),
                 ("peak_rss_mib", "peak RSS MiB", ".0f"))


def whole_command(raw: dict) -> str:
    """A command timed as a whole process (benchmarks/whole_command.py)."""
    s = raw["summary"]
    rows = ["| | min | median | max |", "|---|---:|---:|---:|"]
    for key, label, fmt in WHOLE_FIGURES:
        rows.append(f"| {label} | {format(s[key]['min'], fmt)} | **{format(s[key]['median'], fmt)}** | "
                    f"{format(s[key]['max'], fmt)} |")
    rows += ["", f"{len(raw['runs'])} counted runs after {raw['warmup']} warm-up, {raw['taken']}, on "
                 f"{raw['host']['cpu']} ({raw['host']['cpus']} CPUs), kernel {raw['host']['kernel']}. Command: "
                 f"`python3 benchmarks/whole_command.py -- {raw['command']}`."]
    return "\n".join(rows)


def btf_read(raw: dict) -> str:
    """The BTF reader before and after, and the floor (benchmarks/btf_read_ab.py)."""
    sec, held = raw["seconds"], raw["held_mib"]
    med = {k: statistics.median(v) for k, v in sec.items()}
    labels = {"before": f"before ({raw['before']}): every type parsed into Python objects",
              "after": "after: one walk for where each type starts, a type decoded when asked for",
              "floor": "floor: read the file and its header, nothing decoded"}
    rows = ["| reader | rounds, s | median | / before | held afterwards |", "|---|---|--:|--:|--:|"]
    for k in ("before", "after", "floor"):
        rows.append(f"| {labels[k]} | {', '.join(f'{x:.3f}' for x in sec[k])} | {med[k]:.3f} s | "
                    f"{med[k] / med['before']:.2f} | " + (f"{held[k]:.1f} MiB" if k != "floor" else "-") + " |")
    rows += ["", f"The same questions to both readers (kernel metadata's enums and offsets, the copy probe's folio "
                 f"layout, migrate_pages' parameters), with the same answers; {len(sec['after'])} rounds, the order "
                 f"alternating, each reading {raw['btf_bytes'] / 1e6:.1f} MB of BTF ({raw['types']:,} types) from the "
                 f"page cache; held: what tracemalloc counts afterwards. After / floor: x{med['after'] / med['floor']:.0f}. "
                 f"{raw['taken']}, kernel {raw['host']['kernel']}, Python {raw['host']['python']}. "
                 f"Command: `.venv/bin/python {raw['command']}`."]
    return "\n".join(rows)


def whole_command_vs(raw: dict) -> str:
    """Two commands timed in turn as whole processes (whole_command.py --vs):
    `labels` names them (this command, the other), the ratio is pair by pair."""
    this, other = raw["labels"]
    s, v, r = raw["summary"], raw["summary_vs"], raw["ratio"]

    def cell(d, fmt):
        return f"{format(d['median'], fmt)} [{format(d['min'], fmt)}..{format(d['max'], fmt)}]"
    rows = [f"| | {other} | {this} | {this} / {other} |", "|---|--:|--:|--:|"]
    for key, label, fmt in WHOLE_FIGURES:
        rows.append(f"| {label} | {cell(v[key], fmt)} | {cell(s[key], fmt)} | {cell(r[key], '.2f') if r[key] else '-'} |")
    rows += ["", f"Medians [min..max] of {len(raw['runs'])} runs each, in turn, after {raw['warmup']} warm-up of each, "
                 f"{raw['taken']}, on {raw['host']['cpu']} ({raw['host']['cpus']} CPUs), kernel {raw['host']['kernel']}; "
                 f"the ratio pair by pair. Command: `python3 benchmarks/whole_command.py --vs '{raw['vs']}' -- "
                 f"{raw['command']}`."]
    return "\n".join(rows)


def text_file(raw: str) -> str:
    return raw.rstrip("\n")


def _mmss(s: float) -> str:
    return f"{int(s // 60)} m {int(s % 60):02d} s"


COST_NOTES = {
    "defconfig-based": "the config the lab used before: x86_64 defconfig + kvm_guest.config + its trimming fragment",
    "lab-with-var-tracking": "the same, with DWARF's variable locations",
    "lab-with-statement-frontiers": "the same, with the line table's statement marks (gcc's default at -O2 -g)",
    "lab-no-debug-info": "the same without debug info, hence without BTF (not bootable for nttrace: its probes read BTF)",
    "lab-ext4-root": "lab.config with ext4 and jbd2 built in for an ext4 root, as before the guest image became ext2",
    "lab-optimize-for-size": "the same at -Os (CONFIG_CC_OPTIMIZE_FOR_SIZE; not a lab kernel: it changes the timed paths' "
                             "inlining)",
    "lab-no-mitigations": "the same without the CPU mitigations (no retpolines, return thunks, call padding; not a lab "
                          "kernel: the series' kernels run with them)",
    "lab-defaults-on": "the same with lab.config's \"Off\" section left on (allnoconfig's defaults: io_uring, ethtool netlink, "
                       "cpufreq/cpuidle, ACPI processor/thermal/battery, VT, input, Intel PMU drivers, ...)",
    "lab-no-tcp-ip": "the same without TCP/IP and the virtio network card (the host's scrape of the guest daemon; "
                     "not a lab kernel)",
    "lab-no-probe-support": "the same without nttrace's probe support: BPF, BTF and its debug info, kprobes, uprobes, "
                            "ftrace and its tracepoints (not a lab kernel)",
    "lab-no-function-tracer": "the same without the function tracer: no -mfentry call site in any object, so no fentry "
                              "programs (kprobes stay, by int3; not a lab kernel: the lab is where fentry is tested)",
    "lab-no-bpf": "the same without BPF: the syscall, verifier, JIT, BPF on trace events and in cgroups, and BTF, which "
                  "Kconfig offers only with the BPF syscall; DWARF stays (not a lab kernel)",
    "lab-dwarf4": "the same with DWARF 4 debug info (gcc 12's default is 5; BTF is made from either)",
    "lab-no-pmem-numa": "the same without the scenarios' devices: ZONE_DEVICE, libnvdimm and NFIT, DAX, NUMA from SRAT, "
                        "page_ref, dynamic debug (not a lab kernel)",
    "lab-machine-only": "the same without all three: the guest's machine, userspace, disk and shares alone (not a lab "
                        "kernel: it runs none of what the lab tests)",
}

# lab.config with one thing changed or left out, and what saying so reads: each one's saving on the lab build
SAVINGS = (("lab-optimize-for-size", "-Os"), ("lab-no-mitigations", "leaving out the CPU mitigations"),
           # the lab's requirements, one at a time: what each costs to build
           ("lab-no-tcp-ip", "leaving out TCP/IP for the host's scrape"),
           ("lab-no-probe-support", "leaving out nttrace's probe support"),
           ("lab-no-pmem-numa", "leaving out the scenarios' pmem and NUMA"),
           # the probe support's parts, one at a time (its debug info and BTF: lab-no-debug-info, above)
           ("lab-no-function-tracer", "leaving out the function tracer (fentry's call sites)"),
           ("lab-no-bpf", "leaving out BPF and BTF"),
           ("lab-dwarf4", "DWARF 4 instead of 5"))


# lab.config with something a debugger would use put back, and what saying so reads: each one's cost on the lab build
ADDITIONS = (("lab-with-var-tracking", "variable locations"),
             ("lab-with-statement-frontiers", "the line table's statement marks"))


def _lab_label(c: dict) -> str:
    """The lab config's row, with the KCFLAGS it had when that run was made."""
    kcflags = c["recipe"].partition(";KCFLAGS=")[2]
    return f"**lab.config on allnoconfig{', KCFLAGS=' + kcflags if kcflags else ''} (the lab's config in this run)**"


def _btf_notes(configs: list[dict]) -> list[str]:
    """What the builds' BTF hashes (lab.build_cost's btf_types_sha256) can
    say: nothing across configs where one config's own builds disagree."""
    by_config: dict[str, set] = {}
    for c in configs:
        if "btf_types_sha256" in c:
            by_config.setdefault(c["config"], set()).add(c["btf_types_sha256"])
    unstable = [name for name, hashes in by_config.items() if len(hashes) > 1]
    if unstable:
        return [f"the BTF hash differs between two builds of one config ({', '.join(unstable)}), so it cannot "
                f"compare configs in this run"]
    hashes = {h for hs in by_config.values() for h in hs}
    if len(hashes) == 1 and len(by_config) > 1:
        return ["every config's BTF describes the same types and functions (made again by pahole on one thread; "
                "bpftool's dump, type ids aside)"]
    if len(hashes) > 1:
        return ["the BTF differs between configs: " + ", ".join(by_config)]
    return []


def _mean_build(builds: list[dict]) -> dict:
    """One config's figures from its builds in a run: the times their mean,
    the rest from its first build."""
    return {**builds[0], **{k: sum(b[k] for b in builds) / len(builds) for k in ("build_s", "compile_s", "link_tail_s")}}


def _turns(configs: list[dict]) -> list[tuple[dict, dict]]:
    """The (defconfig-based, lab) pairs of a run that built them in turn
    (each defconfig-based build followed by a lab build before the next;
    other configs between them do not count); [] where the run did not."""
    order = [c for c in configs if c["config"] in ("defconfig-based", "lab")]
    pairs = list(zip(order[::2], order[1::2]))
    if len(order) % 2 or any((d["config"], lab_b["config"]) != ("defconfig-based", "lab") for d, lab_b in pairs):
        return []
    return pairs


def build_cost(raw: dict, conditions: str = "with nothing else running") -> str:
    """A build_cost run's table; `conditions` says what the builds ran
    beside, where a run was not the clean one the script asks for."""
    builds: dict[str, list[dict]] = {}
    for c in raw["configs"]:
        builds.setdefault(c["config"], []).append(c)
    by = {name: _mean_build(b) for name, b in builds.items()}
    repeated = {name for name, b in builds.items() if len(b) > 1}
    ref_name = "defconfig-based" if "defconfig-based" in by else "lab"
    ref = by.get(ref_name)
    rows = ["| config | build (`make -j2 bzImage modules`) | compile | link tail (vmlinux, BTF, bzImage) | objects | "
            f"options =y | / {ref_name}{' (their mean)' if ref_name in repeated else ''} |",
            "|---|--:|--:|--:|--:|--:|--:|"]
    for i, c in enumerate(raw["configs"], 1):
        label = _lab_label(c) if c["config"] == "lab" else COST_NOTES.get(c["config"], c["config"])
        if c["config"] in repeated:
            label += f" (build {i} of {len(raw['configs'])})"
        rows.append(f"| {label} | {_mmss(c['build_s'])} ({c['build_s']:.0f} s) | "
                    f"{c['compile_s']:.0f} s | {c['link_tail_s']:.0f} s | {c['objects']} | {c['options_y']} | "
                    + (f"{c['build_s'] / ref['build_s']:.2f}" if ref else "-") + " |")
    rows.append("")
    notes = []
    if "lab" in by and "lab-no-debug-info" in by:
        d = by["lab"]["build_s"] - by["lab-no-debug-info"]["build_s"]
        notes.append(f"debug info and BTF cost {d:.0f} s of the lab build ({100 * d / by['lab']['build_s']:.0f}%; "
                     f"the link tail {by['lab']['link_tail_s']:.0f} s against {by['lab-no-debug-info']['link_tail_s']:.0f} s)")
    lab_times = [b["build_s"] for b in builds.get("lab", [])]
    lab_spread = max(lab_times) - min(lab_times) if len(lab_times) > 1 else None
    for name, what in ADDITIONS:
        if "lab" in by and name in by:
            d = by[name]["build_s"] - by["lab"]["build_s"]
            if lab_spread is not None and abs(d) <= lab_spread:
                notes.append(f"{what}: {d:+.0f} s against the lab build's mean, within its own spread in this run "
                             f"({lab_spread:.0f} s): no cost this run can tell")
            else:
                notes.append(f"{what}, which BTF does not use, would add {d:.0f} s "
                             f"({100 * d / by['lab']['build_s']:.1f}% of the lab build)")
    if "lab" in by and "lab-defaults-on" in by:
        d = by["lab-defaults-on"]["build_s"] - by["lab"]["build_s"]
        notes.append(f"the defaults lab.config switches off would add {d:.0f} s "
                     f"({by['lab-defaults-on']['objects'] - by['lab']['objects']} objects)")
    if "lab" in by and "lab-ext4-root" in by:
        d = by["lab-ext4-root"]["build_s"] - by["lab"]["build_s"]
        notes.append(f"the ext2 root saves {d:.0f} s against ext4's ({100 * d / by['lab-ext4-root']['build_s']:.1f}%, "
                     f"{by['lab-ext4-root']['objects'] - by['lab']['objects']} objects fewer)")
    for name, what in SAVINGS:
        if "lab" in by and name in by:
            d, fewer = by["lab"]["build_s"] - by[name]["build_s"], by["lab"]["objects"] - by[name]["objects"]
            objects = f"{fewer} objects fewer" if fewer > 0 else ""
            if lab_spread is not None and abs(d) <= lab_spread:
                notes.append(f"{what}: {d:+.0f} s against the lab build's mean, within its own spread in this run "
                             f"({lab_spread:.0f} s): no saving this run can tell" + (f" ({objects})" if objects else ""))
            else:
                notes.append(f"{what} would save {d:.0f} s ({100 * d / by['lab']['build_s']:.1f}% of the lab build"
                             + (f", {objects})" if objects else ")"))
    if "lab" in by and "lab-machine-only" in by:
        d = by["lab"]["build_s"] - by["lab-machine-only"]["build_s"]
        notes.append(f"leaving out all three would save {d:.0f} s ({100 * d / by['lab']['build_s']:.1f}%)")
    if "lab" in by and "defconfig-based" in by:
        half = by["defconfig-based"]["build_s"] / 2
        notes.append(f"half the defconfig-based build is {half:.0f} s, {by['lab']['build_s'] - half:.0f} s "
                     f"({100 * (by['lab']['build_s'] - half) / by['lab']['build_s']:.1f}%) below the lab build")
        pairs = _turns(raw["configs"])
        if len(pairs) > 1:
            ratios = [lab_b["build_s"] / d["build_s"] for d, lab_b in pairs]
            notes.append(f"built in turn, each turn's lab build over its defconfig-based build: "
                         + ", ".join(f"{r:.2f}" for r in ratios)
                         + f" (over their means {by['lab']['build_s'] / by['defconfig-based']['build_s']:.2f})")
    for name in sorted(repeated):
        times = [b["build_s"] for b in builds[name]]
        notes.append(f"{name} built {len(times)} times in this run, {' and '.join(f'{t:.0f} s' for t in times)} "
                     f"(spread {max(times) - min(times):.0f} s, {100 * (max(times) - min(times)) / by[name]['build_s']:.1f}% "
                     f"of their mean, the figure the others are compared with)")
    notes.extend(_btf_notes(raw["configs"]))
    said = "; ".join(notes)
    rows.append(said[:1].upper() + said[1:] + ("." if notes else "") +
                f" {'One build a config' if not repeated else 'Builds'}, from clean, one after another {conditions}, on {raw['host']['cpu']} "
                f"({raw['host']['cpus']} CPUs), {raw['compiler']}, source {raw['source']}. Command: `{raw['command']}`.")
    return "\n".join(rows)


# Why the lab kernel holds each subsystem: the need in lab.config that brings it.
SUBSYSTEM_NEEDS = {
    "mm": "the paths the lab times: memmap init (ZONE_DEVICE), migration and demotion (NUMA, THP)",
    "arch/x86/kernel": "the x86-64 kernel proper: SMP, APIC, alternatives, ORC, ftrace",
    "arch/x86/kernel/cpu": "CPU setup and the mitigations kept as defconfig has them",
    "drivers/acpi/acpica": "ACPI's interpreter: QEMU's NFIT (the pmem namespace) and SRAT (node 1, the demotion target)",
    "drivers/acpi": "ACPI: NFIT and NUMA, as above",
    "kernel/bpf": "BPF: the syscall, verifier and BTF nttrace's probes load through",
    "net/ipv4": "TCP/IP: the host scrapes the guest's daemon through a forwarded port",
    "net/core": "networking's core, for the same",
    "fs": "the VFS",
    "kernel": "the core kernel",
    "fs/ext4": "the guest image's root filesystem",
    "lib": "library code the above call",
    "kernel/trace": "ftrace, tracepoints and BPF's trace events",
    "block": "the block layer (the root disk on virtio-blk)",
    "drivers/pci": "PCI: QEMU's virtio devices",
    "kernel/time": "timers and clocks",
    "drivers/base": "the driver model",
    "drivers/tty": "the serial console (the host reads results and panics there)",
    "fs/proc": "/proc",
    "kernel/sched": "the scheduler",
    "fs/netfs": "9p's library: the shares (the tree, the results)",
    "fs/9p": "the 9p shares",
    "net/9p": "the 9p shares' virtio transport",
    "kernel/cgroup": "cgroups: systemd, and the memcg reclaim and demotion scenarios",
    "kernel/irq": "interrupts",
    "drivers/nvdimm": "libnvdimm: the pmem namespaces the memmap scenarios rebind",
    "kernel/events": "perf events: bcc's perf buffers, the perf counting checks",
    "arch/x86/events": "perf events on x86, as above",
    "arch/x86/mm": "x86 page tables, PAT, KASLR of memory",
}


def build_cost_per_object(raw: dict) -> str:
    """Where one config's compile time goes, per subsystem, and why each is there."""
    c = next(c for c in raw["configs"] if "per_object" in c)
    po = c["per_object"]
    total = po["compile_cpu_s"]
    rows = ["| subsystem | objects | compile CPU | share | in the lab kernel for |", "|---|--:|--:|--:|---|"]
    shown = po["subsystems"][:24]
    for r in shown:
        rows.append(f"| `{r['path']}` | {r['objects']} | {r['cpu_s']:.0f} s | {100 * r['cpu_s'] / total:.1f}% | "
                    f"{SUBSYSTEM_NEEDS.get(r['path'], '')} |")
    rest = po["subsystems"][len(shown):]
    rows.append(f"| {len(rest)} others | {sum(r['objects'] for r in rest)} | {sum(r['cpu_s'] for r in rest):.0f} s | "
                f"{100 * sum(r['cpu_s'] for r in rest) / total:.1f}% | |")
    top = ", ".join(f"`{o['object']}` {o['cpu_s']:.1f} s" for o in po["costliest"][:8])
    rows += ["", f"{po['compiles']} compiles, {total:.0f} CPU-seconds in all (the build: {_mmss(c['build_s'])} at "
                 f"-j{raw['jobs']}, compile phase {c['compile_s']:.0f} s, link tail {c['link_tail_s']:.0f} s). "
                 f"Costliest objects: {top}. Config `{c['config']}` ({c['recipe']}), one build, each compile timed "
                 f"by a wrapper around gcc, on {raw['host']['cpu']} ({raw['host']['cpus']} CPUs). "
                 f"Command: `{raw['command']}`."]
    return "\n".join(rows)


def _built_in(run: dict) -> dict:
    """The kernels a CI run built itself (the others came from the cache)."""
    return {name: k for name, k in run["kernels"].items() if k["built_at"] >= run["started"]}


def ci_runs(raw: dict) -> str:
    """CI runs side by side, one column each (label: its raw file), and the
    slowest steps of the last one."""
    runs = list(raw.values())
    rows = ["| | " + " | ".join(raw) + " |", "|---|" + "--:|" * len(runs),
            "| commit | " + " | ".join(r["commit"][:7] for r in runs) + " |",
            "| caches | " + " | ".join("emptied first" if r["cold"] else "warm" for r in runs) + " |",
            "| **wall time** | " + " | ".join(f"**{_mmss(r['wall_s'])}**" for r in runs) + " |",
            "| pytest | " + " | ".join(r["pytest"].split(" in ")[0] for r in runs) + " |"]
    for name in sorted(set().union(*(r["kernels"] for r in runs))):
        cells = [_mmss(_built_in(r)[name]["build_s"]) if name in _built_in(r) else "cached" for r in runs]
        rows.append(f"| kernel {name} built in (make, beside the tests) | " + " | ".join(cells) + " |")
    rows.append("| lab guests' time, summed (one core each) | " + " | ".join(
        f"{_mmss(sum(r['guests_s'].values()))}" if "guests_s" in r else "not recorded" for r in runs) + " |")
    rows.append("| started (UTC) | " + " | ".join(r["started"] for r in runs) + " |")
    last = runs[-1]
    slowest = sorted(last.get("slowest", []), key=lambda d: -d["s"])[:12]
    if slowest:
        rows += ["", f"The slowest steps of the last ({list(raw)[-1]}; pytest `--durations`; a lab fixture's setup is "
                     "its guest's boot and scenarios, and the kernel build where the kernel was not cached):", "",
                 "| step | test | time |", "|---|---|--:|"]
        rows += [f"| {d['when']} | `{d['test']}` | {_mmss(d['s'])} |" for d in slowest]
    hosts = sorted({f"{r['host']['cpu']} ({r['host']['cpus']} CPUs)" for r in runs})
    rows += ["", f"One run each, on {', '.join(hosts)}. Command: `{last['command']}` "
                 "(`python3 benchmarks/ci_run.py [--cold] --json FILE`)."]
    return "\n".join(rows)


def lab_scenarios(raw: str) -> str:
    """Each scenario's time inside the stock guest, from its guest-run.log."""
    done = re.findall(r"^scenario (\S+): done in (\d+)s$", raw, re.M)
    rows = ["| scenario | seconds |", "|---|--:|"] + [f"| {name} | {s} |" for name, s in done]
    rows += [f"| all {len(done)} | {sum(int(s) for _n, s in done)} |", "",
             "One boot of the Debian 12 guest (kernel 6.1, single-threaded QEMU TCG: emulated times), as "
             "`make test PYTEST_ARGS=\"-m lab\"` runs it; the raw file is the guest's own log."]
    return "\n".join(rows)


def page_ref_observer(raw: dict) -> str:
    """Each lab kernel's rebinds without and with the page_ref_set probe
    (the guest's memmap_<mode>.json: its report and its page_ref_report)."""
    sys.path.insert(0, str(HERE.parent))     # the checkout: the lab's reading of a report's checks
    from lab.lab_checks import checks
    rows = ["| kernel | mode | rebind median, no page_ref (n) | with page_ref_set attached (n) | page_ref_set per page "
            "initialised | path nttrace infers |", "|---|---|--:|--:|--:|---|"]
    for key, r in raw.items():
        kernel, mode = key.rsplit("-", 1)
        plain, ref = (checks(r[k])["kernel.memmap_latency"]["evidence"] for k in ("report", "page_ref_report"))
        rows.append(f"| {kernel} | {mode} | {plain['rebind_ms']['median']:.1f} ms ({plain['rebind_ms']['n']}) | "
                    f"{ref['rebind_ms']['median']:.1f} ms ({ref['rebind_ms']['n']}) | "
                    f"{ref['page_ref_sets_per_page']['median']:.2g} | {', '.join(ref['template_path'])} |")
    rows += ["", "One boot a kernel (QEMU TCG: emulated times; compare within a row), as the lab's kernel tests run it "
                 "(`make test PYTEST_ARGS=\"-m lab\"`); the raw files are the guests' memmap scenario outputs."]
    return "\n".join(rows)


def systemd_unit(raw: dict) -> str:
    """The shipped unit under the lab guest's systemd (lab/guest_systemd.py)."""
    caps = raw["caps"]
    rows = ["| | seconds |", "|---|--:|",
            f"| `systemctl start` to active (READY=1; bcc compiling the migrate probe under TCG is most of it) | "
            f"{raw['start_s']:.1f} |",
            f"| `systemctl reload` (returns at once; the copy probe attaches in the background) | {raw['reload_s']:.2f} |",
            f"| SIGSTOP of the main process to a new main process active (watchdog, SIGABRT, restart, compile) | "
            f"{raw['watchdog_restart_s']:.1f} |",
            f"| `systemctl stop` to inactive, {len(raw['programs_after_stop'])} BPF programs left | {raw['stop_s']:.2f} |",
            f"| start refused under `perf_event_paranoid={raw['perf_event_paranoid']}` (exit with the reason) | "
            f"{raw['paranoid_start_s']:.1f} |",
            "",
            f"One boot (QEMU TCG: emulated times). The service's CapEff = CapBnd = CapPrm = {caps['CapEff']:#x} "
            f"(CAP_PERFMON, CAP_BPF); programs while running: {', '.join(raw['programs_running'])}. "
            "Command: `make test PYTEST_ARGS=\"-m lab\"` (the raw file is the guest's systemd.json)."]
    return "\n".join(rows)


def slow_machine(raw: dict) -> str:
    """The CI runs scaled to the slow machine of the issue by the
    side-by-side build ratio of the config both measured, against the
    issue's goals."""
    slow, cost, cold = raw["slow"], raw["cost"], raw["cold"]
    here, lab = (_mean_build([c for c in cost["configs"] if c["config"] == name])["build_s"]
                 for name in ("defconfig-based", "lab"))   # a config built twice in the run: its mean
    ratio = slow["defconfig_based_base_build_s"] / here
    goals = [("lab.config base kernel build, over the defconfig-based one", lab / here, 0.5, f"{lab / here:.2f}", "under 0.50")]
    rows = ["| | here | slow machine (here x ratio) | limit |", "|---|--:|--:|--:|",
            f"| defconfig-based base kernel build | {_mmss(here)} | {_mmss(slow['defconfig_based_base_build_s'])} "
            f"(measured there) | |",
            f"| lab.config base kernel build | {_mmss(lab)} | {_mmss(lab * ratio)} | 8 m |",
            f"| cold `.ci/run` ({cold['commit'][:7]}) | {_mmss(cold['wall_s'])} | {_mmss(cold['wall_s'] * ratio)} | 65 m |"]
    goals.append(("lab.config base kernel build on the slow machine", lab * ratio, 8 * 60, _mmss(lab * ratio), "8 m"))
    goals.append(("cold `.ci/run` on the slow machine", cold["wall_s"] * ratio, 65 * 60, _mmss(cold["wall_s"] * ratio), "65 m"))
    if "cached" in raw:
        rows.append(f"| cached `.ci/run` ({raw['cached']['commit'][:7]}; kernels and image in the cache) | "
                    f"{_mmss(raw['cached']['wall_s'])} | "
                    f"{_mmss(raw['cached']['wall_s'] * ratio)} | 25 m |")
        goals.append(("cached `.ci/run` on the slow machine", raw["cached"]["wall_s"] * ratio, 25 * 60,
                      _mmss(raw["cached"]["wall_s"] * ratio), "25 m"))
    if "landed" in raw:     # CI's own run: on CI's machine, whose speed is not reported, so not scaled
        landed = raw["landed"]
        rows.append(f"| cold `.ci/run` as CI ran it ({landed['commit'][:7]}, {landed['result']}; CI's machine, "
                    f"not scaled) | {_mmss(landed['wall_s'])} | | 65 m |")
        goals.append((f"cold `.ci/run` as CI ran it ({landed['commit'][:7]}), unscaled", landed["wall_s"], 65 * 60,
                      _mmss(landed["wall_s"]), "65 m"))
    rows.append("")
    rows.append(f"Ratio x{ratio:.2f}: the slow machine's defconfig-based base build ({slow['source']}) over this "
                f"machine's, same config and source. Every part of a run is scaled by it, the parts that do "
                f"not compile too (an upper bound: a slower CPU does not slow a download).")
    rows += ["", "| goal (issue #19) | measured | goal | |", "|---|--:|--:|---|"]
    rows += [f"| {what} | {shown} | {goal_text} | {'met' if value < goal else '**not met**'} |"
             for what, value, goal, shown, goal_text in goals]
    return "\n".join(rows)


def guest_mitigations(raw: dict) -> str:
    """What each lab kernel's guest mitigates (its /sys/devices/system/cpu/vulnerabilities, as its report holds
    them): the entries that are not "Not affected"."""
    kernels = raw["kernels"]
    rows = ["| kernel | vulnerability | the guest kernel's choice |", "|---|---|---|"]
    for name, vulns in kernels.items():
        rows += [f"| {name} | {v} | {choice} |" for v, choice in sorted(vulns.items()) if choice != "Not affected"]
        rows.append(f"| {name} | the other {sum(c == 'Not affected' for c in vulns.values())} | Not affected |")
    rows += ["", f"One boot a kernel. Source: {raw['source']}."]
    return "\n".join(rows)


def ci_floor(raw: dict) -> str:
    """What a CI run cannot go under on two cores: its kernel builds (each as
    long as the lab build alone at -j2, both cores) and its lab guests (one
    core each, so their sum over two), against the run itself."""
    cost, runs = raw["cost"], {k: v for k, v in raw.items() if k != "cost"}
    build = next(c for c in cost["configs"] if c["config"] == "lab")["build_s"]
    rows = ["| | " + " | ".join(runs) + " |", "|---|" + "--:|" * len(runs)]
    built = {k: len(_built_in(r)) for k, r in runs.items()}
    floors = {k: built[k] * build + sum(r["guests_s"].values()) / 2 for k, r in runs.items()}
    rows.append("| kernels built in the run, at the lab build's time alone | "
                + " | ".join(f"{built[k]} x {build:.0f} s = {_mmss(built[k] * build)}" for k in runs) + " |")
    rows.append("| lab guests, each one's time (one core each), summed | "
                + " | ".join(f"{_mmss(sum(r['guests_s'].values()))} ({len(r['guests_s'])} guests)" for r in runs.values())
                + " |")
    rows.append("| **floor**: the builds, then the guests on both cores | "
                + " | ".join(f"**{_mmss(floors[k])}**" for k in runs) + " |")
    rows.append("| the run (wall) | " + " | ".join(_mmss(r["wall_s"]) for r in runs.values()) + " |")
    rows.append("| run / floor | " + " | ".join(f"{r['wall_s'] / floors[k]:.2f}" for k, r in runs.items()) + " |")
    each = "; ".join(f"{k}: " + ", ".join(f"{g} {s:.0f} s" for g, s in r["guests_s"].items()) for k, r in runs.items())
    rows += ["", f"Each guest's time is its console's last uptime stamp (the hang guest's is its boot: it then "
                 f"sleeps until its 90 s bound, holding no core): {each}. The floor leaves out the rest of the suite "
                 f"(about five minutes of one core), the guest image's build and the downloads of a cold run; a "
                 f"guest's time is its wall time, so where it shared its core (cold: beside the builds and the rest "
                 f"of the suite) it overstates what the guest needs alone. The lab build alone: `{cost['command']}`."]
    return "\n".join(rows)


NATIVE = ["native-epyc-vm-2026-11-30.json"]
BLOCKS = {
    "validate-quick": (whole_command, ["validate-quick-epyc-vm-2026-12-01.json"]),
    "trace-cpu": (whole_command, ["trace-4s-epyc-vm-2026-12-01.json"]),
    "build-cost": (build_cost, ["lab-kernel-build-cost-2026-12-02.json"]),
    "build-cost-debug-info": (build_cost, ["lab-kernel-build-cost-2026-12-01.json"]),
    "build-cost-ext2": (build_cost, ["lab-kernel-build-cost-ext2-2026-12-02.json"]),
    "build-cost-codegen": (partial(build_cost, conditions="(the lab build first, with a cold page cache and about "
                                               "30 s of one core taken by a test run beside it)"),
                           ["lab-kernel-build-cost-codegen-2026-12-02.json"]),
    "build-cost-mitigations": (build_cost, ["lab-kernel-build-cost-mitigations-2026-12-03.json"]),
    "build-cost-session17": (build_cost, ["lab-kernel-build-cost-2026-12-03.json"]),
    "lab-guest-mitigations": (guest_mitigations, ["lab-guest-mitigations-2026-12-03.json"]),
    "build-cost-per-object": (build_cost_per_object, ["lab-kernel-build-cost-per-object-2026-12-02.json"]),
    "ci-cold": (ci_runs, {"cold, earlier machine": "ci-cold-2026-12-01.json",
                          "cold, session 10": "ci-cold-2026-12-01-session10.json",
                          "cached, session 10": "ci-cached-2026-12-02-session10.json",
                          "cold, session 11": "ci-cold-2026-12-02-session11.json",
                          "cached, session 11, first": "ci-cached-2026-12-02-session11-first.json",
                          "cached, session 11": "ci-cached-2026-12-02-session11.json"}),
    "ci-cold-session12": (ci_runs, {"cold, session 11": "ci-cold-2026-12-02-session11.json",
                                    "cold, session 12: ext2 root": "ci-cold-2026-12-02-session12.json",
                                    "cold, session 12: ext2 root + start-up": "ci-cold-2026-12-02-session12-startup.json",
                                    "cached, session 12": "ci-cached-2026-12-02-session12.json"}),
    "ci-cold-session13": (ci_runs, {"cold, session 12: ext2 root + start-up": "ci-cold-2026-12-02-session12-startup.json",
                                    "cold, session 13": "ci-cold-2026-12-02-session13.json",
                                    "cached, session 13": "ci-cached-2026-12-02-session13.json"}),
    "ci-session14": (ci_runs, {"cold, session 14 (beside a guest of mine)": "ci-cold-2026-12-02-session14.json",
                               "cached, session 14, first": "ci-cached-2026-12-02-session14-first.json",
                               "cached, session 14, second": "ci-cached-2026-12-02-session14-second.json",
                               "cached, session 14, third": "ci-cached-2026-12-02-session14.json",
                               "cached, session 14": "ci-cached-2026-12-02-session14-fourth.json"}),
    "ci-session16": (ci_runs, {"cold, session 16": "ci-cold-2026-12-03-session16.json"}),
    "ci-session17": (ci_runs, {"cold, session 17": "ci-cold-2026-12-03-session17.json"}),
    "slow-machine-session17": (slow_machine, {"slow": "slow-machine-issue19.json",
                                              "cost": "lab-kernel-build-cost-2026-12-03.json",
                                              "cold": "ci-cold-2026-12-03-session17.json"}),
    "ci-session18": (ci_runs, {"cold, session 18": "ci-cold-2026-12-03-session18.json"}),
    "build-cost-requirements": (build_cost, ["lab-kernel-build-cost-requirements-2026-12-03.json"]),
    "build-cost-probe-support": (partial(build_cost, conditions="(nothing else running, but for a configure of about "
                                                                "20 s beside the last lab build)"),
                                 ["lab-kernel-build-cost-probe-support-2026-12-03.json"]),
    "build-cost-debug-info-session19": (build_cost, ["lab-kernel-build-cost-debug-info-2026-12-03.json"]),
    "build-cost-statement-frontiers": (build_cost, ["lab-kernel-build-cost-statement-frontiers-2026-12-03.json"]),
    "build-cost-statement-frontiers-epyc": (build_cost, ["lab-kernel-build-cost-statement-frontiers-2026-12-04.json"]),
    "build-cost-session21": (build_cost, ["lab-kernel-build-cost-2026-12-04.json"]),
    "ci-session22": (ci_runs, {"cold, session 22": "ci-cold-2026-12-04-session22.json"}),
    "build-cost-interleaved": (build_cost, ["lab-kernel-build-cost-interleaved-2026-12-04.json"]),
    "slow-machine-session22": (slow_machine, {"slow": "slow-machine-issue19.json",
                                              "cost": "lab-kernel-build-cost-interleaved-2026-12-04.json",
                                              "cold": "ci-cold-2026-12-04-session22.json"}),
    "slow-machine-session18": (slow_machine, {"slow": "slow-machine-issue19.json",
                                              "cost": "lab-kernel-build-cost-requirements-2026-12-03.json",
                                              "cold": "ci-cold-2026-12-03-session18.json"}),
    "ci-floor": (ci_floor, {"cost": "lab-kernel-build-cost-2026-12-02.json",
                            "cold, session 11": "ci-cold-2026-12-02-session11.json",
                            "cached, session 11": "ci-cached-2026-12-02-session11.json",
                            "cold, session 12: ext2 root": "ci-cold-2026-12-02-session12.json",
                            "cold, session 12: + start-up": "ci-cold-2026-12-02-session12-startup.json"}),
    "ci-floor-session13": (ci_floor, {"cost": "lab-kernel-build-cost-ext2-2026-12-02.json",
                                      "cold, session 13": "ci-cold-2026-12-02-session13.json"}),
    "slow-machine": (slow_machine, {"slow": "slow-machine-issue19.json", "cost": "lab-kernel-build-cost-ext2-2026-12-02.json",
                                    "cold": "ci-cold-2026-12-02-session13.json",
                                    "cached": "ci-cached-2026-12-02-session13.json",
                                    "landed": "ci-landed-stop26.json"}),
    "lab-scenarios": (lab_scenarios, ["lab-stock-guest-run-2026-12-01.log"]),
    "page-ref-observer": (page_ref_observer, {f"{k}-{m}": f"lab-kernels-2026-12-01/{k}/memmap_{m}.json"
                                              for k in ("base", "nt-v3") for m in ("fsdax", "devdax")}),
    "systemd-unit": (systemd_unit, ["systemd-lab-debian12-tcg-2026-12-01.json"]),
    # the A/B of the recorded base and nt-v3 boots, as tests/test_golden_outputs.py holds it to them
    "ab-one-boot": (text_file, ["tests/fixtures/golden/ab-base-nt-v3.md"]),
    "daemon-versions": (daemon_versions, {"first": "daemon-epyc-vm-2026-11-30.json",
                                          "current": "daemon-epyc-vm-2026-11-30-session2.json"}),
    "daemon-loader-ab": (daemon_loader_ab, ["daemon-loader-ab-epyc-vm-2026-11-30.json"]),
    "overhead-compaction": (overhead, {"probes": "overhead-epyc-vm-2026-11-30.json",
                                       "aa": "overhead-aa-epyc-vm-2026-11-30.json"}),
    "overhead-demotion": (lambda raw: overhead_demotion(raw["both"]),
                          {"both": "overhead-demotion-lab-nt-v3-tcg-2026-11-30.json"}),
    "memory-floor": (memory_floor, {"bare": "python-floor-bare-epyc-vm-2026-12-01.json",
                                     "exporter": "python-floor-exporter-imports-epyc-vm-2026-12-01.json",
                                     "daemon": "daemon-loader-ab-epyc-vm-2026-11-30.json"}),
    "snapshot-read": (snapshot_read, ["snapshot-read-epyc-vm-2026-12-01.json"]),
    "btf-read": (btf_read, ["btf-read-ab-epyc-vm-2026-12-02.json"]),
    "validate-quick-ab": (whole_command_vs, ["validate-quick-ab-epyc-vm-2026-12-02.json"]),
    "migrate-program-ab": (migrate_program_ab, ["migrate-program-ab-epyc-vm-2026-11-30.json"]),
    "probe-rounds": (probe_rounds, ["probes-epyc-vm-2026-11-30-rounds.json"]),
    "native-memmap": (native_memmap, NATIVE),
    "native-page-copy": (native_page_copy, NATIVE),
    "native-fixed-nt": (native_fixed_nt, NATIVE),
    "native-hazards": (native_hazards, NATIVE),
    "native-copy-table": (native_copy_table, NATIVE),
    "daemon-stops": (daemon_stops, ["daemon-stops-lab-nt-v3-tcg-2026-12-02.json"]),
    "daemon-idle-connections": (idle_connections, ["daemon-idle-connections-epyc-vm-2026-12-01.json"]),
    "perf-binding": (perf_binding, ["perf-binding-epyc-vm-2026-12-01.json"]),
    "lab-aa-base": (lab_ab, ["lab-aa-base-2026-12-01/ab.json", "lab-aa-base-2026-12-01/run.json"]),
    "lab-ab-base-nt-v3": (lab_ab, ["lab-ab-base-nt-v3-2026-12-01/ab.json", "lab-ab-base-nt-v3-2026-12-01/run.json"]),
    "lab-aa-base-contended": (lab_ab, ["lab-aa-base-contended-2026-12-01/ab.json",
                                       "lab-aa-base-contended-2026-12-01/run.json"]),
    "lab-ab-base-nt-v3-contended": (lab_ab, ["lab-ab-base-nt-v3-contended-2026-12-01/ab.json",
                                             "lab-ab-base-nt-v3-contended-2026-12-01/run.json"]),
}


def block(name: str) -> str:
    fn, files = BLOCKS[name]
    if fn is text_file:     # a file of the tree, quoted whole (its path from the top)
        return f"<!-- generated: {name} -->\n_Generated by `python3 benchmarks/render.py` from `{files[0]}`._\n\n" \
               f"{text_file((HERE.parent / files[0]).read_text())}\n<!-- end generated: {name} -->"
    if isinstance(files, dict):
        raw = {key: _load(f) for key, f in files.items()}
        files = list(files.values())
    else:
        raw = _load(files[0]) if len(files) == 1 else {"ab": _load(files[0]), "run": _load(files[1])}
    sources = ", ".join(f"`benchmarks/{f}`" for f in files)
    return f"<!-- generated: {name} -->\n_Generated by `python3 benchmarks/render.py` from {sources}._\n\n" \
           f"{fn(raw)}\n<!-- end generated: {name} -->"


def render(text: str) -> str:
    def sub(m):
        return block(m.group(1))
    return re.sub(r"<!-- generated: ([\w-]+) -->.*?<!-- end generated: \1 -->", sub, text, flags=re.S)


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("BENCHMARKS.md differs from its raw data: run python3 benchmarks/render.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
