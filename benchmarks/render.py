"""BENCHMARKS.md's generated tables, made from the raw files beside this
script: each block between

    <!-- generated: NAME -->  ...  <!-- end generated: NAME -->

is rewritten from the raw file(s) BLOCKS names, so a figure in those tables
is the figure in its raw file. tests/unit/test_benchmarks_doc.py fails when the
document and its raw data disagree.

    python3 benchmarks/render.py           # rewrite BENCHMARKS.md's generated blocks
    python3 benchmarks/render.py --check   # exit 1 when a block differs from its raw data

Each block's raw files are named in its first line; the script that made a
raw file is named in the block (nttrace's own `bench` commands, or the
scripts beside this one: whole_command.py, ci_run.py, btf_read_ab.py).
"""
from __future__ import annotations

import json
import re
import statistics
import sys
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


def whole_commands(raw: dict) -> str:
    """Commands timed as whole processes (benchmarks/whole_command.py), a
    column each: median [min..max]."""
    runs = list(raw.values())
    rows = ["| | " + " | ".join(f"`{r['command'].removeprefix('.venv/bin/')}`" for r in runs) + " |",
            "|---|" + "--:|" * len(runs)]
    for key, label, fmt in WHOLE_FIGURES:
        rows.append(f"| {label} | " + " | ".join(f"**{format(r['summary'][key]['median'], fmt)}** "
                                               f"[{format(r['summary'][key]['min'], fmt)}.."
                                               f"{format(r['summary'][key]['max'], fmt)}]" for r in runs) + " |")
    rows += ["", "Medians [min..max]; " + "; ".join(
        f"{len(r['runs'])} counted runs after {r['warmup']} warm-up, {r['taken']}, on {r['host']['cpu']} "
        f"({r['host']['cpus']} CPUs), kernel {r['host']['kernel']}" for r in runs)
        + ". Command: `python3 benchmarks/whole_command.py -- COMMAND`."]
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


def text_file(raw: str) -> str:
    return raw.rstrip("\n")


def _mmss(s: float) -> str:
    return f"{int(s // 60)} m {int(s % 60):02d} s"


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


def _machine(run: dict) -> str:
    """A run's machine by name: its CPU model, its cores, a VM (every host so far)."""
    if "host" not in run:
        return "CI's machine (not reported)"
    cpu = run["host"]["cpu"]
    name = "Intel Xeon" if "Xeon" in cpu else cpu
    return f"{name} {run['host']['cpus']}-core VM"


def _built_in(run: dict) -> dict:
    """The kernels a CI run built itself (the others came from the cache)."""
    return {name: k for name, k in run.get("kernels", {}).items() if k["built_at"] >= run["started"]}


def ci_runs(raw: dict) -> str:
    """CI runs, one row each (named by date, machine and commit), and the
    slowest steps of the run named "slowest"."""
    runs = list(raw.values())       # "slowest" is a row as well
    rows = ["| started (UTC) | machine | commit | caches | wall time | pytest | kernels built beside the tests: "
            "base / nt-v3 / nt-v2 | lab guests, summed |", "|---|---|---|---|--:|---|---|--:|"]
    for r in runs:
        if "started" not in r:      # CI's own run: its wall time and result only
            rows.append(f"| {r['read']} | {_machine(r)} | {r['commit'][:7]} | unknown | **{_mmss(r['wall_s'])}** | "
                        f"{r['result']} | not reported | not reported |")
            continue
        built = _built_in(r)
        kernels = " / ".join(_mmss(built[k]["build_s"]) if k in built else "cached" for k in ("base", "nt-v3", "nt-v2"))
        guests = _mmss(sum(r["guests_s"].values())) if "guests_s" in r else "not recorded"
        rows.append(f"| {r['started'][:16]} | {_machine(r)} | {r['commit'][:7]} | "
                    f"{'emptied first' if r['cold'] else 'warm'} | **{_mmss(r['wall_s'])}** | "
                    f"{r['pytest'].split(' in ')[0]} | {kernels} | {guests} |")
    last = raw["slowest"]
    slowest = sorted(last["slowest"], key=lambda d: -d["s"])[:6]
    rows += ["", f"The slowest steps of the {'cold' if last['cold'] else 'cached'} run of {last['commit'][:7]} (pytest "
                 "`--durations`; a lab test's setup is its guest's boot and scenarios):", "",
             "| step | test | time |", "|---|---|--:|"]
    rows += [f"| {d['when']} | `{d['test']}` | {_mmss(d['s'])} |" for d in slowest]
    rows += ["", "One run each. Command: `CI=true bash .ci/run` on a fresh clone, through "
                 "`python3 benchmarks/ci_run.py [--cold] --json FILE` (`--cold` empties the lab's caches first)."]
    return "\n".join(rows)


