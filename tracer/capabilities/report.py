# SPDX-License-Identifier: Apache-2.0
"""What the running kernel lets nttrace observe, each fact found by looking
(a file, a symbol) or by trying (compiling a BPF program, opening a perf
event), with the reason when it is missing."""
from __future__ import annotations

import os
import platform
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nttrace.kernel.sysroot import TRACEFS_CANDIDATES, Sysroot
from nttrace.perf import event_open as pe
from nttrace.perf import memory_traffic
from nttrace.probe_framework.base import fd_pointed_at

LINUX_CAPS = {"cap:sys_admin": 21, "cap:perfmon": 38, "cap:bpf": 39}
LIVE_ONLY = "live-only probe; not evaluated for --sysroot"


@dataclass
class Capability:
    available: bool
    detail: str

    def as_json(self) -> dict:
        return {"available": self.available, "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict) -> "Capability":
        return cls(d["available"], d["detail"])


def _have(ok: bool, yes: str, no: str) -> Capability:
    return Capability(ok, yes if ok else no)


def effective_caps(status_text: str) -> int:
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status_text, re.M)
    return int(m.group(1), 16) if m else 0


def kallsyms_has(path: Path, wanted) -> set[str]:
    """Which of `wanted` kallsyms lists ("ADDR TYPE NAME[\t[MODULE]]" lines):
    a substring search for each, the name ending its line or followed by its
    module. Splitting the ~120,000 lines in Python instead cost 0.3 s on the
    host and seconds under the lab's TCG."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return set()
    return {w for w in wanted if f" {w}\n" in text or f" {w}\t" in text or text.endswith(f" {w}")}


def _try_bpf(text: bytes) -> str | None:
    """None when bcc compiles and loads `text`, else why it did not."""
    try:
        from nttrace.probe_framework.base import load_bpf  # imports bcc, which loads LLVM
        with _quiet_stderr():
            load_bpf(text).cleanup()
    except ImportError as exc:
        return f"python3-bpfcc not importable: {exc}"
    except Exception as exc:  # bcc raises bare Exception
        return str(exc)
    return None


COMPILE_TEST = b"int nttrace_probe_compile(void *ctx) { return 0; }"
FENTRY_TEST = b"KFUNC_PROBE(vfs_read) { return 0; }"
BCC_WORKS = "bcc compiled and loaded a test program"


def bcc_compiles() -> Capability:
    why = _try_bpf(COMPILE_TEST)
    if why is None:
        return Capability(True, BCC_WORKS)
    build = Path(f"/lib/modules/{os.uname().release}/build")
    try:
        hint = "" if build.exists() else (f"; {build} missing: install the running kernel's headers (Debian: "
                                          f"linux-headers-{os.uname().release}; in a checkout: `make kernel-headers`)")
    except OSError as exc:   # EACCES: a sandbox hides it (systemd's ProtectKernelModules=yes does)
        hint = f"; {build}: {exc.strerror} (is /lib/modules hidden by a sandbox, e.g. ProtectKernelModules=yes?)"
    return Capability(False, f"bcc cannot compile a program: {why}{hint}")


TRAMPOLINE = "bpf_trampoline_link_prog"   # in kallsyms where fentry has trampolines (bcc's own test)


def no_trampolines(trampoline_in_kallsyms: bool, btf: bool) -> str | None:
    """Why the kernel has no BPF trampolines for fentry, or None if it has:
    bcc's BPF.support_kfunc() rule, on the kallsyms the report reads anyway
    (support_kfunc() has bcc load every kernel symbol for this one name:
    0.2-0.5 s on the host)."""
    if platform.machine() != "x86_64":
        return f"no BPF trampolines for fentry on {platform.machine()} (bcc attaches fentry on x86-64 only)"
    if not btf:
        return "no kernel BTF, which fentry programs are loaded against"
    if not trampoline_in_kallsyms:
        return f"kernel lacks BPF trampolines ({TRAMPOLINE} not in kallsyms)"
    return None


def _fentry_refused(why: str) -> Capability:
    if "super-user" in why and os.geteuid() == 0:
        # bcc words every EPERM this way, even for root.
        why = "the kernel refused it with EPERM although nttrace runs as root (lockdown, LSM or a hypervisor policy)"
    return Capability(False, f"the kernel has BPF trampolines but loading an fentry program failed: {why}")


def bcc_and_fentry(no_trampolines: str | None) -> tuple[Capability, Capability]:
    """(bcc, fentry); `no_trampolines` from no_trampolines(). The trampoline
    symbol is not enough: fentry is known only by loading a real fentry
    program (some hosts refuse it with EPERM). Where there are trampolines,
    one program holds both tests: that it compiles answers for bcc, that its
    fentry function loads answers for fentry. Each compile costs ~0.5 s on
    the host and ~10 s under the lab's TCG, and every validate, trace and
    daemon start asks. Only a failed compile is looked at again, with the
    plain test alone, to say which of the two failed."""
    if no_trampolines is not None:
        return bcc_compiles(), Capability(False, no_trampolines)
    why = _try_bpf(COMPILE_TEST + b"\n" + FENTRY_TEST)
    if why is None:
        return Capability(True, BCC_WORKS), Capability(True, "fentry program on vfs_read loaded")
    if not why.startswith("Failed to compile"):   # compiled; the fentry program did not load or attach
        return Capability(True, BCC_WORKS), _fentry_refused(why)
    bcc = bcc_compiles()
    if not bcc.available:
        return bcc, Capability(False, f"no fentry test: {bcc.detail}")
    return bcc, _fentry_refused(why)


@contextmanager
def _quiet_stderr():
    """bcc's compiler writes diagnostics straight to fd 2; keep probes quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with fd_pointed_at(2, devnull):
            yield
    finally:
        os.close(devnull)


