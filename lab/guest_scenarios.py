# SPDX-License-Identifier: Apache-2.0
"""The lab's scenarios, run inside the guest by guest-run.sh. Each writes
RESULTS/<name>.json; a scenario that raises writes its error instead, and
the next one still runs. Every command is bounded with a timeout."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

RESULTS = Path(sys.argv[1])
NTTRACE = "/opt/venv/bin/nttrace"
# validate records its machine's conditions at the run's two ends only: a
# sampler on the guest's other vCPU would slow what the guest times (the
# host records its own conditions around the whole boot)
os.environ["NTTRACE_CONDITIONS_INTERVAL"] = "0"


def sh(*cmd, timeout=300, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


def nttrace_json(*args, timeout=900) -> dict:
    p = sh(NTTRACE, *args, "--json", timeout=timeout, check=False)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        out = {"unparsed_stdout": p.stdout[-4000:]}
    out["_rc"], out["_stderr"] = p.returncode, p.stderr[-4000:]
    return out


def console(line: str) -> None:
    """A line on the guest's console: the host reads it to say where a panic hit."""
    try:
        with open("/dev/console", "w") as c:
            c.write(f"nttrace-lab: {line}\n")
    except OSError:
        pass


def scenario(fn):
    name = fn.__name__
    console(f"scenario {name} started")
    t0 = time.monotonic()
    try:
        result = fn()
    except Exception as exc:
        result = {"error": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()}
    result["_seconds"] = time.monotonic() - t0
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"scenario {name}: {'error' if 'error' in result else 'done'} in {result['_seconds']:.0f}s", flush=True)


def bpftool_maps() -> set:
    """The names of the BPF maps loaded now."""
    return {m.get("name", "") for m in json.loads(sh("bpftool", "-j", "map", "show").stdout or "[]")}


def bpftool_ids() -> set:
    return {(p["id"], p.get("name", "")) for p in json.loads(sh("bpftool", "-j", "prog", "show").stdout or "[]")}


def capabilities():
    return nttrace_json("validate", "--check", "env.", "--check", "kernel.nt_support")


def attach_modes():
    """Every probe attached by fentry where it loads and by kprobe, then detached."""
    from nttrace.capabilities import report as capmod
    from nttrace.kernel import metadata as kernel_meta
    from nttrace.workloads import triggers
    from nttrace.capabilities.report import Capability
    from nttrace.kernel.sysroot import Sysroot
    from nttrace.tracing.tracer import Tracer
    from nttrace.probes import PROBES
    from nttrace.probes.migrate import MigrateProbe
    caps = capmod.report()
    meta = kernel_meta.load(Sysroot("/"))
    out = {"caps": {k: v.as_json() for k, v in caps.items() if k in ("kprobe", "fentry", "bcc", "pmem", "numa:tiers")},
           # what decides whether fentry takes migrate_pages(): its arity, and the kernel's trampoline limit
           "release": os.uname().release,
           "migrate_pages_params": len(meta.btf.func_params("migrate_pages")) if meta.btf else None}
    for mode in ("fentry", "kprobe"):
        c = dict(caps)
        if mode == "kprobe":
            c["fentry"] = Capability(False, "disabled by the lab to exercise kprobes")
        before = bpftool_ids()
        # every probe with a kernel function to attach, and the migrate tracepoints beside them
        names = [MigrateProbe.name] + [name for name, p in PROBES.items() if p.functions]
        with Tracer(names, caps=c, meta=meta) as t:
            status = dict(t.status)
            triggers.compaction(scratch_mib=64)
            time.sleep(1)
            snap = t.snapshot()
        out[mode] = {"status": status, **{name: snap.get(name) for name in names},
                     "detached_clean": bpftool_ids() == before}
    return out


def _dmesg_memmap() -> list[dict]:
    from nttrace.workloads.namespace_rebind import kernel_lines
    return kernel_lines(sh("dmesg").stdout)


PAGE_REF_RUNS = 3