def _stats(ab: dict, subject: str, metric: str, check: str = "kernel.memmap_latency") -> dict:
    return next(r["stats"] for r in ab["baseline_comparison"]
                if r["check"] == check and r["subject"] == subject and r["metric"] == metric)


def _cov(x) -> str:
    return "-" if x is None else (f"{x:.1f}%" if x >= 0.1 else f"{x:.2g}%")


def lab_noise(raw: dict) -> str:
    """Boot-to-boot CoV of the rebinds, per A/A run: the guest CPU it ran
    on, the host's state, and the smallest change its boots could detect."""
    rows = ["| A/A of base | guest CPU and clock | host | boots a side | namespace | fastest rebind: CoV base / B | "
            "median rebind: CoV base / B | detectable (fastest) |", "|---|---|---|--:|---|--:|--:|--:|"]
    for label, (ab, run) in raw.items():
        cpu = run.get("cpu", "QEMU tcg thread=single, 2 vCPUs, host clock")
        conds = ab.get("baseline_conditions") or {}
        states = {k for side in conds.values() if side for k in side["states"]}
        host = ", ".join(sorted(states)) if states else label.split(", ")[-1] + " (not recorded)"
        for ns in ("fsdax", "devdax"):
            mn, md = _stats(ab, ns, "rebind_ms.min"), _stats(ab, ns, "rebind_ms.median")
            det = mn.get("detectable_pct")
            rows.append(f"| {label} | {cpu.removeprefix('QEMU tcg thread=single, ')} | {host} | {mn['base']['n']} | {ns} | "
                        f"{_cov(mn['base']['cov_pct'])} / {_cov(mn['current']['cov_pct'])} | "
                        f"{_cov(md['base']['cov_pct'])} / {_cov(md['current']['cov_pct'])} | "
                        f"{'-' if det is None else '±' + _cov(det)} |")
    rows += ["", "CoV: standard deviation over mean of the boots' values, each side. Detectable: the smallest change "
                 "the run's own boots would mark with 80% power (nttrace.validate.statistics; '-' where the run "
                 "predates it). " + "; ".join(f"{label}: `{run['command']}`" for label, (_ab, run) in raw.items())]
    return "\n".join(rows)


def lab_ab_icount(raw: dict) -> str:
    """The A/A and A/B on the A/B's guest CPU: per figure tested, the change,
    its interval, verdict and what the boots could detect; host and wall time."""
    rows = ["| run | figure | role | base | patched | change [interval] | verdict, p | detectable |",
            "|---|---|---|--:|--:|--:|---|--:|"]
    for label, (ab, run) in raw.items():
        for r in ab["baseline_comparison"]:
            st = r.get("stats")
            if not st or st["role"] == "descriptive":
                continue
            ci = st["change_ci"]
            verdict = ("*" if st["significant"] else "~") if st["p"] is not None else st["verdict"]
            p = f", {st['p']:.2g}" if st["p"] is not None else ""
            det = st.get("detectable_pct")
            name = r["check"] + (f" [{r['subject']}]" if r["subject"] else "")
            rows.append(f"| {label} | {name}: {r['label']} | {st['role']} | {st['base']['median']:.4g} | "
                        f"{st['current']['median']:.4g} | {st['change_pct']:+.3g}%"
                        + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" | {verdict}{p} | "
                        + ("-" if det is None else f"±{det:.2g}%") + " |")
    rows.append("")
    for label, (ab, run) in raw.items():
        conds = ab["baseline_conditions"]
        host = "; ".join(f"{side}: " + ", ".join(f"{v} {k}" for k, v in c["states"].items())
                         + f" of {c['windows']} boots, others at most {100 * c['others_share_max']:.0f}% of a CPU"
                         + (f", beside {', '.join(c['busy_beside'])}" if c["busy_beside"] else "")
                         for side, c in conds.items() if c)
        rows.append(f"- {label} ({run['finished'][:10]}, {run.get('machine', 'machine not recorded')}, commit "
                    f"{run.get('commit', 'not recorded')}): `{run['command']}`, {run['boots']} boots a side, "
                    f"{_mmss(run['wall_s'])}, "
                    f"{run['cpu']}; host {host}.")
    return "\n".join(rows)


