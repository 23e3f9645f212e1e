"""Host capabilities for the tests.

A test that needs something of the host says so with
`@pytest.mark.needs("bcc", ...)`. Where the host lacks it the test is skipped
and the skip names the capability, unless the capability is listed in
NTTRACE_REQUIRE (comma-separated; CI lists what its hosts have), in which
case the test fails: a capability CI relies on cannot silently disappear.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@lru_cache(maxsize=1)
def _report():
    from nttrace.probes import capabilities
    return capabilities.report()


def _cap(key):
    c = _report()[key]
    return c.available, c.detail


def _tracepoint():
    a, d = _cap("tracepoint:migrate:mm_migrate_pages_start")
    return a, d


def _root():
    return os.geteuid() == 0, f"euid {os.geteuid()}"


def _binary(name):
    def probe():
        path = shutil.which(name)
        return path is not None, path or f"{name} not on PATH"
    return probe


def _qemu():
    missing = [b for b in ("qemu-system-x86_64", "qemu-img", "debootstrap", "mkfs.ext2", "mkfs.ext4")
               if not shutil.which(b)]
    return not missing, ("missing " + ", ".join(missing)) if missing else "qemu-system-x86_64, debootstrap"


def _kernel_build():
    # dpkg-buildpackage (dpkg-dev), dh_builddeb (debhelper) and rsync (its headers_install): `make
    # bindeb-pkg`, each kernel's packages
    missing = [b for b in ("gcc", "make", "flex", "bison", "bc", "pahole", "patch", "apt-get", "dpkg-deb",
                           "dpkg-buildpackage", "dh_builddeb", "rsync") if not shutil.which(b)]
    if not Path("/usr/include/libelf.h").exists():
        missing.append("libelf-dev")
    return not missing, ("missing " + ", ".join(missing)) if missing else "kernel build tools present"


def _seeds():
    from lab import kernel_build
    want = sorted({s.file for v in kernel_build.VARIANTS.values() for s in v.series})
    missing = [f for f in want if not (kernel_build.SEEDS / f).exists()]
    return not missing, (f"{kernel_build.SEEDS} lacks {', '.join(missing)}" if missing
                         else f"seed series in {kernel_build.SEEDS}")


def _memcg():
    from nttrace.workloads.scratch_cgroup import NoMemoryCgroup, memory_hierarchy
    try:
        root, version = memory_hierarchy()
    except NoMemoryCgroup as exc:
        return False, str(exc)
    return True, f"memory controller on cgroup v{version} at {root}"


def _kernel_image():
    """A real x86 bzImage on this host: an installed kernel, or the lab image's
    (what `nttrace ab start --dry-run` reads the identity of)."""
    lab_cache = Path(os.environ.get("NTTRACE_LAB_CACHE", "/var/cache/nttrace-lab"))
    for p in sorted(Path("/boot").glob("vmlinuz-*")) + sorted(lab_cache.glob("*/vmlinuz")):
        try:
            with open(p, "rb") as f:
                if f.read(0x206)[0x202:0x206] == b"HdrS":
                    return True, str(p)
        except OSError:
            continue
    return False, f"no bzImage in /boot or {lab_cache}/*/vmlinuz"


CAPABILITIES = {
    "root": _root,
    "btf": lambda: _cap("btf"),
    "tracefs": lambda: _cap("tracefs"),
    "tracepoint": _tracepoint,
    "uprobe": lambda: _cap("uprobe"),
    "kprobe": lambda: _cap("kprobe"),
    "fentry": lambda: _cap("fentry"),
    "bcc": lambda: _cap("bcc"),
    "page-ref": lambda: _cap("tracepoint:page_ref:page_ref_set"),
    "perf-software": lambda: _cap("perf:software"),
    "perf-hardware": lambda: _cap("perf:hardware"),
    "perf-uncore": lambda: _cap("perf:uncore"),
    "numa-tiers": lambda: _cap("numa:tiers"),
    "pmem": lambda: _cap("pmem"),
    "memcg": _memcg,
    "bpftool": _binary("bpftool"),
    "prometheus": _binary("prometheus"),
    "node-exporter": _binary("prometheus-node-exporter"),
    "openssl": _binary("openssl"),
    # absences some tests are about (what a probe does where the kernel lacks its path)
    "no-page-ref": lambda: (not _cap("tracepoint:page_ref:page_ref_set")[0],
                            "page_ref_set " + ("present" if _cap("tracepoint:page_ref:page_ref_set")[0] else "absent")),
    "no-kprobe-fentry": lambda: (not (_cap("kprobe")[0] or _cap("fentry")[0]),
                                 f"kprobe: {_cap('kprobe')[1]}; fentry: {_cap('fentry')[1]}"),
    "browser": lambda: (bool(shutil.which("chromium-headless-shell") or shutil.which("chromium")),
                        shutil.which("chromium-headless-shell") or shutil.which("chromium") or "no chromium"),
    "promtool": _binary("promtool"),
    "systemd-analyze": _binary("systemd-analyze"),
    "setpriv": _binary("setpriv"),
    "dpkg-dev": _binary("dpkg-parsechangelog"),
    "qemu": _qemu,
    "kernel-build": _kernel_build,
    "seeds": _seeds,
    "kernel-image": _kernel_image,
    # systemd not this host's init: where `nttrace ab start` must refuse (a host
    # that has it would be rebooted by a start that passes)
    "no-systemd-init": lambda: (not Path("/run/systemd/system").is_dir(),
                                "systemd is " + ("init" if Path("/run/systemd/system").is_dir() else "not init")),
}


def required() -> set[str]:
    return {c.strip() for c in os.environ.get("NTTRACE_REQUIRE", "").split(",") if c.strip()}


def pytest_configure(config):
    unknown = required() - set(CAPABILITIES)
    if unknown:
        raise pytest.UsageError(f"NTTRACE_REQUIRE names unknown capabilities: {', '.join(sorted(unknown))}")


# -- the lab's kernels, built in the background ---------------------------------
# A cold run spends most of its time compiling the three lab kernels, and
# most of the rest in single-threaded QEMU guests and tests that leave a core
# idle. When the session holds the lab-kernel tests, their kernels start
# building at once, niced (the tests keep the CPU whenever they want it), in
# the order the tests ask for them; a test that needs a kernel still being
# built waits on kernel_build's per-variant lock and takes it. The build is
# ended at the session's end (TERM: its make is killed), whatever happened.
_PREBUILD: subprocess.Popen | None = None
SELECTED: set[str] = set()     # the session's test ids (what a lab test may prepare ahead for)


# -- the suite's rooms ------------------------------------------------------------
# tests/unit: no root, no kernel, seconds (`make test-unit`); tests/live: root
# on this host; tests/lab: the QEMU guests and their kernels. A test filed in
# a room it does not fit is a collection error that names it, so the unit
# room never comes to need root or the kernel, nor to boot a guest.
ROOMS = ("unit", "live", "lab")
UNIT_NEEDS = {"browser", "openssl", "promtool", "systemd-analyze", "dpkg-dev"}   # tools that run unprivileged


def room_of(path: Path) -> str | None:
    """The room a test file is in (None: a file outside the rooms)."""
    try:
        first = Path(path).resolve().relative_to(Path(__file__).resolve().parent).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in ROOMS else None


def misfiled(tests: list[tuple[str, str | None, set[str], bool]]) -> list[str]:
    """'test id: why' for each (test id, room, capabilities it needs, lab
    mark) that its room does not fit. A file outside the rooms fits none:
    `make test` would run it, but no room's target would."""
    out = []
    for nodeid, room, needs, lab in tests:
        if room is None:
            out.append(f"{nodeid}: outside the rooms, so no room's target runs it")
        elif lab and room in ("unit", "live"):
            out.append(f"{nodeid}: boots a guest (marked lab) outside tests/lab")
        elif room == "unit" and needs - UNIT_NEEDS:
            out.append(f"{nodeid}: needs {', '.join(sorted(needs - UNIT_NEEDS))}, so it belongs in tests/live")
    return out


