# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate`: run the check catalog, print a table or JSON, compare
with a saved run (`--baseline`)."""
from __future__ import annotations

import platform
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from nttrace import __version__
from nttrace.errors import EXIT_CHECK_FAILED, EXIT_OK, CapabilityError, UsageError
from nttrace.kernel import boot_id
from nttrace.kernel import conditions, machine
from nttrace.kernel import metadata as kernel_meta
from nttrace.kernel.sysroot import Sysroot
from nttrace.capabilities import report as capabilities
from nttrace.validate import checks, paths
from nttrace.validate.checks import FAIL, SKIP, CheckResult


@dataclass
class ValidateOptions:
    rebind: str | None = None
    runs: int = 30
    demote: bool = False
    demote_mib: int = 256
    page_ref: bool = False
    quick: bool = False
    exercise: tuple[str, ...] = ()     # probes whose workload probe.<name> may run (it changes system state;
                                       # compaction's and memcg reclaim's run unasked)


@dataclass
class ValidateContext:
    sysroot: Sysroot
    caps: dict
    options: ValidateOptions = field(default_factory=ValidateOptions)

    @cached_property
    def kernel(self) -> kernel_meta.KernelMetadata:
        return kernel_meta.load(self.sysroot)


def run(sysroot: Sysroot, patterns: list[str] | None, options: ValidateOptions) -> dict:
    selected = checks.select(patterns, options.quick)     # UsageError: a pattern that selects nothing
    offline = not sysroot.live
    caps = capabilities.report(sysroot)
    if not offline:
        lacking = capabilities.missing_privilege(caps)
        if lacking:
            raise CapabilityError(f"nttrace validate: {lacking}")
    ctx = ValidateContext(sysroot, caps, options)
    kernel = ctx.kernel  # raises UsageError on an unreadable BTF
    results = []
    # what else ran on this machine while the checks did (offline: nothing measured)
    window = conditions.Monitor() if not offline else nullcontext()
    with window:
        for c in selected:
            if offline and not c.id.startswith(("env.", "kernel.nt_support")):
                results.append(CheckResult(c.id, checks.SKIP,
                                           f"needs the live kernel; --sysroot {sysroot.root} is offline"))
                continue
            results.append(run_one(c, ctx))
    report = {
        "version": __version__,
        "sysroot": str(sysroot.root),
        "kernel_release": platform.release() if sysroot.live else None,
        # the boot this ran in: several reports with one boot_id are one run of an A/B
        **({"boot_id": boot_id()} if sysroot.live else {}),
        "machine": machine.describe(Path(sysroot.root)),
        **({"conditions": window.as_json()} if not offline else {}),
        "capabilities": {k: v.as_json() for k, v in caps.items()},
        "kernel": kernel.as_json(),
        "checks": [r.as_json() for r in results],
        "summary": checks.tally([r.as_json() for r in results]),
    }
    report["paths"] = paths.observed(report)
    return report


def run_one(c, ctx) -> CheckResult:
    """One check, isolated from the others: a check whose probe cannot attach
    is skipped with the reason (the capability it lacks), one that breaks
    fails with what it raised, and neither stops the run. Only bad input
    (UsageError: e.g. --rebind naming no namespace) ends the run."""
    try:
        return c.run(ctx)
    except UsageError:
        raise
    except CapabilityError as exc:
        return CheckResult(c.id, SKIP, f"cannot run here: {exc}", {"capability_error": str(exc)})
    except Exception as exc:  # a check that breaks fails, and says why
        return CheckResult(c.id, FAIL, f"check raised {exc.__class__.__name__}: {exc}",
                           {"exception": exc.__class__.__name__})


def exit_code(report: dict) -> int:
    failed = any(isinstance(c, dict) and c.get("status") == "fail" for c in report["checks"])
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def where(report: dict) -> str:
    """Where the report's figures come from: the machine it measured, or,
    offline, what the copy under --sysroot says of its machine."""
    m = report.get("machine") or {}
    kind = m.get("kind", "unrecorded") + (f" ({m['hypervisor']})" if m.get("hypervisor") else "")
    if report.get("sysroot", "/") == "/":
        return f"measured on {kind}"
    if m.get("kind") == "unknown":
        return f"offline: a copy under {report['sysroot']} that does not say what machine"
    return f"offline: a copy under {report['sysroot']} of a {kind} machine"


def print_table(report: dict, out=sys.stdout) -> None:
    k = report["kernel"]
    print(f"nttrace {report['version']}  kernel metadata from {k['source']}, NT demotion revision: {k['nt_revision']}"
          f"  ({where(report)})", file=out)
    width = max((len(c["id"]) for c in report["checks"]), default=10)
    for c in report["checks"]:
        for status, summary in _lines(c):
            print(f"{status.upper():5} {c['id']:<{width}}  {summary}", file=out)
    s = report["summary"]
    print(f"{s['pass']} passed, {s['fail']} failed, {s['warn']} warned, {s['skip']} skipped", file=out)
    for line in _closing(report):
        print(line, file=out)


def _closing(report: dict) -> list[str]:
    """What the run could say of the paths nttrace is for, and of the host
    its timings were taken on (nttrace.validate.paths)."""
    contention = paths.contention_line(report)
    return ["", *paths.summary_lines(report), *(["", contention] if contention else [])]


def print_markdown(report: dict, out=sys.stdout) -> None:
    k = report["kernel"]
    m = report.get("machine") or {}
    measured = f"measured on {m.get('kind', 'unrecorded')}" if report.get("sysroot", "/") == "/" else where(report)
    print(f"_nttrace {report['version']}, kernel {report.get('kernel_release') or '?'}, NT demotion revision "
          f"{k['nt_revision']}, {measured}_\n", file=out)
    print("| status | check | summary |\n|---|---|---|", file=out)
    for c in report["checks"]:
        for status, summary in _lines(c):
            print(f"| {status.upper()} | {c['id']} | {summary.replace('|', chr(92) + '|')} |", file=out)
    for line in _closing(report):
        print(line.replace("  ", "- ", 1) if line.startswith("  ") else line, file=out)


def _lines(c: dict) -> list[tuple[str, str]]:
    """A check's printed lines: one, or one per series it judges (each with
    that series' status and reason)."""
    if c.get("series"):
        return [(v["status"], f"{v['title']}: {v['summary']}") for v in c["series"]]
    return [(c["status"], c["summary"])]


def print_list(out=sys.stdout) -> None:
    for c in checks.catalog():
        flags = ("quick" if c.quick else "slow") + (f", changes system state: {c.triggers}" if c.triggers else "")
        print(f"{c.id:<26} {c.title} [{flags}]", file=out)
