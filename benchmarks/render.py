"""BENCHMARKS.md's generated tables, made from the raw files beside this
script: each block between

    <!-- generated: NAME -->  ...  <!-- end generated: NAME -->

is rewritten from the raw file(s) BLOCKS names, so a figure in those tables
is the figure in its raw file. tests/test_benchmarks_doc.py fails when the
document and its raw data disagree.

    python3 benchmarks/render.py           # rewrite BENCHMARKS.md's generated blocks
    python3 benchmarks/render.py --check   # exit 1 when a block differs from its raw data

The sections written by hand before this script (native, probe cost,
overhead, daemon, lab) are not generated yet; their raw files are named in
their text.
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
    return json.loads((HERE / name).read_text())


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


BLOCKS = {
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