def uncore_pmus(sysroot: Sysroot) -> list[str]:
    devices = sysroot.path("sys/bus/event_source/devices")
    try:
        return sorted(p.name for p in devices.iterdir() if memory_traffic.is_memory_pmu(p.name))
    except OSError:
        return []


def node_count(node_list: str) -> int:
    """How many nodes a kernel node list names ("0", "0-1,3": 3)."""
    count = 0
    for part in filter(None, node_list.strip().split(",")):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def _counted(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def numa_tiers(sysroot: Sysroot) -> Capability:
    """A lower memory tier to demote to: at least two memory tiers."""
    nodes_online = sysroot.path("sys/devices/system/node/online")
    tiers_dir = sysroot.path("sys/devices/virtual/memory_tiering")
    demotion = sysroot.path("sys/kernel/mm/numa/demotion_enabled")
    if not sysroot.live and not (nodes_online.exists() or tiers_dir.is_dir()):
        return Capability(False, sysroot.lacks("", "sys/devices/system/node/online",
                                               "sys/devices/virtual/memory_tiering"))
    online = nodes_online.read_text().strip() if nodes_online.exists() else None
    tiers = sorted(p.name for p in tiers_dir.glob("memory_tier*")) if tiers_dir.is_dir() else []
    dem = demotion.read_text().strip() if demotion.exists() else "absent"
    nodes = (f"{_counted(node_count(online), 'NUMA node')} online ({online})" if online is not None
             else f"no {nodes_online}")
    held = f"{_counted(len(tiers), 'memory tier')} ({', '.join(tiers)})" if tiers else "no memory tiers"
    lower = "" if len(tiers) > 1 else ": no lower tier to demote to"
    return Capability(len(tiers) > 1, f"{nodes}; {held}{lower}; demotion_enabled={dem}")


def pmem(sysroot: Sysroot) -> Capability:
    nd = sysroot.path("sys/bus/nd/devices")
    if not nd.is_dir():
        return Capability(False, sysroot.lacks("no /sys/bus/nd (libnvdimm not loaded or no NVDIMM)",
                                               "sys/bus/nd/devices"))
    namespaces = sorted(p.name for p in nd.iterdir() if p.name.startswith("namespace"))
    return _have(bool(namespaces), f"namespaces: {', '.join(namespaces)}", "libnvdimm present, no namespaces")


def declared_needs() -> tuple[list[tuple[str, str]], list[str]]:
    """The tracepoints and kernel functions the probes declare (in their
    modules), each once: what the report looks for."""
    from nttrace.probes import PROBES
    tracepoints = dict.fromkeys(tp for p in PROBES.values() for tp in p.tracepoints)
    functions = dict.fromkeys(f for p in PROBES.values() for f in p.functions)
    return list(tracepoints), list(functions)


def report(sysroot: Sysroot | None = None, live_probes: bool = True) -> dict[str, Capability]:
    """The capability report, keyed as in `nttrace validate --json`."""
    sysroot = sysroot or Sysroot("/")
    live = sysroot.live and live_probes
    caps: dict[str, Capability] = {}
    btf = sysroot.btf_path()
    caps["btf"] = _have(btf.exists(), f"{btf}", sysroot.lacks(
        f"{btf} missing (kernel built without CONFIG_DEBUG_INFO_BTF)", "sys/kernel/btf/vmlinux"))
    tracefs = sysroot.tracefs()
    caps["tracefs"] = _have(tracefs is not None, f"mounted at {tracefs}", sysroot.tracefs_problem())
    tracefs_in_copy = tracefs.relative_to(sysroot.root) if tracefs else TRACEFS_CANDIDATES[0]
    tracepoints, functions = declared_needs()
    for system, event in tracepoints:
        fmt = tracefs / "events" / system / event / "format" if tracefs else None
        caps[f"tracepoint:{system}:{event}"] = _have(
            bool(fmt and fmt.exists()), "format present", sysroot.lacks(
                f"no tracepoint {system}:{event} in this kernel", f"{tracefs_in_copy}/events/{system}/{event}/format"))
    devices = sysroot.path("sys/bus/event_source/devices")
    for kind in ("kprobe", "uprobe"):
        pmu = devices / kind
        events = tracefs / f"{kind}_events" if tracefs else None
        caps[kind] = _have(
            pmu.exists() or bool(events and events.exists()),
            f"{kind} PMU or {kind}_events present",
            sysroot.lacks(f"no {kind} PMU in {devices} and no {kind}_events in tracefs (kernel built without "
                          f"CONFIG_{kind.upper()}_EVENTS)",
                          f"sys/bus/event_source/devices/{kind}", f"{tracefs_in_copy}/{kind}_events"),
        )
    kallsyms = sysroot.kallsyms()
    syms = kallsyms_has(kallsyms, [*functions, TRAMPOLINE])
    bcc, fentry = (bcc_and_fentry(no_trampolines(TRAMPOLINE in syms, caps["btf"].available)) if live
                   else (Capability(False, LIVE_ONLY),) * 2)
    caps["fentry"], caps["bcc"] = fentry, bcc
    for sym in functions:
        caps[f"ksym:{sym}"] = _have(sym in syms, "in kallsyms", "not in kallsyms" if kallsyms.exists()
                                    else sysroot.lacks(f"{kallsyms} unreadable", "proc/kallsyms"))
    if live:
        sw = pe.probe(pe.EventSpec("task-clock", pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_TASK_CLOCK))
        hw = pe.probe(pe.EventSpec("cycles", pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_CPU_CYCLES))
        caps["perf:software"] = _have(sw is None, "task-clock opens", sw or "")
        caps["perf:hardware"] = _have(hw is None, "cycles opens", hw or "")
    else:
        caps["perf:software"] = caps["perf:hardware"] = Capability(False, LIVE_ONLY)
    uncore = uncore_pmus(sysroot)
    caps["perf:uncore"] = _have(bool(uncore), f"PMUs: {', '.join(uncore)}", f"no uncore/CXL PMU in {devices}"
                                if devices.is_dir() else sysroot.lacks(f"no {devices}",
                                                                       "sys/bus/event_source/devices"))
    caps["numa:tiers"] = numa_tiers(sysroot)
    caps["pmem"] = pmem(sysroot)
    if sysroot.live:
        eff = effective_caps(Path("/proc/self/status").read_text())
        for key, bit in LINUX_CAPS.items():
            caps[key] = _have(bool(eff & (1 << bit)), "in the effective set", "not in the effective set")
    else:
        for key in LINUX_CAPS:
            caps[key] = Capability(False, LIVE_ONLY)
    return caps


def perf_paranoid_hint(caps: dict[str, Capability] | None = None) -> str:
    """Why perf_event_open may be refused although CAP_PERFMON is held: Debian
    and Ubuntu kernels add kernel.perf_event_paranoid=3, at which their
    kernels demand CAP_SYS_ADMIN for every perf event (tracepoint
    attachments included). Empty when that is not the case here."""
    try:
        level = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        return ""
    if level <= 2:
        return ""
    if caps is not None and caps.get("cap:sys_admin") and caps["cap:sys_admin"].available:
        return ""
    return (f"kernel.perf_event_paranoid is {level}: this kernel's perf_event_open refuses everything without "
            "CAP_SYS_ADMIN at 3 or more (a Debian/Ubuntu hardening); set it to 2 "
            "(sysctl -w kernel.perf_event_paranoid=2, or a file in /etc/sysctl.d) to run with CAP_BPF and CAP_PERFMON")


def missing_privilege(caps: dict[str, Capability]) -> str | None:
    """Name what is missing for loading BPF and opening perf events, or None."""
    if caps["cap:sys_admin"].available:
        return None
    lacking = [k.split(":")[1].upper() for k in ("cap:bpf", "cap:perfmon") if not caps[k].available]
    if lacking:
        return "missing CAP_" + " and CAP_".join(lacking) + " (or CAP_SYS_ADMIN): run as root"
    return None
