"""kernel.*: what the live kernel does on the NT paths."""
from __future__ import annotations

from nttrace.checks import PASS, WARN, CheckResult, check
from nttrace.kernel_meta import NT_MODES


@check("kernel.nt_support", "which NT demotion revision the kernel's enums carry")
def nt_support(ctx) -> CheckResult:
    meta = ctx.kernel
    rev = meta.nt_revision
    ev = {"nt_revision": rev, "migrate_mode": meta.migrate_mode, "source": meta.source}
    if rev == "none":
        return CheckResult("kernel.nt_support", PASS,
                           "no NT migrate mode in enum migrate_mode: demotion copies are cached on this kernel", ev)
    name = next(n for n in NT_MODES if n in meta.migrate_mode)
    return CheckResult("kernel.nt_support", PASS, f"RFC {rev}: {name} = {meta.migrate_mode[name]}", ev)