def memremap_beside_seeds(raw: dict) -> str:
    """memremap_pages() of test_hmm's DEVICE_PRIVATE chunks, base against
    nt-v3 in the lab, beside the series' own test_hmm figures."""
    ab, run = raw["ab"]
    st = _stats(ab, "", "calls.min_ms", "probe.memremap")
    med = _stats(ab, "", "calls.median_ms", "probe.memremap")
    ci = st["change_ci"]
    return "\n".join([
        "| | base | nt-v3 | change |", "|---|--:|--:|--:|",
        f"| lab: fastest memremap_pages() of a boot, 256 MiB chunk, ms (median of {st['base']['n']} boots) | "
        f"{st['base']['median']:.3f} | {st['current']['median']:.3f} | {st['change_pct']:+.1f}% "
        f"[{ci[0]:+.1f}, {ci[1]:+.1f}] {'*' if st['significant'] else '~'} |",
        f"| lab: median call | {med['base']['median']:.3f} | {med['current']['median']:.3f} | "
        f"{med['change_pct']:+.1f}% |",
        "| the series (64 GB chunks, physical x86_64 host, mean of two devices' averages), ms | 116.61 | 54.53 | "
        "-53.2% |", "",
        f"Lab: `{run['command']}`; QEMU TCG with icount (instruction counts, no NT or cache effect)."])


def lab_steps(raw: dict) -> str:
    """lab.steps' table, both namespaces side by side: each step's fastest
    rebind, its change from the step before with interval and verdict, its
    share of the series, and the series' own per-patch figures."""
    sys.path.insert(0, str(HERE.parent))     # the checkout: the lab package's own formatting
    from lab import steps
    meta, subjects = raw["meta"], raw["table"]["subjects"]
    fs, dd = subjects["fsdax"]["rows"], subjects["devdax"]["rows"]
    rows = ["| step | fsdax ms | change from the step before | share | devdax ms | change from the step before "
            "| share | path, page_ref_set on | the series' own: fsdax / devdax |", "|---|--:|--:|--:|--:|--:|--:|---|---|"]

    def cells(r):
        share = f"{r['share_pct']:.0f}%" if r.get("share_pct") is not None else ""
        verdict = steps._verdict(r)
        verdict = verdict if len(verdict) <= 2 else "not testable"
        return [f"{r['median']:.3f}", f"{steps._fmt_change(r)} {verdict}".strip(), share]
    for f, d in zip(fs, dd):
        seeds = " / ".join(filter(None, (steps._seed_cell(subjects["fsdax"]["seeds"], f["step"]),
                                         steps._seed_cell(subjects["devdax"]["seeds"], d["step"]))))
        rows.append(f"| {f['step']} | " + " | ".join(cells(f) + cells(d)) + f" | {f.get('page_ref_path', '')} | {seeds} |")
    rows += ["", f"Whole series: fsdax {subjects['fsdax']['total_pct']:+.1f}%, devdax "
                 f"{subjects['devdax']['total_pct']:+.1f}%. Patches: "
             + "; ".join(f"{r['step']}: " + ", ".join(r["patches"]) for r in fs if r.get("patches")) + "."]
    cannot: dict[str, list[str]] = {}
    for r in fs:     # read from the patches' titles by today's lab.steps (an interpretation, not a figure)
        for note in steps.Step(0, 0, r.get("patches") or []).cannot():
            cannot.setdefault(note, []).append(r["step"])
    rows += [""] + [f"- The lab cannot attribute step {', '.join(st)}: it {note}." for note, st in cannot.items()]
    rows += ["", f"{meta['boots']} boots a step and of base, in rounds; ms: the median over boots of each boot's "
                 f"fastest rebind; changes: Hodges-Lehmann with the exact rank interval, * / ~ by the exact "
                 f"Mann-Whitney test at alpha 0.05/{len(fs) - 1} (Bonferroni over the steps); share: of the "
                 f"series' log change. {meta['finished'][:10]}, {meta['machine']}, commit {meta['commit']}, "
                 f"{meta['cpu']}, {_mmss(meta['wall_s'])}: `{meta['command']}`."]
    return "\n".join(rows)


