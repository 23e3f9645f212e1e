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
devdax rebinds, 30 each), demotion, or guest scenario names. The same kernel
on both sides (an A/A) keeps two sets of boots, A and B.

Progress goes to stderr: each kernel build with its elapsed time against the
last build's, each boot with its count (k of N) and scenario. The last line
says where the report is. Exit: 0 done, 1 a build or boot failed (its step
and log said), 2 a bad argument.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from lab import kernel_build, lab

HERE = Path(__file__).resolve().parent

SCENARIO_SETS = {"memmap": ["memmap_fsdax", "memmap_devdax"],  # not a probe: a scenario set
                 "demotion": ["demotion"]}
FORMATS = {"text": "ab.txt", "markdown": "ab.md", "json": "ab.json", "html": "ab.html"}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _mmss(s: float) -> str:
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
            est = f" of about {_mmss(estimate)} (the last build)" if estimate else ""
            say(f"kernel {v.name}: {step()}, {_mmss(time.monotonic() - t0)}{est}; log {log}")
    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    try:
        k = kernel_build.build(v)
    finally:
        done.set()
    took = time.monotonic() - t0
    say(f"kernel {v.name}: {k.release}, " + (f"built in {_mmss(took)}" if took > 30 else "cached")
        + f" ({k.directory.name})")
    return k


def scenarios_of(text: str) -> list[str]:
    out = []
    for name in text.split(","):
        out += SCENARIO_SETS.get(name.strip(), [name.strip()])
    return out


def nttrace_exe() -> str:
    for cand in (Path(sys.executable).with_name("nttrace"), HERE.parent / ".venv" / "bin" / "nttrace"):
        if cand.exists():
            return str(cand)
    found = shutil.which("nttrace")
    if not found:
        raise SystemExit("lab.ab: no nttrace to write the report with (make setup builds .venv)")
    return found


def save_reports(run: "lab.LabRun", scenarios: list[str], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name in scenarios:
        data = run.json(name)
        rep = data.get("report", data)
        p = dest / f"{name}.report.json"
        p.write_text(json.dumps({k: v for k, v in rep.items() if not k.startswith("_")}))
        out.append(p)
    return out


def write_ab(base: list[Path], cur: list[Path], out: Path) -> dict[str, Path]:
    exe = nttrace_exe()
    args = ["validate", "--baseline", *map(str, base), "--current", *map(str, cur)]
    written = {}
    for fmt, name in FORMATS.items():
        p = subprocess.run([exe, *args, "--format", fmt], capture_output=True, text=True, timeout=600)
        if p.returncode not in (0, 1):
            raise RuntimeError(f"nttrace validate --format {fmt} exited {p.returncode}: {p.stderr.strip()}")
        tmp = out / (name + ".tmp")
        tmp.write_text(p.stdout)
        tmp.rename(out / name)
        written[fmt] = out / name
    return written


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m lab.ab", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="the base variant")
    ap.add_argument("b", help="the patched variant (the same as A for an A/A)")
    ap.add_argument("--boots", type=int, default=5, help="boots of each side (default 5)")
    ap.add_argument("--scenarios", default="memmap", help=  # not a probe: a scenario set
                    "memmap, demotion or guest scenario names (default memmap)")
    ap.add_argument("--out", required=True, help="directory for the boots' reports and the A/B")
    ap.add_argument("--timeout", type=float, default=1800, help="bound on each boot, seconds")
    args = ap.parse_args(argv)
    if args.boots < 1:
        print("lab.ab: --boots must be at least 1", file=sys.stderr)
        return 2
    try:
        specs = [kernel_build.variant(args.a), kernel_build.variant(args.b)]
    except ValueError as exc:
        print(f"lab.ab: {exc}", file=sys.stderr)
        return 2
    scenarios = scenarios_of(args.scenarios)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
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
    for i, (side, k) in enumerate(order, 1):
        kern = kernels[sides.index(side)]
        say(f"boot {i} of {len(order)}: {side} = {names[sides.index(side)]}, boot {k} of {args.boots}, "
            f"scenarios {', '.join(scenarios)}")
        results = out / "boots" / f"{side}-{names[sides.index(side)]}-{k}"
        try:
            run = lab.run(results, timeout=args.timeout, kernel=kern, scenarios=scenarios)
            reports[side] += save_reports(run, scenarios, out / side / f"boot-{k}")
        except lab.LabError as exc:
            print(f"lab.ab: boot {i} ({side}, {names[sides.index(side)]} {k}) failed: {exc}", file=sys.stderr)
            return 1
        say(f"boot {i} of {len(order)}: done in {_mmss(run.elapsed_s)}")
    written = write_ab(reports["A"], reports["B"], out)
    (out / "run.json").write_text(json.dumps({
        "a": args.a, "b": args.b, "boots": args.boots, "scenarios": scenarios, "order": order,
        "kernels": [{"variant": k.variant, "release": k.release, "key": k.directory.name} for k in kernels],
        "wall_s": round(time.monotonic() - t0, 1), "finished": time.strftime("%F %T"),
        "command": "python3 -m lab.ab " + " ".join(argv)}, indent=1))
    say(f"{len(order)} boots in {_mmss(time.monotonic() - t0)}")
    print(f"A/B report: {written['html']} (and {', '.join(str(p.name) for f, p in written.items() if f != 'html')} "
          f"beside it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