def pytest_collection_modifyitems(session, config, items):
    """Each test in a room that fits it; the lab's tests last: their guests
    boot while the rest run (tests/lab_boots.py)."""
    wrong = misfiled([(item.nodeid, room_of(item.path), {c for m in item.iter_markers("needs") for c in m.args},
                       item.get_closest_marker("lab") is not None) for item in items])
    if wrong:
        raise pytest.UsageError("tests filed in the wrong room (tests/unit, tests/live, tests/lab):\n"
                                + "\n".join(wrong))
    items.sort(key=lambda item: item.get_closest_marker("lab") is not None)   # stable: order kept otherwise


def pytest_collection_finish(session):
    SELECTED.update(item.nodeid for item in session.items)
    _start_prebuild(session)
    _start_lab_boots(session)    # after: a lab kernel's boot waits for the prebuild to build it


def _start_prebuild(session) -> None:
    global _PREBUILD
    if os.environ.get("NTTRACE_LAB_PREBUILD", "1") == "0" or session.config.option.collectonly:
        return
    if not any("test_lab_kernels.py" in item.nodeid for item in session.items):
        return
    if not has("root", "kernel-build", "seeds"):
        return      # the tests themselves skip (or fail, where required) saying why
    from lab import kernel_build
    variants = lab_variants()
    (kernel_build.CACHE / "logs").mkdir(parents=True, exist_ok=True)
    with open(kernel_build.CACHE / "logs" / "prebuild.log", "w") as log:
        _PREBUILD = subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "lab.kernel_build", *variants],
                                     cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)


