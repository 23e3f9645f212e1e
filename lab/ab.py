# SPDX-License-Identifier: Apache-2.0
"""The A/B a kernel developer runs for their series: two lab kernels, each
booted N times in the lab guest, interleaved (A B A B ...: host drift spreads
over both sides), the chosen scenarios run in every boot, and the A/B written
in every format (text, markdown, JSON, HTML) to one directory.

    python3 -m lab.ab base nt-v3 --boots 5 --out ab-base-nt-v3
    python3 -m lab.ab base base --boots 5 --out aa-base        # A/A: the method's own check
    python3 -m lab.ab base mine=$HOME/v9.mbx:v9 --scenarios memmap,demotion --out ab-mine

Variants: the built-ins (kernel_build.py --list: base, nt-v3, nt-v2) or
NAME=FILE:VERSION[+FILE:VERSION...] for a series of your own. Kernels are
built or found in kernel_build.py's cache. Scenarios: memmap (fsdax and
devdax rebinds, 30 each), demotion, exercises (each probe's declared
exercise the lab runs: memremap_pages() by test_hmm), or guest scenario names. The same kernel
on both sides (an A/A) keeps two sets of boots, A and B.

Beside the instruction figures, the modelled memory traffic (lab/traffic/:
a QEMU TCG plugin's LLC and pmem device model; traffic, not time): one more
boot a kernel under the plugin, after the A/B's boots, its device bytes read
and written and LLC fills per initialised and per demoted page, and who
moved them by kernel function, in every report (a section of the markdown,
text and HTML, "traffic" in the JSON: lab/traffic/report.py's, rendered by
nttrace.ab.formats with the rest).
The counts are deterministic (icount), so one boot is the figure and the
report says why. On by default when the plugin can be built (the report
says in one line why not); --no-traffic leaves it out.

Progress goes to stderr: each kernel build with its elapsed time against the
last build's, each boot with its count (k of N) and scenario. The last line
says where the report is. Exit: 0 done, 1 a build or boot failed (its step
and log said; a failed traffic boot after the report is written), 2 a bad
argument.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from lab import kernel_build, lab
from nttrace.kernel import conditions

HERE = Path(__file__).resolve().parent

def lab_exercises() -> list[str]:
    """The guest scenario of every probe whose exercise the lab runs (Exercise.lab)."""
    from nttrace.probes import PROBES
    return [f"exercise_{n}" for n, p in PROBES.items() if p.exercise is not None and p.exercise.lab]


SCENARIO_SETS = {"memmap": ["memmap_fsdax", "memmap_devdax"],
                 "demotion": ["demotion"], "exercises": lab_exercises()}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mmss(s: float) -> str:
    """Seconds as 'M m SS s' (the lab's progress lines and benchmarks' tables)."""
    return f"{int(s // 60)} m {int(s % 60):02d} s"


def last_build_seconds() -> float | None:
    """The most recent kernel build's time (any variant): the estimate."""
    infos = []
    for f in (kernel_build.CACHE / "kernels").glob("*/build.json"):
        try:
            infos.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    infos.sort(key=lambda i: i.get("built_at", ""))
    return infos[-1].get("total_s") if infos else None


def kernel_for(v: "kernel_build.Variant"):
    estimate = last_build_seconds()
    done = threading.Event()
    t0 = time.monotonic()

    log = kernel_build.CACHE / "logs" / (v.name + ".log")

    def step() -> str:
        """The step the build is in: the last command its log names."""
        try:
            cmds = [ln[2:] for ln in log.read_text(errors="replace").splitlines() if ln.startswith("$ ")]
        except OSError:
            return "starting"
        if not cmds:
            return "starting"
        words = cmds[-1].split()
        return " ".join(w for w in words[:6] if not w.startswith(("O=", "-o", "Dir::")))[:80]

    def ticker():
        while not done.wait(60):
            est = f" of about {mmss(estimate)} (the last build)" if estimate else ""
            say(f"kernel {v.name}: {step()}, {mmss(time.monotonic() - t0)}{est}; log {log}")
    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    try:
        k = kernel_build.build(v)
    finally:
        done.set()
    took = time.monotonic() - t0
    say(f"kernel {v.name}: {k.release}, " + (f"built in {mmss(took)}" if took > 30 else "cached")
        + f" ({k.directory.name})")
    return k


def scenarios_of(text: str) -> list[str]:
    out = []
    for name in text.split(","):
        out += SCENARIO_SETS.get(name.strip(), [name.strip()])
    return out


