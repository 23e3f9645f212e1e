# SPDX-License-Identifier: Apache-2.0
"""Which patch did it: a series built at each step (a prefix of the series
ending at each group's last patch), all steps booted N times interleaved in
the lab guest with the base kernel, and a step table: each step's primary
figure per scenario, the change from the step before with its interval and
verdict, and the step's share of the whole series' change.

    python3 -m lab.steps zone-device-memmap-template-nt-v8.txt:v8 --steps 1-3,4,5,6-8,9 --boots 5 --out steps-v8

SERIES is FILE:VERSION (a seed file name, or a path to your own text or
mbox). A step is named by the patches it adds to the step before (to base
for the first): `--steps 4,5` measures steps 1-4 and 5. The steps share one build tree (kernel_build's work/<series>-steps),
so a step compiles what its patches touch on top of the step before; each
step's kernel is cached under its own key like any lab kernel. Boots run
round by round (base, step 1, step 2, ... then again), one guest at a time,
each after waiting for a quiet host, with the A/B's guest CPU (lab.
MEASURE_CPU: guest time counts instructions).

The statistics are the A/B's (nttrace.ab.statistics): per scenario,
the step-to-step changes are a family of tests, Bonferroni-corrected over
the steps; a step's share is its log change over the whole series' log
change of the medians. What the lab cannot measure is said in the table:
under TCG a non-temporal store is an ordinary store, so the steps that add
MOVNTI show only the instructions they add or remove.

The modelled memory traffic (lab/traffic/, traffic, not time) follows the
table: one boot a step's kernel (and base's) under the traffic plugin, a row
a step: the device bytes read and written, LLC fills and NT full-line
writes per initialised page, where the NT steps show; and per window, who
moved the device's lines at each step, by kernel function and instruction
class (steps.md, "traffic" in steps.json, and the section alone in every
A/B format: traffic.txt, .md, .json, .html). On by default when the
plugin can be built; --no-traffic leaves it out.

Bad input: a step list that is not increasing patch ranges within the
series, or a step whose patch does not apply (one line naming the patch and
the hunk; the steps before it stay built and cached): exit 2. A build that
fails otherwise: exit 1. A step whose kernel does not boot is reported
failed with its console's last lines, and the others are still measured.
Progress on stderr (each build's step and elapsed time, each boot k of N);
the last line names the step table.
"""
from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lab import kernel_build, lab
from lab.ab import kernel_for, mmss, save_reports, say
from nttrace.kernel import conditions
from nttrace.reference import seeds
from nttrace.ab import series, statistics
from nttrace.validate import evidence
from nttrace.validate.checks.memmap_latency import MemmapEvidence

SCENARIOS = ["memmap_fsdax", "memmap_devdax"]
# What the guest cannot measure of a step, by what its patches do.
CANNOT = {
    "nt_stores": "adds non-temporal stores (MOVNTI): under QEMU TCG they are ordinary stores, so the lab sees only the "
          "instructions the step adds or removes, not the cache effect the series is after (the modelled traffic "
          "shows that in bytes)",
    "refcount_tracepoint": "changes the path under KASAN/KMSAN, which the lab's kernels do not build, and while "
                "page_ref_set is enabled, which the rebinds timed here are not (the memmap path row shows that part); "
                "their change is the rest of the step",
}


