"""What a lab kernel's config costs to build, measured side by side on this
machine: the config the lab used before (defconfig-based) against
lab/kernel/lab.config, and lab.config with one thing changed at a time, so
each option's share of the time is a measured difference, not a guess.

    python3 -m lab.build_cost [--configs NAME,...] [--json FILE]

Each config is built from clean (its own O= tree, removed first) on the
pristine linux-source-7.2 tree (the base variant: no patches), one after the
other with nothing else running; the step timed is the build proper
(`make -jN bzImage modules`, as kernel_build runs it). The make output is
time-stamped line by line, so the report also splits each build into its
compile phase and its link tail (vmlinux's links, BTF encoding, bzImage).
One build a config: a figure from one run, and BENCHMARKS.md says so.

With --per-object, each compile runs through a wrapper (CC="WRAPPER gcc")
that notes its start, end and object file (bash's $EPOCHREALTIME: no fork
per compile), and the report says where the compile time goes: seconds and
objects per subsystem (the tree's directories, two levels deep; drivers/acpi's
ACPICA apart) and the costliest objects. Each subsystem is there because
lab.config asks for something it holds; this is what keeping it costs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from lab import kernel_build as kb

NO_DEBUG_INFO = kb.HERE / "kernel" / "cost-no-debug-info.config"
EXT4_ROOT = kb.HERE / "kernel" / "cost-ext4-root.config"
OPTIMIZE_FOR_SIZE = kb.HERE / "kernel" / "cost-optimize-for-size.config"
NO_MITIGATIONS = kb.HERE / "kernel" / "cost-no-mitigations.config"
# what each of the lab's requirements costs: lab.config without it
NO_TCP_IP = kb.HERE / "kernel" / "cost-no-tcp-ip.config"
NO_PROBE_SUPPORT = kb.HERE / "kernel" / "cost-no-probe-support.config"
NO_PMEM_NUMA = kb.HERE / "kernel" / "cost-no-pmem-numa.config"
REQUIREMENTS = (NO_TCP_IP, NO_PROBE_SUPPORT, NO_PMEM_NUMA)
# parts of the probe support, one at a time (the debug info and BTF: NO_DEBUG_INFO)
NO_FUNCTION_TRACER = kb.HERE / "kernel" / "cost-no-function-tracer.config"
NO_BPF = kb.HERE / "kernel" / "cost-no-bpf.config"
PROBE_SUPPORT_PARTS = (NO_FUNCTION_TRACER, NO_BPF, NO_DEBUG_INFO)
DWARF4 = kb.HERE / "kernel" / "cost-dwarf4.config"
OFF_SECTION = "# --- Off:"


def defaults_on_fragment() -> Path:
    """lab.config's "Off" section turned back on: each `# CONFIG_X is not
    set` there as CONFIG_X=y (what allnoconfig's defaults would have built).
    Written beside the build-cost trees, as the fragment is derived."""
    text = kb.CONFIG_FRAGMENT.read_text()
    off = text[text.index(OFF_SECTION):]
    names = [line.split()[1] for line in off.splitlines() if line.startswith("# CONFIG_") and line.endswith(" is not set")]
    out = kb.CACHE / "build-cost" / "lab-defaults-on.config"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{name}=y\n" for name in names)
    if not out.exists() or out.read_text() != body:
        out.write_text(body)
    return out


def configs() -> dict[str, kb.KernelConfig]:
    lab = kb.LAB_CONFIG

    def lab_with(name: str, *fragments: Path) -> kb.KernelConfig:
        """lab.config with `fragments` merged after it."""
        return replace(lab, name=name, fragments=(*lab.fragments, *fragments))

    return {
        "defconfig-based": kb.DEFCONFIG_BASED,
        "lab": lab,
        # the same, keeping DWARF's variable locations (what -g gives by default)
        "lab-with-var-tracking": replace(lab, name="lab-with-var-tracking", kcflags=kb.NO_STATEMENT_FRONTIERS),
        # the same, keeping the line table's statement marks (gcc's default at -O2 -g)
        "lab-with-statement-frontiers": replace(lab, name="lab-with-statement-frontiers", kcflags=kb.NO_VAR_TRACKING),
        # the same without debug info, hence without BTF: what BTF costs in all
        "lab-no-debug-info": lab_with("lab-no-debug-info", NO_DEBUG_INFO),
        # the same debug info and BTF from DWARF 4, not the toolchain's default 5
        "lab-dwarf4": lab_with("lab-dwarf4", DWARF4),
        # the same with what lab.config switches off left on: what those defaults cost
        "lab-defaults-on": lab_with("lab-defaults-on", defaults_on_fragment()),
        # the same with ext4 and jbd2 for an ext4 root, as before the image became ext2
        "lab-ext4-root": lab_with("lab-ext4-root", EXT4_ROOT),
        # the same at -Os: what lab.config's code generation section costs, one part at a time
        "lab-optimize-for-size": lab_with("lab-optimize-for-size", OPTIMIZE_FOR_SIZE),
        # the same without the CPU mitigations
        "lab-no-mitigations": lab_with("lab-no-mitigations", NO_MITIGATIONS),
        # the same without one of the lab's requirements at a time: the host's scrape of the guest daemon
        # (TCP/IP), nttrace's probes (BPF, BTF, kprobes, ftrace), the scenarios' devices (pmem, NUMA)
        "lab-no-tcp-ip": lab_with("lab-no-tcp-ip", NO_TCP_IP),
        "lab-no-probe-support": lab_with("lab-no-probe-support", NO_PROBE_SUPPORT),
        "lab-no-pmem-numa": lab_with("lab-no-pmem-numa", NO_PMEM_NUMA),
        # and without all three: the guest's machine, userspace, disk and shares alone
        "lab-machine-only": lab_with("lab-machine-only", *REQUIREMENTS),
        # the probe support's parts: fentry's call sites (kprobes stay), BPF and with it BTF (DWARF stays);
        # its debug info is lab-no-debug-info's
        "lab-no-function-tracer": lab_with("lab-no-function-tracer", NO_FUNCTION_TRACER),
        "lab-no-bpf": lab_with("lab-no-bpf", NO_BPF),
    }


# A compile's wrapper: runs the compiler and appends "start end object" to $1's log.
CC_WRAPPER = r"""#!/bin/bash
log=$1; shift
out=; prev=
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
start=$EPOCHREALTIME
"$@"; rc=$?
[ "${out%.o}" != "$out" ] && echo "$start $EPOCHREALTIME $out" >> "$log"
exit $rc
"""
# Directories split one level further: they hold parts that lab.config asks for one by one.
DEEPER = ("drivers/acpi/acpica", "arch/x86/kernel/cpu", "arch/x86/events", "net/ipv4", "kernel/bpf", "kernel/trace")


def subsystem(obj: str) -> str:
    """Where an object's cost is counted: its directory two levels deep
    (`mm`, `fs/ext4`, `arch/x86`: three there), one deeper under DEEPER."""
    parts = obj.split("/")[:-1]
    for deeper in DEEPER:
        if obj.startswith(deeper + "/"):
            return deeper
    depth = 3 if parts[:1] == ["arch"] else 2
    return "/".join(parts[:depth]) or "."


def per_object(log: Path, top: int = 25) -> dict:
    """The compile log's seconds, per subsystem and for the costliest objects."""
    objs = []
    for line in log.read_text().splitlines():
        start, end, obj = line.split(maxsplit=2)
        objs.append((float(end) - float(start), obj))
    by: dict[str, list] = {}
    for sec, obj in objs:
        by.setdefault(subsystem(obj), []).append(sec)
    total = sum(sec for sec, _ in objs)
    return {"compiles": len(objs), "compile_cpu_s": round(total, 1),
            "subsystems": sorted(({"path": k, "objects": len(v), "cpu_s": round(sum(v), 1)} for k, v in by.items()),
                                 key=lambda r: -r["cpu_s"]),
            "costliest": [{"object": o, "cpu_s": round(sec, 2)} for sec, o in sorted(objs, reverse=True)[:top]]}


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def encode_btf(vmlinux: Path, out: Path, jobs: int = 1) -> None:
    """The BTF of a vmlinux (or object) made again from its DWARF by pahole,
    into out; on one thread unless jobs says otherwise."""
    subprocess.run(["pahole", "-J", *([f"-j{jobs}"] if jobs > 1 else []), "--btf_gen_floats",
                    f"--btf_encode_detached={out}", str(vmlinux)], capture_output=True, check=True)


def btf_dump_lines(btf: Path) -> list[str]:
    """bpftool's dump of a BTF file (every type and function, with names,
    members, offsets and sizes), the type ids taken out and the lines sorted:
    what it describes, whatever order the types were numbered in."""
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(btf)], capture_output=True, text=True,
                          check=True).stdout
    return sorted(re.sub(r"^\[\d+\] |type_id=\d+", "", line) for line in dump.splitlines())


def btf_types_sha256(vmlinux: Path) -> str | None:
    """What the BTF of a vmlinux describes, as one hash. The BTF in the
    vmlinux itself will not do: the kernel runs pahole with -j, whose output
    differs from one build of a config to the next (scripts/Makefile.btf says
    so; two builds of one config hashed apart;
    benchmarks/pahole_reproducibility.py). So the BTF is made again from the
    vmlinux's DWARF by pahole on one thread and hashed as btf_dump_lines
    gives it. None without pahole or bpftool."""
    if shutil.which("bpftool") is None or shutil.which("pahole") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="nttrace-btf-") as tmp:
        btf = Path(tmp) / "vmlinux.btf"
        encode_btf(vmlinux, btf)
        lines = btf_dump_lines(btf)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def measure(config: kb.KernelConfig, src: Path, root: Path, jobs: int, objects: bool = False) -> dict:
    """Build one config from clean; returns its figures (and, with objects,
    where its compile time went)."""
    build = root / config.name / "build"
    log = root / config.name / "build.log"
    shutil.rmtree(build.parent, ignore_errors=True)
    build.mkdir(parents=True)
    t0 = time.monotonic()
    kb.configure(src, build, log, config.name, config)
    configure_s = time.monotonic() - t0
    cmd = kb.make_command(build, config, jobs)
    cc_log = root / config.name / "compiles.log"
    if objects:
        wrapper = root / config.name / "cc-timed"
        wrapper.write_text(CC_WRAPPER)
        wrapper.chmod(0o755)
        cmd.insert(2, f"CC={wrapper} {cc_log} gcc")
    stamps: list[tuple[float, str]] = []
    t_build = time.monotonic()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        p = subprocess.Popen(cmd, cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            for line in p.stdout:
                stamps.append((time.monotonic() - t_build, line.rstrip()))
                f.write(f"[{stamps[-1][0]:8.1f}] {line}")
            rc = p.wait()
        except BaseException:
            kb._kill_group(p)
            raise
    build_s = time.monotonic() - t_build
    if rc != 0:
        raise kb.KernelBuildError(config.name, "build", log, f"exit {rc}")
    # the link tail starts at the first link of vmlinux (kbuild's "LD .tmp_vmlinux*" or "LD vmlinux.o")
    tail_start = next((t for t, line in stamps if line.strip().startswith(("LD      vmlinux.o", "LD      .tmp_vmlinux"))),
                      build_s)
    btf = [t for t, line in stamps if line.strip().startswith("BTF")]
    cfg = (build / ".config").read_text()
    has_btf = "CONFIG_DEBUG_INFO_BTF=y" in cfg
    btf_types = btf_types_sha256(build / "vmlinux") if has_btf else None
    n_objects = sum(1 for _ in build.rglob("*.o"))
    return {"config": config.name, "recipe": config.recipe(), "configure_s": round(configure_s, 1),
            "build_s": round(build_s, 1), "compile_s": round(tail_start, 1),
            "link_tail_s": round(build_s - tail_start, 1), "btf_lines": len(btf),
            "objects": n_objects, "options_y": sum(1 for line in cfg.splitlines() if line.endswith("=y")),
            "vmlinux_bytes": (build / "vmlinux").stat().st_size,
            "bzimage_bytes": (build / "arch/x86/boot/bzImage").stat().st_size,
            "debug_info": "CONFIG_DEBUG_INFO=y" in cfg, "btf": has_btf,
            **({"btf_types_sha256": btf_types} if btf_types else {}),
            "command": " ".join(c for c in cmd if not c.startswith("O=")),
            **({"per_object": per_object(cc_log)} if objects else {})}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.build_cost", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(configs()), help="comma-separated, in build order "
                    f"(default: all: {', '.join(configs())})")
    ap.add_argument("--jobs", type=int, default=kb.JOBS)
    ap.add_argument("--per-object", action="store_true", help="time each compile: where the time goes, per subsystem")
    ap.add_argument("--json", type=Path, help="write the figures here (benchmarks/lab-kernel-build-cost.json)")
    args = ap.parse_args(argv)
    known = configs()
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    if unknown := [c for c in chosen if c not in known]:
        print(f"build_cost: unknown config(s) {', '.join(unknown)} (have {', '.join(known)})", file=sys.stderr)
        return 2
    root = kb.CACHE / "build-cost"
    log = root / "source.log"
    root.mkdir(parents=True, exist_ok=True)
    src = kb.unpacked_source(kb.fetch_source(log), log)
    results = []
    t0 = time.monotonic()

    def report(complete: bool) -> str:
        """The figures so far; written after every config, so a failed build keeps the ones before it."""
        text = json.dumps({"host": {"cpu": _cpu(), "cpus": os.cpu_count(), "kernel": platform.release()},
                           "jobs": args.jobs, "source": src.parent.name, "compiler": kb.compiler_version(),
                           "runs_per_config": 1, "wall_s": round(time.monotonic() - t0, 1), "complete": complete,
                           "command": "python3 -m lab.build_cost " + " ".join(argv), "configs": results},
                          indent=1) + "\n"
        if args.json:
            args.json.write_text(text)
        return text

    for i, name in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {name}: {known[name].recipe()} ...", flush=True)
        try:
            r = measure(known[name], src, root, args.jobs, objects=args.per_object)
        except kb.KernelBuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        finally:
            shutil.rmtree(root / name / "build", ignore_errors=True)   # several GB each
        results.append(r)
        report(complete=False)
        print(f"[{i}/{len(chosen)}] {name}: built in {r['build_s']:.0f} s (compile {r['compile_s']:.0f} s, "
              f"link tail {r['link_tail_s']:.0f} s), {r['objects']} objects", flush=True)
    print(report(complete=True), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