def lab_variants() -> list[str]:
    """The lab kernels this session builds and boots: NTTRACE_LAB_VARIANTS
    (comma-separated), by default all three, in the order they are built."""
    return [v for v in os.environ.get("NTTRACE_LAB_VARIANTS", "base,nt-v3,nt-v2").split(",") if v]


def prebuild_running() -> bool:
    """Whether the background build of the lab kernels is still going."""
    return _PREBUILD is not None and _PREBUILD.poll() is None


def lab_kernel(variant: str):
    """The variant's kernel (kernel_build.Kernel), or the error that stopped
    its build (for a lab boot's `prepare`, outside the pool's slots). While
    the background build runs, it is left to build the variant (niced, one
    kernel at a time), not raced by a second build here."""
    from lab import kernel_build
    while _left_to_the_prebuild(variant):
        time.sleep(5)
    try:
        return kernel_build.build(variant)
    except kernel_build.KernelBuildError as exc:
        return exc


def _left_to_the_prebuild(variant: str) -> bool:
    from lab import kernel_build
    try:
        return prebuild_running() and not kernel_build.cached(variant)
    except Exception:   # a series that cannot be read: build() reports it as its step
        return False


def has(*caps: str) -> bool:
    """Whether the host has every one of the capabilities (what `needs` checks)."""
    return all(CAPABILITIES[c]()[0] for c in caps)


def _start_lab_boots(session) -> None:
    if "lab_boots" not in sys.modules or session.config.option.collectonly:
        return      # no lab module collected
    if not any(item.get_closest_marker("lab") for item in session.items):
        return      # no lab test selected (make test-unit, -m "not lab"): no guest boots for nothing
    if not has("root", "qemu"):
        return      # the lab tests skip (or fail, where required) saying why
    from lab_boots import EARLY, POOL
    POOL.tmp = session.config._tmp_path_factory
    # the session's base directory is made on its first use and not under a
    # lock: made here, before any boot thread, so a boot thread and the first
    # test's tmp_path cannot each make one (seen once in CI: the test's
    # tmp_path raised "is not a normalized and relative path", its check
    # having read the base directory twice, before and after the other's)
    POOL.tmp.getbasetemp()
    if EARLY:
        POOL.start_wanted()


def pytest_sessionfinish(session, exitstatus):
    if "lab_boots" in sys.modules:
        sys.modules["lab_boots"].POOL.close()
    if _PREBUILD is None or _PREBUILD.poll() is not None:
        return
    os.killpg(_PREBUILD.pid, signal.SIGTERM)
    try:
        _PREBUILD.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(_PREBUILD.pid, signal.SIGKILL)
        _PREBUILD.wait()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A lab test's body runs inside the boot pool's host_work: never beside
    the lab A/B's measuring boots (tests/lab_boots.py)."""
    if room_of(item.path) != "lab" or "lab_boots" not in sys.modules:
        yield
        return
    with sys.modules["lab_boots"].POOL.host_work():
        yield


def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="needs"):
        for cap in mark.args:
            if cap not in CAPABILITIES:
                pytest.fail(f"test asks for unknown capability {cap!r}")
            ok, detail = CAPABILITIES[cap]()
            if ok:
                continue
            if cap in required():
                pytest.fail(f"capability {cap} is in NTTRACE_REQUIRE but missing on this host: {detail}")
            pytest.skip(f"host lacks capability {cap}: {detail}")