def save_reports(run: "lab.LabRun", scenarios: list[str], dest: Path, kernel=None) -> list[Path]:
    """Each scenario's report of one boot, with what the guest cannot know of
    itself: the host's conditions over the boot, and which lab kernel build
    it booted (one side of an A/B must be one build)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name in scenarios:
        data = run.json(name)
        rep = {k: v for k, v in data.get("report", data).items() if not k.startswith("_")}
        if run.host_conditions:
            rep["host_conditions"] = run.host_conditions
        if kernel is not None:
            rep["lab_kernel"] = {"variant": kernel.variant, "key": kernel.info.get("key"),
                                 "series": kernel.info.get("series", [])}
        p = dest / f"{name}.report.json"
        p.write_text(json.dumps(rep))
        out.append(p)
    return out


def write_ab(base: list[Path], cur: list[Path], out: Path, detect_pct: float | None = None,
             sections: list | None = None) -> dict[str, Path]:
    """The A/B of the boots' reports in every format, by nttrace.ab.formats:
    each file exactly what `nttrace validate --baseline BASE... --current
    CUR... [--detect PCT] --format F` prints, with `sections` (the modelled
    traffic's, lab/traffic/report.py) where each format has them."""
    from nttrace.ab import formats
    compared = formats.compare_files(list(map(str, base)), list(map(str, cur)), detect_pct or None)
    written = {}
    for fmt, name in formats.FILES.items():
        text = formats.render(fmt, *compared, sections=sections)
        tmp = out / (name + ".tmp")
        tmp.write_text(text)
        tmp.rename(out / name)
        written[fmt] = out / name
    return written


def checkout_commit() -> str:
    """The checkout's commit, with '+' where its tree has changes (a run is named by it)."""
    git = ["git", "-C", str(HERE.parent)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    return (head or "unknown") + ("+" if dirty else "")


def run_commit(at_start: str) -> str:
    """The commit a run is named by: the checkout's at its start. The guest
    runs the tree as it stands at each boot, so a tree changed during the run
    is said (measure from a clone no one edits)."""
    now = checkout_commit()
    return at_start if now == at_start else f"{at_start} (the tree changed during the run: {now} at its end)"


def spread_of(reports: dict[str, list[Path]]) -> dict:
    """The boot-to-boot spread of each scenario's primary figure in these
    boots (nttrace.ab.statistics.residuals, pooled over the sides):
    what --boots defaults from when it is the lab's recorded A/A."""
    from nttrace.ab import statistics
    from nttrace.validate import evidence
    values: dict[str, dict[str, list[float]]] = {}
    for side, paths in reports.items():
        for p in paths:
            for c in json.loads(p.read_text()).get("checks", []):
                ev = evidence.of(c)
                for f in ev.figures():
                    if f.role == "primary" and isinstance(f.value, (int, float)):
                        key = f"{c['id']} {ev.subject()} {f.metric}".replace("  ", " ")
                        values.setdefault(key, {}).setdefault(side, []).append(float(f.value))
    return {k: statistics.residuals(*v.values()) for k, v in values.items()}


def default_boots(detect_pct: float) -> tuple[int, str]:
    """Boots a side to detect detect_pct in every primary figure, at the
    lab's recorded boot-to-boot spread (BOOT_SPREAD), and where that comes from."""
    from nttrace.ab import statistics
    rec = json.loads(BOOT_SPREAD.read_text())
    need = [statistics.boots_needed(r, detect_pct) for r in rec["residuals"].values()]
    if any(n is None for n in need):
        return statistics.MAX_BOOTS, f"more than {statistics.MAX_BOOTS} at the recorded spread"
    # and enough that the secondary figures can be tested at all: at 6 a side
    # the exact test reaches alpha/m for up to 22 of them
    secondary = next(n for n in range(2, statistics.MAX_BOOTS) if statistics.smallest_p(n, n) <= statistics.ALPHA / 22)
    return max(max(need), secondary), f"the lab's recorded spread ({rec['source']}), and the secondary figures' test"


def traffic_of(kernels: dict, scenarios: list[str], out: Path, timeout: float) -> dict:
    """The modelled traffic of each kernel (name -> lab kernel; an A/A's one
    kernel boots once): lab/traffic/report.py's section data, the boots
    under out/traffic/."""
    from lab.traffic import report as traffic_report
    t = traffic_report.collect(kernels, scenarios, out / "traffic", timeout, say)
    if "unavailable" in t:
        say(f"modelled traffic: not measured: {t['unavailable']}")
    return t


def traffic_failed(t: dict, prog: str = "lab.ab") -> bool:
    """A traffic boot failed: said on stderr, one line a kernel."""
    from lab.traffic import report as traffic_report
    bad = traffic_report.failed(t)
    for name, why in bad.items():
        print(f"{prog}: the traffic boot of {name} failed: {why}", file=sys.stderr)
    return bool(bad)


# The lab's measured boot-to-boot spread: the residuals of an A/A of base
# (lab.ab writes spread.json beside every A/B; this is the recorded A/A's,
# kept so --boots can default from it; tests/unit/test_ab_statistics.py holds it
# to the raw boots it came from).
BOOT_SPREAD = HERE / "boot_spread.json"


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.ab", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="the base variant")
    ap.add_argument("b", help="the patched variant (the same as A for an A/A)")
    ap.add_argument("--boots", type=int, default=None,
                    help="boots of each side (default: enough to detect --detect at the lab's recorded spread)")
    ap.add_argument("--detect", type=float, default=10.0, metavar="PCT",
                    help="the change (percent) the boots should detect with 80%% power (default 10)")
    ap.add_argument("--scenarios", default="memmap", help=
                    "memmap, demotion or guest scenario names (default memmap)")
    ap.add_argument("--out", required=True, help="directory for the boots' reports and the A/B")
    ap.add_argument("--timeout", type=float, default=1800, help="bound on each boot, seconds")
    ap.add_argument("--wait-quiet", type=float, default=900, metavar="S",
                    help="before each boot, wait up to S seconds for a quiet host (default 900; 0: do not wait)")
    ap.add_argument("--vcpus", type=int, default=lab.MEASURE_CPU.vcpus, help="guest vCPUs (default %(default)s)")
    ap.add_argument("--icount", default=lab.MEASURE_CPU.icount or "off",
                    help="QEMU -icount for the guest clock, or off (default %(default)s)")
    ap.add_argument("--no-traffic", action="store_true",
                    help="leave out the modelled memory traffic (one boot a kernel under lab/traffic's plugin)")
    args = ap.parse_args(argv)
    if args.boots is not None and args.boots < 1:
        print("lab.ab: --boots must be at least 1", file=sys.stderr)
        return 2
    if not 0 < args.detect < 100 or args.vcpus < 1:
        print("lab.ab: --detect must be a percent between 0 and 100, --vcpus at least 1", file=sys.stderr)
        return 2
    try:
        specs = [kernel_build.variant(args.a), kernel_build.variant(args.b)]
    except ValueError as exc:
        print(f"lab.ab: {exc}", file=sys.stderr)
        return 2
    cpu = lab.GuestCPU(args.vcpus, None if args.icount == "off" else args.icount)
    if args.boots is None:
        args.boots, why = default_boots(args.detect)
        say(f"{args.boots} boots a side: enough to detect a {args.detect:g}% change at {why}")
    scenarios = scenarios_of(args.scenarios)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    commit = checkout_commit()
    try:
        kernels = [kernel_for(specs[0])]
        kernels.append(kernel_for(specs[1]) if args.b != args.a else kernels[0])
    except kernel_build.KernelBuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    sides = ["A", "B"]
    names = [specs[0].name, specs[1].name]
    reports: dict[str, list[Path]] = {"A": [], "B": []}
    order = [(side, k) for k in range(1, args.boots + 1) for side in sides]
    unquiet = 0
    for i, (side, k) in enumerate(order, 1):
        kern = kernels[sides.index(side)]
        if args.wait_quiet > 0:
            c = conditions.wait_quiet(args.wait_quiet, say=say)
            if c["state"] != "quiet":
                unquiet += 1
                say(f"HOST NOT QUIET after {args.wait_quiet:.0f} s ({c['why']}): measuring boot {i} anyway; "
                    "the report records it and warns")
        say(f"boot {i} of {len(order)}: {side} = {names[sides.index(side)]}, boot {k} of {args.boots}, "
            f"scenarios {', '.join(scenarios)}; {cpu.describe()}")
        results = out / "boots" / f"{side}-{names[sides.index(side)]}-{k}"
        try:
            run = lab.run(results, timeout=args.timeout, kernel=kern, scenarios=scenarios, cpu=cpu)
            reports[side] += save_reports(run, scenarios, out / side / f"boot-{k}", kern)
        except lab.LabError as exc:
            print(f"lab.ab: boot {i} ({side}, {names[sides.index(side)]} {k}) failed: {exc}", file=sys.stderr)
            return 1
        say(f"boot {i} of {len(order)}: done in {mmss(run.elapsed_s)}; host {run.host_conditions['state']}"
            + (f" ({run.host_conditions['why']})" if run.host_conditions["state"] != "quiet" else ""))
    written = write_ab(reports["A"], reports["B"], out, args.detect)
    # the A/B is on disk before the traffic boots; then written again with their section
    traffic = None if args.no_traffic else traffic_of(dict(zip(names, kernels)), scenarios, out, args.timeout)
    if traffic is not None:
        from lab.traffic import report as traffic_report
        written = write_ab(reports["A"], reports["B"], out, args.detect, [traffic_report.ab_section(traffic, names)])
    (out / "spread.json").write_text(json.dumps({"source": str(out), "cpu": cpu.describe(),
                                                 "residuals": spread_of(reports)}, indent=1))
    (out / "run.json").write_text(json.dumps({
        "a": args.a, "b": args.b, "boots": args.boots, "scenarios": scenarios, "order": order,
        "cpu": cpu.describe(), "detect_pct": args.detect, "boots_started_unquiet": unquiet,
        "kernels": [{"variant": k.variant, "release": k.release, "key": k.directory.name} for k in kernels],
        "wall_s": round(time.monotonic() - t0, 1), "finished": time.strftime("%F %T"),
        "machine": conditions.cpu_policy()["cpu"], "commit": run_commit(commit),
        "command": "python3 -m lab.ab " + " ".join(argv)}, indent=1))
    say(f"{len(order)} boots in {mmss(time.monotonic() - t0)}"
        + (f"; {unquiet} started on a host that was not quiet" if unquiet else ""))
    print(f"A/B report: {written['html']} (and {', '.join(str(p.name) for f, p in written.items() if f != 'html')} "
          f"beside it)")
    return 1 if traffic and traffic_failed(traffic) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