def _range(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


@dataclass
class Step:
    first: int
    last: int
    titles: list[str]

    @property
    def label(self) -> str:
        """What the step adds to the step before: '4', '6-8'."""
        return _range(self.first, self.last)

    def cannot(self) -> list[str]:
        """What the lab cannot attribute of this step, from its patches' titles."""
        text = " ".join(self.titles).lower()
        out = []
        if "nontemporal" in text or "non-temporal" in text or "memcpy_flushcache" in text:
            out.append(CANNOT["nt_stores"])
        if "always use" in text:
            out.append(CANNOT["refcount_tracepoint"])
        return out


def boots_to_mark(steps: int) -> int:
    """The fewest boots a side whose exact test can reach the steps' alpha
    (0.05 over the number of steps, Bonferroni), at any spread."""
    return statistics.fewest_runs_for(statistics.family_alpha(steps))


def parse_steps(text: str, total: int) -> list[tuple[int, int]]:
    """'1-3,4,5,6-8,9' -> [(1, 3), (4, 4), ...]: increasing, non-overlapping
    patch ranges within 1..total. Raises ValueError saying what is wrong."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m:
            raise ValueError(f"--steps: {part!r} is not N or N-M")
        a, b = int(m[1]), int(m[2] or m[1])
        if a > b:
            raise ValueError(f"--steps: {part.strip()} runs backwards")
        if a < 1 or b > total:
            raise ValueError(f"--steps: {part.strip()} is outside the series' patches 1-{total}")
        if out and a <= out[-1][1]:
            raise ValueError(f"--steps: {part.strip()} does not come after {out[-1][0]}-{out[-1][1]}")
        out.append((a, b))
    if not out:
        raise ValueError("--steps: no step given")
    return out


def series_of(spec: str) -> kernel_build.Series:
    file, colon, version = spec.rpartition(":")
    if not colon or not file or not re.fullmatch(r"v\d+", version):
        raise ValueError(f"{spec!r}: want FILE:VERSION, VERSION like v8")
    path = Path(file).expanduser()
    return kernel_build.Series(str(path.resolve()) if path.exists() or path.is_absolute() else file, version)


def step_variants(series: kernel_build.Series, groups: list[tuple[int, int]]) -> list[tuple[Step, kernel_build.Variant]]:
    """Each group's kernel (the series up to the group's last patch) and the
    step it is: what it adds to the step before, from the patch after that
    step's last (1 for the first step) to its own last. `--steps 4,5` is
    steps 1-4 and 5: the first kernel holds patches 1-4, and its change from
    base is theirs, not patch 4's."""
    patches = {p.number: p for p in series.patches()}
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(series.file).stem)[:40]
    tree = f"{stem}-{series.version}-steps"
    out = []
    after = 0
    for _a, b in groups:
        step = Step(after + 1, b, [patches[n].title for n in range(after + 1, b + 1) if n in patches])
        after = b
        v = kernel_build.Variant(f"{series.version}-to-{b}",
                                 (kernel_build.Series(series.file, series.version, upto=b),), tree=tree)
        out.append((step, v))
    return out


# -- the table -----------------------------------------------------------------
def primary_values(paths: list[Path]) -> dict[str, dict[str, float | str]]:
    """{scenario subject: {primary metric: value, mean rebind, memmap path}} of one boot's reports."""
    out: dict[str, dict] = {}
    for p in paths:
        for c in json.loads(p.read_text()).get("checks", []):
            ev = evidence.of(c)
            if not isinstance(ev, MemmapEvidence):
                continue
            figs = {f.metric: f for f in ev.figures()}
            prim = next(f for f in figs.values() if f.role == "primary")
            out[ev.subject()] = {"primary": prim.value, "primary_label": prim.label,
                                 "mean": figs["rebind_avg_ms"].value}
    return out


def page_ref_paths(results: Path) -> dict[str, str]:
    """{subject: memmap path with page_ref_set on} from a boot's guest results."""
    out = {}
    for name in SCENARIOS:
        f = results / f"{name}.json"
        if not f.exists():
            continue
        rep = json.loads(f.read_text()).get("page_ref_report") or {}
        for c in rep.get("checks", []):
            ev = evidence.of(c)
            if isinstance(ev, MemmapEvidence) and ev.template_paths():
                out[ev.subject()] = ", ".join(ev.template_paths())
    return out


