# SPDX-License-Identifier: Apache-2.0
"""The migrate_fn probe: migrate_pages() timed at the function itself, by
fentry/fexit where the kernel's BPF trampoline takes it and by
kprobe/kretprobe otherwise (bpf/migrate.bpf.c, function mode). Whole-call
latency by (mode, reason), and a way in on kernels without the migrate
tracepoints. Page counts exist only at the tracepoint; here the return value
(pages not migrated, or -errno) is counted instead, and `succeeded` is null."""
from __future__ import annotations

from nttrace.probe_framework.base import Availability, attach_functions, kernel_function_attach
from nttrace.probe_framework.exercise import Exercise
from nttrace.probes.migrate import COMPACTION, MigrateProbe, migrate_metrics

SYMBOL = "migrate_pages"
MAX_REG_ARGS = 6  # x86-64 passes the first six in registers: PT_REGS_PARM1..6


class MigrateFunctionProbe(MigrateProbe):
    name = "migrate_fn"
    summary = "migrate_pages() timed at the function (fentry, or kprobe)"
    programs = ()     # no tracepoints: attach() puts it on the function
    functions = (SYMBOL,)
    metrics = migrate_metrics("nttrace_migrate_function", "function entry to return", pages=False)
    exercise = Exercise(COMPACTION.workload, COMPACTION.run, bench_round=COMPACTION.bench_round,
                        no_truth="the function boundary sees calls and what each returns (pages not migrated), "
                                 "and the kernel counts neither")

    @classmethod
    def options_for(cls, names: list[str], record: bool) -> dict:
        return {}   # function mode has no per-call records

    def params(self) -> list[str]:
        if self.meta.btf is None:
            raise KeyError("the kernel metadata was not read from BTF")
        return self.meta.btf.func_params(SYMBOL)

    def availability(self) -> Availability:
        try:
            params = self.params()
        except (KeyError, OSError) as exc:
            return Availability(False, f"no BTF prototype for {SYMBOL}: {exc}")
        for p in ("mode", "reason"):
            if p not in params[:MAX_REG_ARGS]:
                return Availability(False, f"{SYMBOL}() has no `{p}` among its first six parameters ({', '.join(params)})")
        return kernel_function_attach(self.caps, [SYMBOL])

    def defines(self) -> dict:
        params = self.params()
        d = {
            f"NTTRACE_VIA_{(self.via or 'kprobe').upper()}": 1,
            "NTTRACE_RECORD": 0,
            "NTTRACE_MODES": self.n_modes,
            "NTTRACE_REASONS": self.n_reasons,
            "NTTRACE_FN_PARAMS": ", ".join(f"u64 {p}" for p in params),
            "NTTRACE_FN_MODE": "mode",
            "NTTRACE_FN_REASON": "reason",
            "NTTRACE_FN_MODE_REG(ctx)": f"PT_REGS_PARM{params.index('mode') + 1}(ctx)",
            "NTTRACE_FN_REASON_REG(ctx)": f"PT_REGS_PARM{params.index('reason') + 1}(ctx)",
        }
        return d

    def emits_records(self) -> bool:
        return False  # function mode has no per-call records

    def attach(self) -> None:
        refused = attach_functions(self, [(SYMBOL, "nttrace_migrate_fn_entry", "nttrace_migrate_fn_return")])
        if refused:
            raise RuntimeError(refused[SYMBOL])

    def snapshot(self) -> dict:
        out = super().snapshot()
        for row in out["rows"]:
            row["succeeded"] = None  # not visible at the function boundary
            row["thp_succeeded"] = row["thp_failed"] = None
            row["not_migrated"] = row["failed"]
        return out
