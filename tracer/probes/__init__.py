"""One module per probe: migrate (tracepoints), migrate_fn (fentry/kprobe on
migrate_pages), memmap (fentry/kprobe on memmap_init_zone_device, or with
target="native" a uprobe on the native reference's memmap model), page_ref
(page_ref:page_ref_set), copy (fentry/kprobe on the kernel's folio and page
copy routines)."""
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.migrate_fn import MigrateFunctionProbe
from nttrace.probes.page_ref import PageRefProbe

PROBES = {p.name: p for p in (MigrateProbe, MigrateFunctionProbe, MemmapProbe, PageRefProbe, CopyProbe)}
