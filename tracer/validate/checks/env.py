# SPDX-License-Identifier: Apache-2.0
"""env.*: the capability report as checks. What nttrace cannot work without
fails; what only some probes need skips with the reason."""
from __future__ import annotations

from nttrace.probes import PROBES
from nttrace.probes.migrate import DONE, START
from nttrace.validate.checks import FAIL, PASS, SKIP, CheckResult, check

ESSENTIAL = ("btf", "tracefs", *(f"tracepoint:{system}:{event}" for system, event in (START, DONE)), "bcc")
# the probes on kernel functions, which attach by fentry where it loads, else by kprobe
FUNCTION_PROBES = ", ".join(name for name, p in PROBES.items() if p.functions)
# {check: (capability, what needs it)}: each "what" reads after "needed for"
OPTIONAL = {
    "env.kprobe": ("kprobe", f"the probes on kernel functions ({FUNCTION_PROBES}) where fentry does not load"),
    "env.fentry": ("fentry", f"the probes on kernel functions ({FUNCTION_PROBES}) by fentry/fexit, which nttrace "
                             "prefers to kprobes"),
    "env.uprobe": ("uprobe", "timing the native reference with uprobes"),
    "env.page_ref": ("tracepoint:page_ref:page_ref_set", "telling the template path from the per-page one "
                                                         "(--page-ref)"),
    "env.perf_hardware": ("perf:hardware", "LLC misses, cycles and instructions (perf.llc)"),
    "env.perf_uncore": ("perf:uncore", "memory-device read/write traffic (perf.device_reads)"),
    "env.numa_tiers": ("numa:tiers", "demotion to a lower memory tier (kernel.demotion_nt, probe.copy)"),
    "env.pmem": ("pmem", "memmap init on a namespace rebind (kernel.memmap_latency)"),
}


@check("env.core", "BTF, tracefs, migrate tracepoints and a working bcc")
def core(ctx) -> CheckResult:
    # bcc can only be tried on the live host; a --sysroot copy is judged on the
    # files it holds: one it lacks cannot be judged (SKIP), never a fault of
    # the machine it was copied from
    keys = ESSENTIAL if ctx.sysroot.live else tuple(k for k in ESSENTIAL if k != "bcc")
    missing = {k: ctx.caps[k].detail for k in keys if not ctx.caps[k].available}
    evidence = {k: ctx.caps[k].as_json() for k in keys}
    if missing:
        found = "; ".join(f"{k}: {v}" for k, v in missing.items())
        if ctx.sysroot.live:
            return CheckResult("env.core", FAIL, found, evidence)
        return CheckResult("env.core", SKIP, f"cannot be judged from this copy: {found} (docs/validate.md, "
                                             "--sysroot: which files a copy needs)", evidence)
    what = "BTF, tracefs, migrate tracepoints and bcc" if ctx.sysroot.live else "BTF, tracefs and migrate tracepoints (files)"
    return CheckResult("env.core", PASS, f"{what} all usable", evidence)


@check("env.kernel_metadata", "enum values from BTF agree with the tracepoint symbol tables")
def kernel_metadata(ctx) -> CheckResult:
    meta = ctx.kernel
    ev = meta.as_json()
    if meta.crosscheck:
        return CheckResult("env.kernel_metadata", FAIL, "BTF and tracepoint tables disagree: " + "; ".join(meta.crosscheck), ev)
    how = f"cross-checked against {START[1]}" if meta.crosschecked else "no tracepoint to cross-check"
    return CheckResult(
        "env.kernel_metadata", PASS,
        f"{len(meta.migrate_mode)} migrate modes, {len(meta.migrate_reason)} reasons from {meta.source}; {how}", ev,
    )


def _optional(check_id: str, key: str, needed_for: str):
    @check(check_id, f"{key} ({needed_for})")
    def run(ctx) -> CheckResult:
        cap = ctx.caps[key]
        if cap.available:
            return CheckResult(check_id, PASS, f"{key}: {cap.detail}", cap.as_json())
        return CheckResult(check_id, SKIP, f"{key} unavailable: {cap.detail} (needed for {needed_for})", cap.as_json())
    return run


for _id, (_key, _why) in OPTIONAL.items():
    _optional(_id, _key, _why)