def _memmap(mode_args: list[str]) -> dict:
    """30 rebinds timed without page_ref (the latency figures), then a few
    with page_ref_set attached (which path ran, and what observing it costs)."""
    sh("ndctl", "create-namespace", "-f", "-e", "namespace0.0", *mode_args, timeout=300)
    ns = json.loads(sh("ndctl", "list", "-N").stdout)
    ns = ns[0] if isinstance(ns, list) else ns
    Path("/proc/dynamic_debug/control").write_text("func memmap_init_zone_device +p\n")
    sh("dmesg", "-C")
    report = nttrace_json("validate", "--check", "kernel.memmap_latency", "--rebind", "namespace0.0", "--runs", "30")
    out = {"namespace": ns, "report": report, "kernel_debug_lines": _dmesg_memmap()}
    if Path("/sys/kernel/tracing/events/page_ref/page_ref_set").exists():
        sh("dmesg", "-C")
        out["page_ref_report"] = nttrace_json("validate", "--check", "kernel.memmap_latency", "--rebind",
                                              "namespace0.0", "--runs", str(PAGE_REF_RUNS), "--page-ref")
        out["page_ref_kernel_debug_lines"] = _dmesg_memmap()
    return out


def memmap_fsdax():
    return _memmap(["-m", "fsdax", "-M", "dev"])


def memmap_devdax():
    return _memmap(["-m", "devdax", "-a", "2M"])


def demotion():
    if not json.loads(sh("daxctl", "list").stdout or "[]"):
        # no devdax namespace yet (the memmap scenarios make one): make it
        sh("ndctl", "create-namespace", "-f", "-e", "namespace0.0", "-m", "devdax", "-a", "2M", timeout=300)
    devs = json.loads(sh("daxctl", "list").stdout or "[]")
    dev = devs[0]["chardev"] if devs else "dax0.0"
    sh("daxctl", "reconfigure-device", "--mode=system-ram", "--force", dev, timeout=300)
    nodes = Path("/sys/devices/system/node/online").read_text().strip()
    report = nttrace_json("validate", "--check", "kernel.demotion_nt", "--demote")
    return {"nodes_online": nodes, "report": report,
            "tiers": sorted(p.name for p in Path("/sys/devices/virtual/memory_tiering").glob("memory_tier*"))}


def overhead_demotion():
    """`nttrace bench overhead --work demotion` (after `demotion` has onlined
    node 1), then its A/A run: the probes' cost on demotion throughput and
    the method's noise floor, in one boot. Rounds, demotions per round and
    MiB (and untimed runs a condition) from nttrace.overhead=R,N,MIB[,W] on
    the kernel command line (default 2,1,128,1: the CI's short run, two rounds
    for the two orders, probes first and none first; the nt-v3 guest is the
    suite's longest, and a round costs it ~20 s under TCG: the scenario took
    201 s with 4 rounds and a warm-up in each of its two runs)."""
    m = re.search(r"nttrace\.overhead=(\d+),(\d+),(\d+)(?:,(\d+))?", Path("/proc/cmdline").read_text())
    rounds, per_round, mib, warmup = m.groups(default="1") if m else ("2", "1", "128", "1")
    before = bpftool_ids()
    args = ("bench", "overhead", "--work", "demotion", "--rounds", rounds, "--per-round", per_round,
            "--scratch-mib", mib, "--warmup", warmup)
    out = {"probes": nttrace_json(*args, timeout=3600), "aa": nttrace_json(*args, "--aa", timeout=3600)}
    out["programs_left"] = sorted(name for _id, name in bpftool_ids() - before)
    return out


def compaction():
    """A compaction seen by the migrate probe: its rows decode by name from
    this kernel's enums (v2 renumbers MIGRATE_SYNC)."""
    return nttrace_json("validate", "--check", "probe.migrate", "--check", "kernel.nt_support")


def memcg_reclaim():
    """memcg reclaim by memory.reclaim (cgroup v2) seen by the reclaim probe,
    pages as the cgroup's memory.stat pgsteal counts them."""
    return nttrace_json("validate", "--check", "probe.reclaim")


_TRACE: dict = {}