def table(steps: list[Step], boots: dict[str, list[dict]], failed: dict[str, str]) -> dict:
    """The step table as data: per subject, a row per step (base first). The
    comparison of each step with the one before (its change, interval,
    verdict at the steps' alpha, share) is nttrace.ab.series', as `nttrace ab
    report` makes it for a loop of a series; this adds what the lab knows of
    a step: its patches, what the lab cannot attribute, the mean rebind and
    the memmap path with page_ref_set on."""
    labels = ["base"] + [s.label for s in steps]
    subjects = sorted({subj for runs in boots.values() for b in runs for subj in b["values"]},
                      key=lambda s: ("fsdax", "devdax").index(s) if s in ("fsdax", "devdax") else 9)
    out = {"alpha_per_step": statistics.family_alpha(len(steps)), "subjects": {}, "failed": failed}
    for subj in subjects:
        vals = {lab_: [b["values"][subj]["primary"] for b in boots.get(lab_, []) if subj in b["values"]]
                for lab_ in labels}
        means = {lab_: [b["values"][subj]["mean"] for b in boots.get(lab_, []) if subj in b["values"]]
                 for lab_ in labels}
        paths = {lab_: sorted({b["page_ref_path"].get(subj) for b in boots.get(lab_, [])
                               if b["page_ref_path"].get(subj)}) for lab_ in labels}
        t = series.steps(labels, vals)
        rows = []
        for sr in t["rows"]:
            lab_ = sr["step"]
            row = {"step": lab_, "boots": sr["boots"], "failed": failed.get(lab_)}
            step = next((s for s in steps if s.label == lab_), None)
            if sr["boots"]:
                row.update(median=sr["median"], cov_pct=sr["cov_pct"],
                           mean_rebind_ms=statistics.median(means[lab_]), page_ref_path=", ".join(paths[lab_]))
                change = sr.get("from_before")
                if change:
                    row.update(change)
                if sr.get("share_pct") is not None:
                    row["share_pct"] = sr["share_pct"]
                if sr.get("skipped"):      # its change from the last step measured holds theirs too
                    row["since"] = sr["before"]
                    row["unmeasured"] = sr["skipped"]
                    row["patches_since"] = [t_ for s in steps if s.label in sr["skipped"] for t_ in s.titles]
            if step:
                row["patches"] = step.titles
                row["cannot"] = step.cannot()
            rows.append(row)
        seeds_after = {n: f.get(subj) for n, f in seeds.MEMMAP_REBIND_MS_PER_PATCH.items() if f.get(subj)}
        out["subjects"][subj] = {"primary_label": _label_of(boots, subj), "rows": rows,
                                 "total_pct": t["total_pct"],
                                 "seeds": {str(n): v for n, v in seeds_after.items()}}
    return out


def _label_of(boots: dict, subj: str) -> str:
    for runs in boots.values():
        for b in runs:
            if subj in b["values"]:
                return b["values"][subj]["primary_label"]
    return "?"


def seeds_cell(seeds_after: dict, step: str) -> str:
    """The seeds' own figure for a step that ends at a patch they report."""
    if step == "base":
        return ""
    last = int(step.split("-")[-1])
    if str(last) not in seeds_after:
        return ""
    before, after = seeds_after[str(last)]
    return f"{before:.2f} -> {after:.2f} ms ({100 * (after / before - 1):+.1f}%)"


def change_cell(r: dict) -> str:
    if r.get("change_pct") is None:
        return "-" if r["step"] == "base" else "not measured"
    ci = r.get("change_ci")
    return f"{r['change_pct']:+.1f}%" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")


def step_verdict(r: dict) -> str:
    if r.get("failed"):
        return "step failed"
    if "verdict" not in r:
        return ""
    if r["significant"]:
        return "*"
    if r["verdict"] == "not significant":
        return "~"
    return r["verdict"]


def _cov(pct: float) -> str:
    """A CoV to one decimal, or to two significant digits below 0.1% (the
    icount guest's boots differ by thousandths of a percent)."""
    return f"{pct:.1f}%" if pct >= 0.1 else f"{pct:.2g}%"


