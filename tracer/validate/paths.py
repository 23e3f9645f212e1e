# SPDX-License-Identifier: Apache-2.0
"""The two kernel paths nttrace is for, and what a validate run could say
of them: which it observed, and for each it did not, the one thing that was
missing. ZONE_DEVICE memmap init is observed by kernel.memmap_latency (a
namespace rebind); demotion by kernel.demotion_nt or probe.copy (a scratch
cgroup demoted to the lower tier). A path counts as observed where one of
its checks ran (any status but SKIP).

What was missing is read from the report alone (a recorded report says it
too), first that applies:
  1. an offline copy (--sysroot): only a live kernel runs the path
  2. the host lacks what the path needs (a pmem namespace, a lower memory
     tier): the capability report's words for it
  3. its first check ran and skipped: that check's reason (an option not
     given, a probe that cannot attach, ...)
  4. no check of it ran: the option that runs it

Also here: the contention note, where the report's own record of the host
(conditions) was not quiet while a check judged timings.
"""
from __future__ import annotations

from dataclasses import dataclass

from nttrace.validate.checks import SKIP, find


@dataclass(frozen=True)
class KernelPath:
    key: str             # the JSON's name for it
    title: str           # what it is, in words
    checks: tuple        # the checks that observe it, the one whose skip reason is given first
    capability: str      # the capability report's key for what the host needs
    lacking: str         # what the host lacks without it
    runs_it: str         # what runs its check


PATHS = (
    KernelPath("memmap_init", "memmap init (memmap_init_zone_device)", ("kernel.memmap_latency",), "pmem",
               "no pmem namespace", "--rebind NAMESPACE (kernel.memmap_latency, a slow check: not with --quick)"),
    KernelPath("demotion", "demotion (migrate_pages for MR_DEMOTION)", ("kernel.demotion_nt", "probe.copy"),
               "numa:tiers", "no lower memory tier",
               "--demote (kernel.demotion_nt, a slow check: not with --quick)"),
)


def observed(report: dict) -> list[dict]:
    """[{"path", "title", "observed", and "by" (the checks that observed it)
    or "missing" (the one thing missing)}] for each of PATHS."""
    by_id: dict[str, list[dict]] = {}
    for c in report.get("checks", []):
        by_id.setdefault(c["id"], []).append(c)
    out = []
    for p in PATHS:
        ran = sorted({c["id"] for cid in p.checks for c in by_id.get(cid, []) if c["status"] != SKIP})
        entry = {"path": p.key, "title": p.title, "observed": bool(ran)}
        if ran:
            entry["by"] = ran
        else:
            entry["missing"] = _missing(p, report, by_id)
        out.append(entry)
    return out


def _missing(p: KernelPath, report: dict, by_id: dict) -> str:
    if report.get("sysroot", "/") != "/":
        return f"an offline copy (--sysroot {report['sysroot']}): only a live kernel runs it"
    cap = (report.get("capabilities") or {}).get(p.capability)
    if cap and not cap.get("available"):
        return f"{p.lacking} ({cap.get('detail')})"
    skipped = [c for cid in p.checks for c in by_id.get(cid, [])]
    if skipped:
        return skipped[0]["summary"]
    return f"not run: {p.runs_it}"


def summary_lines(report: dict) -> list[str]:
    """The closing paragraph of validate's text: which paths the run
    observed, and for each it did not, what was missing."""
    paths = observed(report)
    seen = sum(p["observed"] for p in paths)
    lines = [f"Of the two paths nttrace is for, this run observed {('neither', 'one', 'both')[seen]}:"]
    for p in paths:
        lines.append(f"  {p['title']}: " + (f"observed by {', '.join(p['by'])}" if p["observed"]
                                             else f"not observed: {p['missing']}"))
    return lines


def contention_line(report: dict) -> str | None:
    """Where the host was not quiet while a check that judges timings ran
    (a verdict of its own, or its series' verdicts: a series too noisy to
    call included, which the load may explain): a line that says so, with
    the report's own record of why; else None."""
    c = report.get("conditions") or {}
    if c.get("state") not in ("busy", "contended"):
        return None
    timed = sorted({r["id"] for r in report.get("checks", [])
                    if (r["status"] != SKIP or r.get("series")) and (check := find(r["id"])) is not None
                    and check.timed})
    if not timed:
        return None
    return (f"The host was {c['state']} while the checks ran ({c.get('why', 'no reason recorded')}): the timings "
            f"behind {' and '.join(timed)} were taken on a loaded machine; run again on a quiet one before reading "
            "them as the kernel's or the CPU's.")
