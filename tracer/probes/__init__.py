# SPDX-License-Identifier: Apache-2.0
"""The probes nttrace knows. Each lives in its own module beside its BPF C in
bpf/ and declares what it needs and what it shows (nttrace.probes.contract);
the Tracer, `trace`, `validate`, the capability report and the exporter read
those declarations. Adding a probe is its BPF C, its module, its test and one
line in PROBES below (README: "Adding a probe")."""
from nttrace.errors import UsageError
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
from nttrace.probes.memremap import MemremapProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.migrate_fn import MigrateFunctionProbe
from nttrace.probes.page_ref import PageRefProbe
from nttrace.probes.reclaim import ReclaimProbe

PROBES = {p.name: p for p in (MigrateProbe, MigrateFunctionProbe, MemmapProbe, PageRefProbe, CopyProbe, ReclaimProbe,
                              MemremapProbe)}
# what `nttrace trace` and the daemon attach when not told
DEFAULT = (MigrateProbe.name,)
# what watches a demotion: its migrations, the reclaim it runs in, the copies it makes
DEMOTION_WATCH = (MigrateProbe, ReclaimProbe, CopyProbe)


def demotion_probes(caps) -> list[str]:
    """DEMOTION_WATCH's names, less the probes of kernel functions where
    neither fentry nor kprobes can attach."""
    functions_attach = caps["kprobe"].available or caps["fentry"].available
    return [p.name for p in DEMOTION_WATCH if functions_attach or not p.functions]


def check_names(names: list[str]) -> None:
    """A UsageError naming each unknown probe name, or an empty selection."""
    unknown = [p for p in names if p not in PROBES]
    if unknown:
        raise UsageError(f"unknown probe {', '.join(unknown)} (choose from {', '.join(PROBES)})")
    if not names:
        raise UsageError("no probes selected")