def render_markdown(t: dict, meta: dict) -> str:
    lines = [f"# Step table: {meta['series']} ({meta['boots']} boots a step, {meta['cpu']})", "",
             f"_measured {meta['finished']} on {meta['machine']}, nttrace {meta['commit']}; host conditions: "
             f"{meta['conditions']}_", ""]
    for subj, s in t["subjects"].items():
        lines += [f"## {subj}: {s['primary_label']}", "",
                  "| step | patches | boots | median ms ±CoV | change from the step before [interval] | verdict | "
                  "share of the series | mean rebind ms | memmap path, page_ref_set on | the series' own figure "
                  "(Ice Lake VM, 100 GB, mean) |",
                  "|---|---|--:|--:|--:|---|--:|--:|---|---|"]
        for r in s["rows"]:
            med = f"{r['median']:.3f} ±{_cov(r['cov_pct'])}" if r.get("median") is not None and r.get("cov_pct") is not None \
                else (f"{r['median']:.3f}" if r.get("median") is not None else "-")
            share = f"{r['share_pct']:.0f}%" if r.get("share_pct") is not None else ""
            pat = "; ".join(r.get("patches") or []) or "(Debian's 7.2.13, no patches)"
            if r.get("patches_since"):
                pat += (f" (the change is from {r['since']}: it also holds step {', '.join(r['unmeasured'])}, "
                        f"not measured: {'; '.join(r['patches_since'])})")
            lines.append(f"| {r['step']} | {pat} | {r['boots']} | {med} | {change_cell(r)} | {step_verdict(r)} | {share} | "
                         f"{r.get('mean_rebind_ms') or 0:.3f} | {r.get('page_ref_path', '')} | "
                         f"{seeds_cell(s['seeds'], r['step'])} |")
        total = s["total_pct"]
        lines += ["", f"Whole series (base to the last step measured): {total:+.1f}%." if total is not None else "", ""]
    cannot: dict[str, list[str]] = {}
    for r in next(iter(t["subjects"].values()), {"rows": []})["rows"]:
        for note in r.get("cannot") or []:
            cannot.setdefault(note, []).append(r["step"])
    if cannot:
        lines += ["What the lab cannot attribute:", ""] + [f"- step {', '.join(st)}: {note}"
                                                           for note, st in cannot.items()] + [""]
    lines += [f"_Per scenario the step-to-step changes are one family: each tested at alpha 0.05/"
              f"{len([r for r in next(iter(t['subjects'].values()))['rows'] if r['step'] != 'base'])} = "
              f"{t['alpha_per_step']:.3g} (Bonferroni), exact Mann-Whitney U across boots with the Hodges-Lehmann "
              "interval inverted from it (* significant, ~ not); share: the step's log change over the whole "
              "series' log change, of the medians. Times are the guest's: QEMU TCG, so relative changes only._"]
    for lab_, why in t["failed"].items():
        lines += ["", f"Step {lab_} failed: {why}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.steps", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("series", help="FILE:VERSION, e.g. zone-device-memmap-template-nt-v8.txt:v8")
    ap.add_argument("--steps", required=True, help="patch groups, e.g. 1-3,4,5,6-8,9 (each step is the series up to "
                                                   "its group's last patch)")
    ap.add_argument("--boots", type=int, default=None,
                    help="boots of each step and of base (default: the fewest that can mark a step at the "
                         "steps' corrected alpha, at least 5)")
    ap.add_argument("--out", required=True, help="directory for the boots' reports and the step table")
    ap.add_argument("--timeout", type=float, default=1800, help="bound on each boot, seconds")
    ap.add_argument("--wait-quiet", type=float, default=900, metavar="S",
                    help="before each boot, wait up to S seconds for a quiet host (default 900; 0: do not wait)")
    ap.add_argument("--no-traffic", action="store_true",
                    help="leave out the modelled memory traffic (one boot a step under lab/traffic's plugin)")
    args = ap.parse_args(argv)
    if args.boots is not None and args.boots < 2:
        print("lab.steps: --boots must be at least 2 (one boot a step cannot be tested)", file=sys.stderr)
        return 2
    try:
        series = series_of(args.series)
        total = len(series.patches())
        groups = parse_steps(args.steps, total)
    except (ValueError, OSError) as exc:
        print(f"lab.steps: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:   # the series cannot be read (mailing_list.SeriesError)
        print(f"lab.steps: {args.series}: {exc}", file=sys.stderr)
        return 2
    least = boots_to_mark(len(groups))
    if args.boots is None:
        args.boots = max(5, least)
    elif args.boots < least:
        say(f"{args.boots} boots a step cannot mark any of {len(groups)} steps (alpha 0.05/{len(groups)}): "
            f"the table will describe them only; {least} boots a step can")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    from lab.ab import checkout_commit, run_commit
    commit = checkout_commit()
    kernels = {"base": kernel_for(kernel_build.VARIANTS["base"])}
    steps: list[Step] = []
    failed: dict[str, str] = {}
    for n, (step, variant) in enumerate(step_variants(series, groups), 1):
        say(f"build {n} of {len(groups)}: step {step.label} ({variant.name}: {series.version} 1-{step.last})"
            + (f"; --steps gave {_range(*groups[n - 1])}, but its kernel adds {step.label} to the step before"
               if groups[n - 1][0] != step.first else ""))
        try:
            kernels[step.label] = kernel_for(variant)
        except kernel_build.KernelBuildError as exc:
            if exc.step.startswith("apply "):
                where = "; ".join(exc.hunks) or exc.detail
                print(f"lab.steps: step {step.label}: {exc.step.removeprefix('apply ')} does not apply: {where}"
                      f" (steps before it are built and cached)", file=sys.stderr)
                return 2
            print(exc, file=sys.stderr)
            return 1
        steps.append(step)
    cpu = lab.MEASURE_CPU
    boots: dict[str, list[dict]] = {k: [] for k in kernels}
    order = [(k, label) for k in range(1, args.boots + 1) for label in kernels]
    states = []
    for i, (k, label) in enumerate(order, 1):
        if label in failed:
            continue
        if args.wait_quiet > 0:
            c = conditions.wait_quiet(args.wait_quiet, say=say)
            if c["state"] != "quiet":
                say(f"HOST NOT QUIET after {args.wait_quiet:.0f} s ({c['why']}): measuring anyway; recorded")
        say(f"boot {i} of {len(order)}: step {label}, boot {k} of {args.boots}")
        results = out / "boots" / f"{label}-{k}"
        kern = kernels[label]
        try:
            run = lab.run(results, timeout=args.timeout, kernel=kern, scenarios=SCENARIOS, cpu=cpu)
            paths = save_reports(run, SCENARIOS, out / label / f"boot-{k}", kern)
        except lab.LabError as exc:
            tail = "\n".join(str(exc).splitlines()[-12:])
            failed[label] = f"boot {k} did not complete: {str(exc).splitlines()[0]}\n{tail}"
            say(f"boot {i} of {len(order)}: step {label} FAILED ({str(exc).splitlines()[0]}); the other steps go on")
            continue
        states.append(run.host_conditions)
        boots[label].append({"values": primary_values(paths), "page_ref_path": page_ref_paths(results)})
        say(f"boot {i} of {len(order)}: done in {mmss(run.elapsed_s)}; host {run.host_conditions['state']}")
    t = table(steps, boots, {k: v.splitlines()[0] for k, v in failed.items()})
    summ = conditions.summary(states)
    commit = run_commit(commit)
    meta = {"series": args.series, "steps": args.steps, "boots": args.boots, "cpu": cpu.describe(),
            "finished": time.strftime("%F %T"), "machine": conditions.cpu_policy()["cpu"], "commit": commit,
            "conditions": ", ".join(f"{v} {k}" for k, v in summ["states"].items()) + " boots"
            + (f"; beside: {', '.join(summ['busy_beside'])}" if summ["busy_beside"] else ""),
            "wall_s": round(time.monotonic() - t0, 1), "command": "python3 -m lab.steps " + " ".join(argv),
            "kernels": {k: v.directory.name for k, v in kernels.items()}, "failed": failed}
    (out / "steps.json").write_text(json.dumps({"meta": meta, "table": t}, indent=1))
    (out / "steps.md").write_text(render_markdown(t, meta))
    if not args.no_traffic:     # the step table is on disk before the traffic boots; then written with them
        from lab.ab import traffic_failed, traffic_of
        from lab.traffic import report as traffic_report
        from nttrace.ab import formats
        traffic = traffic_of(kernels, SCENARIOS, out, args.timeout)
        traffic_failed(traffic, "lab.steps")
        section = traffic_report.steps_section(traffic, list(kernels))
        (out / "steps.json").write_text(json.dumps({"meta": meta, "table": t, "traffic": traffic}, indent=1))
        (out / "steps.md").write_text(render_markdown(t, meta) + formats.section_text("markdown", section))
        # the traffic alone, in every format: traffic.txt, .md, .json, .html
        formats.write_documents(out, "traffic", f"Modelled memory traffic per step: {args.series}", [section])
    say(f"{len(order)} boots in {mmss(time.monotonic() - t0)}")
    print(f"step table: {out / 'steps.md'} (and steps.json beside it)")
    return 1 if failed and len(failed) == len(kernels) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
