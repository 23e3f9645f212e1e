# SPDX-License-Identifier: Apache-2.0
"""The probes nttrace knows. Each lives in its own module beside its BPF C in
bpf/ and declares what it needs and what it shows (nttrace.probe_framework.contract);
the Tracer, `trace`, `validate`, the capability report and the exporter read
those declarations, and tools/probe_docs.py writes the docs' probe tables
from them. Adding a probe is its BPF C, its module, its live test and one
line in REGISTERED below (docs/probes.md: "Adding a probe")."""
from importlib import import_module

from nttrace.errors import UsageError

# One line a probe: its module in this package and its class, in the order
# `trace` prints them and validate's catalog lists their checks.
REGISTERED = (
    "migrate.MigrateProbe",
    "migrate_fn.MigrateFunctionProbe",
    "memmap.MemmapProbe",
    "page_ref.PageRefProbe",
    "copy.CopyProbe",
    "reclaim.ReclaimProbe",
    "memremap.MemremapProbe",
)


def _probe_class(entry: str):
    module, cls = entry.rsplit(".", 1)
    return getattr(import_module(f"{__name__}.{module}"), cls)


PROBES = {p.name: p for p in map(_probe_class, REGISTERED)}
# what `nttrace trace` and the daemon attach when not told
DEFAULT = ("migrate",)
# what watches a demotion: its migrations, the reclaim it runs in, the copies it makes
DEMOTION_WATCH = tuple(PROBES[name] for name in ("migrate", "reclaim", "copy"))


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