def trace_start():
    """`nttrace trace` with every probe, left running through the scenarios
    up to trace_stop (the demotion scenario's reclaim among them); first one
    rebind of the namespace (memmap, page_ref), a compaction and a memcg
    reclaim. What it prints at the end is a snapshot recorded on this kernel."""
    from nttrace.workloads import triggers
    from nttrace.probes import PROBES
    from nttrace import bpf as bpf_sources
    maps_before = bpftool_maps()
    # --stop-grace: the detach of seven probes and the summary take ~1.2 s of this
    # TCG guest's wall time on a quiet host and ~2 s beside another guest; the
    # product's 1.5 s is sized for hardware
    proc = subprocess.Popen([NTTRACE, "trace", "--probes", ",".join(PROBES), "--json", "--interval", "3600",
                             "--stop-grace", "10",
                             "--record-maps", str(RESULTS / "trace-maps.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _TRACE["proc"] = proc
    deadline = time.monotonic() + 600
    # every probe loaded: each one's maps exist (map names, as the kernel keeps
    # them, are cut to 15 characters); it attaches right after its load
    wanted = {p.name: {m[:15] for m in bpf_sources.map_decls(p.source)} for p in PROBES.values()}
    while any(not (names & (bpftool_maps() - maps_before)) for names in wanted.values()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"nttrace trace did not attach: rc {proc.poll()} {proc.stderr.read()[-2000:] if proc.poll() is not None else ''}")
        time.sleep(1)
    time.sleep(2)
    out = {"probes": list(PROBES)}
    if json.loads(sh("ndctl", "list", "-N").stdout or "[]"):
        sh("ndctl", "disable-namespace", "namespace0.0", timeout=300)
        sh("ndctl", "enable-namespace", "namespace0.0", timeout=300)
        out["rebound"] = "namespace0.0"
    out["compaction"] = triggers.compaction(scratch_mib=64)
    out["memcg_reclaim"] = triggers.memcg_reclaim(scratch_mib=32)
    # each probe's lab exercise (Exercise.lab): its work in the recording too
    out["exercises"] = {}
    for name, p in PROBES.items():
        if p.exercise is not None and p.exercise.lab:
            try:
                out["exercises"][name] = p.exercise.run()
            except Exception as exc:  # noqa: BLE001 - recorded, the trace goes on
                out["exercises"][name] = {"error": str(exc)}
    return out


def trace_stop():
    import signal
    proc = _TRACE.pop("proc")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    return {"rc": proc.returncode, "trace": json.loads(stdout) if stdout.strip() else None, "stderr": stderr[-3000:]}


def kernel_facts_tests():
    """The suite's kernel-metadata tests, run against this kernel: they take
    its facts (enum values, NT revision) from the kernel they run on."""
    test = next(Path("/nttrace/tests").rglob("test_kernel_metadata.py"))    # whichever room of the suite holds it
    p = sh("/opt/venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           str(test), timeout=600, check=False)
    return {"rc": p.returncode, "stdout": p.stdout[-6000:], "stderr": p.stderr[-2000:]}


def daemon_probes() -> list[str]:
    """The probes the daemon scenarios run: the migrate tracepoints, and by
    fentry the memmap probe and the copy routines."""
    from nttrace.probes.copy import CopyProbe
    from nttrace.probes.memmap import MemmapProbe
    from nttrace.probes.migrate import MigrateProbe
    return [MigrateProbe.name, MemmapProbe.name, CopyProbe.name]


def daemon_config(listen: str) -> str:
    """The daemon scenarios' config: where it listens, and daemon_probes()."""
    return f'listen = "{listen}"\nprobes = {json.dumps(daemon_probes())}\n'


def exercise_daemon_probes() -> None:
    """What the daemon scenarios give the probes to see: a compaction's
    migrations and, where node 1 has memory (the NT demotion series, on NT
    kernels), a demotion."""
    from nttrace.workloads import demotion, triggers
    triggers.compaction(scratch_mib=64)
    if _node1_has_memory():
        demotion.demote_scratch(64)


def daemon():
    """Serve on the forwarded port until the host has scraped (or 300 s)."""
    from nttrace.bench.daemon_process import DaemonProcess
    work = Path("/tmp/daemon")
    work.mkdir(exist_ok=True)
    d = DaemonProcess(work, config_text=daemon_config("0.0.0.0:9435"))
    d.port = 9435
    try:
        ready = d.wait_message("READY=1", timeout=600)
        exercise_daemon_probes()
        (RESULTS / "daemon-ready").write_text(f"{ready}\n")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (RESULTS / "host-scraped").exists():
            time.sleep(0.5)
        scraped = (RESULTS / "host-scraped").exists()
        try:
            took = d.stop()
        except subprocess.TimeoutExpired as exc:   # the daemon's own log says where it hung
            raise RuntimeError(f"the daemon did not stop within {exc.timeout} s of SIGTERM; "
                               f"its threads then:\n{d.stuck}\nits log's tail:\n{d.read_log()[-3000:]}") from None
        return {"ready_s": ready, "host_scraped": scraped, "stop_s": took, "rc": d.proc.returncode,
                "log": d.read_log()[-3000:]}
    finally:
        d.close()


def daemon_stops():
    """The daemon started and stopped nttrace.daemon_stops=N times (default
    5) with the daemon scenario's probes, after a compaction and (where node
    1 has memory) a demotion each time: how long SIGTERM takes to exit, with
    the daemon's own account of each step ("stopped in"). A stop still
    running after 10 s has its threads' kernel stacks read (where it waits)
    and is given 300 s before it is killed. A benchmark, not a CI scenario."""
    import signal
    from nttrace.bench.daemon_process import DaemonProcess, kernel_stacks
    m = re.search(r"nttrace\.daemon_stops=(\d+)", Path("/proc/cmdline").read_text())
    runs = []
    for i in range(int(m.group(1)) if m else 5):
        work = Path(f"/tmp/daemon-stops/{i}")
        work.mkdir(parents=True, exist_ok=True)
        d = DaemonProcess(work, config_text=daemon_config("127.0.0.1:9436"))
        try:
            ready = d.wait_message("READY=1", timeout=600)
            exercise_daemon_probes()
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            stacks = None
            while d.proc.poll() is None and time.monotonic() - t0 < 300:
                if stacks is None and time.monotonic() - t0 > 10:
                    stacks = kernel_stacks(d.proc.pid)
                time.sleep(0.05)
            took = time.monotonic() - t0
            log = d.read_log()
            runs.append({"ready_s": ready, "stop_s": round(took, 3), "rc": d.proc.poll(),
                         "stopped": re.findall(r"^INFO nttrace: (stop.*)$", log, re.M), "stacks_at_10s": stacks})
            console(f"daemon stop {i}: {took:.2f} s")
        finally:
            d.close()
    return {"kernel": os.uname().release, "probes": daemon_probes(), "runs": runs}


def _node1_has_memory() -> bool:
    meminfo = Path("/sys/devices/system/node/node1/meminfo")
    if not meminfo.exists():
        return False
    m = re.search(r"MemTotal:\s+(\d+)", meminfo.read_text())
    return bool(m and int(m.group(1)) > 0)


ALL = (capabilities, attach_modes, compaction, memcg_reclaim, memmap_fsdax, memmap_devdax, trace_start, demotion, trace_stop,
       overhead_demotion, daemon, daemon_stops, kernel_facts_tests)
DEFAULT = ("capabilities", "attach_modes", "memcg_reclaim", "memmap_fsdax", "memmap_devdax", "demotion", "daemon")


EXERCISE = "exercise_"


def exercise_scenario(probe: str):
    """exercise_<probe>: the probe's declared exercise, as `nttrace validate
    --check probe.<probe> --exercise <probe>` runs it (any probe, by name from
    the command line: a new probe needs no scenario of its own)."""
    def run():
        return {"report": nttrace_json("validate", "--check", f"probe.{probe}", "--exercise", probe)}
    run.__name__ = EXERCISE + probe
    return run


def chosen() -> list:
    """nttrace.scenarios=a,b,c on the kernel command line, else DEFAULT."""
    m = re.search(r"nttrace\.scenarios=(\S+)", Path("/proc/cmdline").read_text())
    names = m.group(1).split(",") if m else list(DEFAULT)
    by_name = {fn.__name__: fn for fn in ALL}
    return [by_name[n] if n in by_name else exercise_scenario(n.removeprefix(EXERCISE))
            for n in names if n in by_name or n.startswith(EXERCISE)]


if __name__ == "__main__":
    for fn in chosen():
        scenario(fn)