QUICK_LABELS = {
    "quick": "`nttrace validate --quick` (the LLC from /sys)",
    "quick-llc32m": "`NTTRACE_LLC_SIZE=32M nttrace validate --quick` (a 32 MiB LLC, as the plan reads it)",
    "floor-report": "floor: `nttrace validate --quick --check 'env.*'` (start-up, BTF, capability report)",
    "floor-import": "floor: `python -c 'import nttrace.cli'`",
    "native": "`nttrace validate --quick --check 'native.*'` alone",
    "migrate": "`nttrace validate --quick --check kernel.migrate_observed` alone",  # not a probe: a round's key in the raw file
    "before": "before: `nttrace validate --quick`",
}


def _spread(st: dict, fmt: str = "{:.3g}") -> str:
    return f"{fmt.format(st['median'])} [{fmt.format(st['min'])}..{fmt.format(st['max'])}]"


def validate_quick_budget(raw: dict) -> str:
    """Whole `validate --quick` commands and their floors: wall, CPU and peak
    RSS, median [min..max] over the rounds."""
    rows = ["| command | wall s | CPU s | peak RSS MiB |", "|---|--:|--:|--:|"]
    for key, st in raw["summary"].items():
        rows.append(f"| {QUICK_LABELS.get(key, key)} | {_spread(st['wall_s'])} | {_spread(st['cpu_s'])} | "
                    f"{_spread(st['peak_rss_mib'], '{:.1f}')} |")
    h = raw["host"]
    rows += ["", f"{raw['taken'][:10]}, {h['cpu']} ({h['cpus']} CPUs, LLC {h['llc']}), kernel {h['kernel']}, "
                 f"commit {raw['commit']}; {len(raw['rounds'])} rounds, order alternating, {raw['warmup']} warm-up "
                 f"each; peak RSS from wait4, children included. `.venv/bin/python {raw['command']}`."]
    return "\n".join(rows)


def cold_cache_methods(raw: dict) -> str:
    """The quick plan's ways of starting a cell cold, against the reference
    (buffers 4x the LLC): cost, memory, and the figures each gives."""
    rows = ["| method | tables, s | eviction per cell, ms (memmap / page copy) | peak RSS MiB | MOVNTI template "
            "shorter than slow, % (per round) | NT page copy per folio / memcpy (per round) | AVX-512 per folio / "
            "memcpy |", "|---|--:|--:|--:|---|---|---|"]
    first = raw["rounds"][0]
    for key, sm in raw["summary"].items():
        ev = sm["evict_ms_per_cell_median"]
        pc = sm["page_copy_vs_memcpy_medians"]
        rows.append(f"| {key}: {first[key]['cold']} | {sm['tables_s_median']:.2f} | {ev['memmap']:.2f} / "  # not a probe: the native memmap model's key
                    f"{ev['page_copy']:.1f} | {sm['peak_rss_mib_max']:.0f} | "
                    + ", ".join(f"{v:.1f}" for v in sm["memmap_shorter_pct_medians"]["template_movnti"]) + " | "
                    + ", ".join(f"{v:.3f}" for v in pc["movnti_prefetchnta/per_folio"]) + " | "
                    + ", ".join(f"{v:.2f}" for v in pc["avx512_stream/per_folio"]) + " |")
    verdicts = {", ".join(f"{series} {v.upper()}" for series, v in sorted(vs.items()))
                for sm in raw["summary"].values() for vs in sm["verdicts"]}
    rows += ["", f"Verdicts, every round of every method: {'; '.join(sorted(verdicts))}. {raw['taken'][:10]}, "
                 f"commit {raw['commit']}: `.venv/bin/python {raw['command']}`."]
    return "\n".join(rows)