def run_nttrace(*args, check=False, timeout=120, env=None, **kw) -> subprocess.CompletedProcess:
    """Run the installed `nttrace` console script (the one a user runs)."""
    exe = Path(sys.executable).with_name("nttrace")
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"nttrace {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def one_line_error(proc) -> str:
    """The single stderr line of a failed nttrace run (never a traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("nttrace: ")
    return lines[0]


def bpf_programs() -> list[dict]:
    """The loaded BPF programs as bpftool lists them (id, name; pids where
    bpftool was built with them)."""
    import json
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


def bpftool_prog_ids() -> set[tuple[int, str]]:
    return {(p["id"], p.get("name", "")) for p in bpf_programs()}


def _process(pid: int) -> str:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"pid {pid} (gone)"
    return f"pid {pid} ({comm}): {cmdline}"


def program_holders() -> dict[int, set[str]]:
    """The processes that hold each loaded BPF program, by program id, each
    as 'pid PID (COMM): COMMAND LINE': bpftool's pids where it lists them,
    every process's descriptors of programs and links (/proc/PID/fdinfo's
    prog_id), and programs attached through a process's perf events
    (bpftool perf list)."""
    import json
    held: dict[int, set[int]] = {}
    for p in bpf_programs():
        for h in p.get("pids", ()):
            held.setdefault(p["id"], set()).add(h["pid"])
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            fds = [fd for fd in fd_dir.iterdir() if "bpf" in os.readlink(fd)]
        except OSError:
            continue
        for fd in fds:
            try:
                for line in (fd_dir.parent / "fdinfo" / fd.name).read_text().splitlines():
                    if line.startswith("prog_id:"):
                        held.setdefault(int(line.split()[1]), set()).add(int(fd_dir.parent.name))
            except (OSError, ValueError):
                pass
    try:
        perf = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True, timeout=10).stdout
        for e in json.loads(perf or "[]"):
            held.setdefault(e["prog_id"], set()).add(e["pid"])
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        pass
    return {prog: {_process(pid) for pid in pids} for prog, pids in held.items()}


def nttrace_programs() -> set[tuple[int, str]]:
    """(id, name) of every loaded program whose name starts with nttrace."""
    return {p for p in bpftool_prog_ids() if p[1].startswith("nttrace")}


def _holders_of(prog: int, holders: dict[int, set[str]]) -> str:
    return "; ".join(sorted(holders[prog])) if holders.get(prog) else "no process (a BPF link or a pin holds it)"


def held_by(programs: set[tuple[int, str]] | None = None) -> str:
    """What a test that finds programs attached says: each one (by default
    every nttrace program) with the processes that hold it, one a line, so
    that a program another run left behind is named with its holder."""
    programs = nttrace_programs() if programs is None else programs
    holders = program_holders()
    lines = [f"program {prog} {name} held by " + _holders_of(prog, holders) for prog, name in sorted(programs)]
    return "\n".join(lines) or "no nttrace program loaded"


def programs_left(before: set[tuple[int, str]], settle_s: float = 10.0) -> set[tuple[int, str, str]]:
    """The programs loaded since `before` that are still loaded, each as
    (id, name, the processes that hold it: held_by's words): polled for
    up to settle_s, so that a program the kernel releases a moment after its
    last descriptor closed is not taken for a leak, while one that something
    still holds (attached, pinned, or a process still alive) is. A program
    that was loaded in `before` and is gone now is not this test's: another
    one released it late (CI once saw an in-process Tracer's uretprobe
    program listed at the next test's start and gone at its end); the test
    that loaded it checks its own with this same function. A release slower
    than a poll is reported as a warning with its time."""
    import warnings
    t0 = time.monotonic()
    while True:
        left = bpftool_prog_ids() - before
        waited = time.monotonic() - t0
        if not left or waited >= settle_s:
            break
        time.sleep(0.05)
    if waited > 0.5 and not left:
        warnings.warn(f"BPF programs released {waited:.1f} s after their process or Tracer let them go")
    holders = program_holders() if left else {}
    return {(prog, name, _holders_of(prog, holders)) for prog, name in left}


def live_tracepoint_tables() -> tuple[dict[str, int], dict[str, int]]:
    """The running kernel's own facts, read here without nttrace: the
    __print_symbolic tables of mm_migrate_pages_start's format file, as
    ({mode name: value}, {reason label: value}). On a v2 kernel MIGRATE_SYNC
    is 3, on the others 2; the tests below take it from here, never from
    this host."""
    fmt = Path("/sys/kernel/tracing/events/migrate/mm_migrate_pages_start/format").read_text()
    tables = re.findall(r"__print_symbolic\(REC->(\w+),((?:\s*\{[^}]*\},?)+)\)", fmt)
    out = {}
    for field, body in tables:
        out[field] = {name: int(value, 0) for value, name in re.findall(r'\{\s*([-\dxa-fA-F]+)\s*,\s*"([^"]+)"\s*\}', body)}
    return out["mode"], out["reason"]


def live_nt_revision() -> str:
    """The NT demotion revision the running kernel's tracepoint table names."""
    from nttrace.kernel.metadata import NT_MODES
    modes, _reasons = live_tracepoint_tables()
    found = sorted(set(modes) & set(NT_MODES))
    return NT_MODES[found[0]] if found else "none"


def assert_excerpt(block: str, path: str, where: str) -> None:
    """An example shown in a document is an excerpt of a recorded output:
    its lines stand in the file at `path` in the same order ("..." marks what
    is left out)."""
    recorded = (REPO / path).read_text().splitlines()
    at = 0
    for line in block.splitlines():
        if line.strip() == "...":
            continue
        assert line in recorded[at:], f"{where}'s excerpt of {path}: {line!r} is not in it (in this order)"
        at = recorded.index(line, at) + 1