def _primary(ab: dict) -> dict:
    """(check [subject], label) -> stats of each primary figure of a validate A/B."""
    return {(r["check"] + (f" [{r['subject']}]" if r["subject"] else ""), r["label"]): r["stats"]
            for r in ab["baseline_comparison"] if (r.get("stats") or {}).get("role") == "primary"}


def _change(st: dict) -> str:
    ci = st["change_ci"]
    verdict = ("*" if st["significant"] else "~") if st["p"] is not None else st["verdict"]
    return (f"{st['change_pct']:+.3g}%" + (f" [{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "") + f" {verdict}"
            + (f", p {st['p']:.2g}" if st["p"] is not None else ""))


def lab_ab_loop(raw: dict) -> str:
    """nttrace ab's loop in one QEMU run (lab.ab_loop) beside lab.ab's boots
    of the same kernels: each primary figure both measured, its medians,
    change, interval and verdict; then the loop's wall time per boot."""
    (loop_report, loop_run), (ab, ab_run) = raw["loop"], raw["lab.ab"]
    mine, theirs = _primary(loop_report["ab"]), _primary(ab)
    n_loop = loop_run["boots_a_side"]
    rows = [f"| primary figure | lab.ab, {ab_run['boots']} boots a side: base / nt-v3 | change | "
            f"nttrace ab loop, {n_loop} a side: base / nt-v3 | change |", "|---|--:|--:|--:|--:|"]
    for key in [k for k in theirs if k in mine]:
        a, b = theirs[key], mine[key]
        rows.append(f"| {key[0]}: {key[1]} | {a['base']['median']:.4g} / {a['current']['median']:.4g} | {_change(a)} | "
                    f"{b['base']['median']:.4g} / {b['current']['median']:.4g} | {_change(b)} |")
    slots = [b for b in loop_run["boots"][1:-1]]
    per = sorted(b["host_s"] for b in slots)
    lp = loop_report["loop"]
    rows += ["", f"- the loop ({loop_run['finished'][:10]}, {loop_run['machine']}, commit {loop_run['commit']}): "
                 f"`{loop_run['command']}`; {loop_run['cpu']}; one QEMU run of {_mmss(loop_run['wall_s'])}: "
                 f"{len(loop_run['boots'])} boots (the default kernel's first, "
                 f"{len(slots)} of the schedule, the default's last; order {lp['order']}, seed {lp['seed']}); "
                 f"a schedule boot took {_mmss(statistics.median(per))} of host time (median; "
                 f"{_mmss(per[0])} to {_mmss(per[-1])}), from its early unit to the next boot's; "
                 f"failed boots {len(lp['failed_boots'])}; runs kept "
                 + ", ".join(f"{side} {r['kept']} of {r['planned']}" for side, r in lp["runs"].items()) + ".",
             f"- lab.ab ({ab_run['finished'][:10]}, {ab_run['machine']}, commit {ab_run['commit']}): "
             f"`{ab_run['command']}`, {_mmss(ab_run['wall_s'])} for {2 * ab_run['boots']} boots, one QEMU run a boot."]
    return "\n".join(rows)

NATIVE = ["native-epyc-vm-2026-11-30.json"]
ICOUNT_RUNS = {label: (f"{d}/ab.json", f"{d}/run.json") for label, d in (
    ("A/A base/base", "lab-aa-base-icount-xeon-vm-2026-12-05-8621d6f"),
    ("A/B base/nt-v3", "lab-ab-base-nt-v3-icount-xeon-vm-2026-12-05-dfb5153"))}
AB_LOOP = "lab-ab-loop-base-nt-v3-epyc-vm-2026-12-06-baf1d45"
NOISE_RUNS = {label: (f"{d}/ab.json", f"{d}/run.json") for label, d in (
    ("epyc-vm 2026-12-01, quiet", "lab-aa-base-2026-12-01"),
    ("epyc-vm 2026-12-01, contended", "lab-aa-base-contended-2026-12-01"),
    ("xeon-vm 2026-12-05 254f4b9, host clock", "lab-aa-base-hostclock-xeon-vm-2026-12-05-254f4b9"),
    ("xeon-vm 2026-12-05 8621d6f, icount", "lab-aa-base-icount-xeon-vm-2026-12-05-8621d6f"))}
BLOCKS = {
    "native-memmap": (native_memmap, NATIVE),
    "native-page-copy": (native_page_copy, NATIVE),
    "native-fixed-nt": (native_fixed_nt, NATIVE),
    "native-hazards": (native_hazards, NATIVE),
    "native-copy-table": (native_copy_table, NATIVE),
    "probe-rounds": (probe_rounds, ["probes-epyc-vm-2026-11-30-rounds.json"]),
    "overhead-compaction": (overhead, {"probes": "overhead-epyc-vm-2026-11-30.json",
                                       "aa": "overhead-aa-epyc-vm-2026-11-30.json"}),
    "overhead-demotion": (lambda raw: overhead_demotion(raw["both"]),
                          {"both": "overhead-demotion-lab-nt-v3-tcg-2026-11-30.json"}),
    "whole-commands": (whole_commands, {"validate": "validate-quick-epyc-vm-2026-12-01.json",
                                        "trace": "trace-4s-epyc-vm-2026-12-01.json"}),
    "btf-read": (btf_read, ["btf-read-ab-epyc-vm-2026-12-02.json"]),
    "daemon-loader-ab": (daemon_loader_ab, ["daemon-loader-ab-epyc-vm-2026-11-30.json"]),
    "memory-floor": (memory_floor, {"bare": "python-floor-bare-epyc-vm-2026-12-01.json",
                                     "exporter": "python-floor-exporter-imports-epyc-vm-2026-12-01.json",
                                     "daemon": "daemon-loader-ab-epyc-vm-2026-11-30.json"}),
    "daemon-idle-connections": (idle_connections, ["daemon-idle-connections-epyc-vm-2026-12-01.json"]),
    "daemon-stops": (daemon_stops, ["daemon-stops-lab-nt-v3-tcg-2026-12-02.json"]),
    "perf-binding": (perf_binding, ["perf-binding-epyc-vm-2026-12-01.json"]),
    "systemd-unit": (systemd_unit, ["systemd-lab-debian12-tcg-2026-12-01.json"]),
    "lab-scenarios": (lab_scenarios, ["lab-stock-guest-run-2026-12-01.log"]),
    "ci-runs": (ci_runs, {"cold-xeon-c7311e4": "ci-cold-xeon-vm-2026-12-05-c7311e4.json",
                          "cold-epyc-054736e": "ci-cold-epyc-vm-2026-12-04-054736e.json",
                          "cold-xeon-edc0b0f": "ci-cold-xeon-vm-2026-12-03-edc0b0f.json",
                          "cold-xeon-6fbda7f": "ci-cold-xeon-vm-2026-12-03-6fbda7f.json",
                          "cold-ci-d95534d": "ci-cold-ci-machine-2026-12-03-d95534d.json",
                          "cold-epyc-d95534d": "ci-cold-epyc-vm-2026-12-03-d95534d.json",
                          "slowest": "ci-cached-xeon-vm-2026-12-06-d3b4db5.json"}),
    "lab-ab-icount": (lab_ab_icount, ICOUNT_RUNS),
    "validate-quick-budget": (validate_quick_budget, ["validate-quick-budget-xeon-vm-2026-12-05.json"]),
    "cold-cache-methods": (cold_cache_methods, ["cold-cache-methods-xeon-vm-2026-12-05.json"]),
    "lab-steps": (lab_steps, ["lab-steps-v8-xeon-vm-2026-12-05-45ed58d/steps.json"]),
    "memremap-beside-seeds": (memremap_beside_seeds, {"ab": ICOUNT_RUNS["A/B base/nt-v3"]}),
    "lab-noise": (lab_noise, NOISE_RUNS),
    "lab-ab-loop": (lab_ab_loop, {"loop": (f"{AB_LOOP}/ab.json", f"{AB_LOOP}/run.json"),
                                  "lab.ab": ICOUNT_RUNS["A/B base/nt-v3"]}),
    "page-ref-observer": (page_ref_observer, {f"{k}-{m}": f"lab-kernels-2026-12-01/{k}/memmap_{m}.json"
                                              for k in ("base", "nt-v3") for m in ("fsdax", "devdax")}),
}


def block(name: str) -> str:
    fn, files = BLOCKS[name]
    if fn is text_file:     # a file of the tree, quoted whole (its path from the top)
        return f"<!-- generated: {name} -->\n_Generated by `python3 benchmarks/render.py` from `{files[0]}`._\n\n" \
               f"{text_file((HERE.parent / files[0]).read_text())}\n<!-- end generated: {name} -->"
    if isinstance(files, dict):     # several raw files, each under its key (a key may name a pair of files)
        raw = {k: tuple(_load(x) for x in f) if isinstance(f, tuple) else _load(f) for k, f in files.items()}
        files = [x for f in files.values() for x in (f if isinstance(f, tuple) else (f,))]
    else:
        raw = _load(files[0])
    sources = ", ".join(f"`benchmarks/{f}`" for f in files)
    return f"<!-- generated: {name} -->\n_Generated by `python3 benchmarks/render.py` from {sources}._\n\n" \
           f"{fn(raw)}\n<!-- end generated: {name} -->"


def render(text: str) -> str:
    def sub(m):
        return block(m.group(1))
    return re.sub(r"<!-- generated: ([\w-]+) -->.*?<!-- end generated: \1 -->", sub, text, flags=re.S)


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    named = re.findall(r"<!-- generated: ([\w-]+) -->", text)
    unknown, unused = sorted(set(named) - set(BLOCKS)), sorted(set(BLOCKS) - set(named))
    if unknown or unused:
        print(f"BENCHMARKS.md and render.py's BLOCKS disagree: blocks without a renderer {unknown}, "
              f"renderers without a block {unused}", file=sys.stderr)
        return 1
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("BENCHMARKS.md differs from its raw data: run python3 benchmarks/render.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


def auth_under_attack(raw: dict) -> str:
    """benchmarks/auth_under_attack.py: an authorised scraper's latency
    while a flood of wrong passwords runs, and what the daemon held."""
    s, d, a = raw["scraper"], raw["daemon"], raw["attack"]
    ok = s["codes"].get("200", 0)
    rows = ["| authorised scrapes | ok | p50 ms | p99 ms | max ms | daemon RSS MiB, before / peak / after | threads, peak |",
            "|--:|--:|--:|--:|--:|--:|--:|",
            f"| {s['n']} | {ok} | {_ms(s['p50_ms'])} | {_ms(s['p99_ms'])} | {_ms(s['max_ms'])} | "
            f"{d['rss_kib_before'] / 1024:.1f} / {d['rss_kib_max'] / 1024:.1f} / {d['rss_kib_after'] / 1024:.1f} | "
            f"{d['threads_max']} |", ""]
    answers = ", ".join(f"{n} {k}" for k, n in sorted(a["responses"].items(), key=lambda kv: -kv[1]))
    rows.append(f"{raw['setup']['connections']} attacking connections for {raw['setup']['seconds']:.0f} s "
                f"({a['per_s']:.0f} requests/s; answers: {answers}); bcrypt cost {raw['setup']['bcrypt_cost']}; "
                f"{_machine(raw)}, load average {raw['host']['loadavg_before'][0]:.1f} before; "
                f"at {raw['commit']}. Command: `{raw['command']}`.")
    return "\n".join(rows)


BLOCKS["auth-under-attack"] = (auth_under_attack, ["auth-under-attack-xeon-vm-2026-12-05-09666ac.json"])


# -- issue 43: overhead as the kernel counts it, and the probe against its floor on the Xeon VM --
def overhead_counted(raw: dict) -> str:
    """`bench overhead --method counted --cross-check N`: per program, the
    counted cost and entry cost; the share of the workload's CPU time; the
    A/B and A/A beside it."""
    e = raw["entry_cost"]
    rows = ["| program | runs | counted ns/run | + entry (empty program, alone) | ns/run with entry |",
            "|---|--:|--:|--:|--:|"]
    for name, p in raw["programs"].items():
        rows.append(f"| {name} | {p['run_cnt']:,} | {p['ns_per_run']:.0f} | {e['ns_per_event']:.0f} | "
                    f"{p['with_entry_ns']:.0f} |")
    s = raw["share_pct_per_run"]
    rows += ["", f"{len(raw['runs'])} compactions with the probes attached: **{raw['ns_per_call']:.0f} ns a "
                 f"migrate_pages() call** (start and done), at {raw['calls_per_s']:,.0f} calls/s "
                 f"({raw['events_per_s']:,.0f} program runs/s) **{raw['cost_per_s_us']:,.0f} us of CPU a second**, "
                 f"**{raw['share_pct']:.3f}%** of the compacting thread's CPU time (per compaction "
                 f"{s['min']:.3f} .. {s['max']:.3f}%, median {s['median']:.3f}%)."]
    c = raw.get("cross_check")
    if c:
        ab, aa = c["ab"], c["aa"]
        qa, qb = aa["ratio_quartiles"], ab["ratio_quartiles"]
        rows += ["", f"Cross-check, interleaved, {len(ab['rounds'])} rounds each: A/B probes/none "
                     f"{ab['median_ratio']:.3f} (quartiles {qb[0]:.3f} .. {qb[2]:.3f}); A/A none/none "
                     f"{aa['median_ratio']:.3f} (quartiles {qa[0]:.3f} .. {qa[2]:.3f}), half its interquartile range "
                     f"{c['aa_half_iqr_pct']:.1f}%: the A/B "
                     + ("**can** resolve" if c["resolvable"] else "**cannot** resolve")
                     + f" a {raw['share_pct']:.3f}% overhead."]
    return "\n".join(rows)


BLOCKS["probe-rounds-xeon"] = (probe_rounds, ["probes-xeon-vm-2026-12-05-0e99454.json"])
BLOCKS["overhead-counted-xeon"] = (overhead_counted, ["overhead-counted-xeon-vm-2026-12-05-dbdf29d.json"])


FLOOR_NAMES = {"a_clock": "clock only", "d_floor": "floor: start slot + one per-CPU row", "e_probe": "migrate probe"}


def probe_floor(raw: dict) -> str:
    """benchmarks/probe_floor.py: the probe against clock-only and against the
    least a paired latency probe does, round by round, as ratios to clock-only."""
    names = list(raw["subjects"])
    rows = ["| round | " + " | ".join(f"{FLOOR_NAMES[n]}, ns/event (x clock only)" for n in names) + " |",
            "|---|" + "--:|" * len(names)]
    for i, r in enumerate(raw["rounds"], 1):
        rows.append(f"| {i} | " + " | ".join(f"{r[n]:.0f} (x{r[n] / r[names[0]]:.2f})" for n in names) + " |")
    med = {n: statistics.median(r[n] / r[names[0]] for r in raw["rounds"]) for n in names}
    rows.append("| **median ratio** | " + " | ".join(f"**x{med[n]:.2f}**" for n in names) + " |")
    return "\n".join(rows)


BLOCKS["probe-floor-xeon"] = (probe_floor, ["probe-floor-xeon-vm-2026-12-05-ab5a95c.json"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
