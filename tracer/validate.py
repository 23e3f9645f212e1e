"""`nttrace validate`: run the check catalog, print a table or JSON, compare
with a saved run (`--baseline`)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cached_property

from nttrace import __version__, capabilities, checks, kernel_meta
from nttrace.checks import FAIL, CheckResult
from nttrace.errors import EXIT_CHECK_FAILED, EXIT_OK, CapabilityError, UsageError
from nttrace.sysroot import Sysroot


@dataclass
class ValidateOptions:
    rebind: str | None = None
    runs: int = 30
    demote: bool = False
    demote_mib: int = 256
    page_ref: bool = False
    quick: bool = False


@dataclass
class ValidateContext:
    sysroot: Sysroot
    caps: dict
    options: ValidateOptions = field(default_factory=ValidateOptions)
    shared: dict = field(default_factory=dict)  # results one check hands another

    @cached_property
    def kernel(self) -> kernel_meta.KernelMetadata:
        return kernel_meta.load(self.sysroot)


def run(sysroot: Sysroot, patterns: list[str] | None, options: ValidateOptions) -> dict:
    selected = checks.select(patterns, options.quick)
    if patterns and not selected:
        raise UsageError(f"--check {','.join(patterns)} matches no check (see `nttrace validate --list`)")
    offline = not sysroot.live
    caps = capabilities.report(sysroot)
    if not offline:
        lacking = capabilities.missing_privilege(caps)
        if lacking:
            raise CapabilityError(f"nttrace validate: {lacking}")
    ctx = ValidateContext(sysroot, caps, options)
    kernel = ctx.kernel  # raises UsageError on an unreadable BTF
    results = []
    for c in selected:
        if offline and not c.id.startswith(("env.", "kernel.nt_support")):
            results.append(CheckResult(c.id, checks.SKIP, f"needs the live kernel; --sysroot {sysroot.root} is offline"))
            continue
        try:
            results.append(c.run(ctx))
        except (UsageError, CapabilityError):
            raise
        except Exception as exc:  # a check that breaks fails, and says why
            results.append(CheckResult(c.id, FAIL, f"check raised {exc.__class__.__name__}: {exc}"))
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "warn", "skip")}
    return {
        "version": __version__,
        "sysroot": str(sysroot.root),
        "capabilities": {k: v.as_json() for k, v in caps.items()},
        "kernel": kernel.as_json(),
        "checks": [r.as_json() for r in results],
        "summary": counts,
    }


def exit_code(report: dict) -> int:
    failed = any(isinstance(c, dict) and c.get("status") == "fail" for c in report["checks"])
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def print_table(report: dict, out=sys.stdout) -> None:
    k = report["kernel"]
    print(f"nttrace {report['version']}  kernel metadata from {k['source']}, NT demotion revision: {k['nt_revision']}", file=out)
    width = max((len(c["id"]) for c in report["checks"]), default=10)
    for c in report["checks"]:
        print(f"{c['status'].upper():5} {c['id']:<{width}}  {c['summary']}", file=out)
    s = report["summary"]
    print(f"{s['pass']} passed, {s['fail']} failed, {s['warn']} warned, {s['skip']} skipped", file=out)


def print_list(out=sys.stdout) -> None:
    checks._load_families()
    for c in checks.CATALOG:
        flags = ("quick" if c.quick else "slow") + (f", changes system state: {c.triggers}" if c.triggers else "")
        print(f"{c.id:<26} {c.title} [{flags}]", file=out)


# -- baseline comparison ----------------------------------------------------
def load_report(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise UsageError(f"--baseline {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--baseline {path}: not valid JSON ({exc.msg} at line {exc.lineno}); truncated?") from None
    if not (isinstance(data, dict) and isinstance(data.get("checks"), list) and "version" in data):
        raise UsageError(f"--baseline {path}: not an `nttrace validate --json` report")
    return data


def _numbers(evidence, prefix=""):
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            yield from _numbers(value, f"{prefix}{key}.")
    elif isinstance(evidence, (int, float)) and not isinstance(evidence, bool):
        yield prefix.rstrip("."), float(evidence)


def compare(baseline: dict, current: dict) -> list[dict]:
    """Per-check, per-number deltas in percent, for numbers present in both."""
    base = {c["id"]: c for c in baseline["checks"] if isinstance(c, dict) and "id" in c}
    rows = []
    for c in current["checks"]:
        b = base.get(c["id"])
        if b is None:
            continue
        old = dict(_numbers(b.get("evidence", {})))
        for key, new_value in _numbers(c.get("evidence", {})):
            if key in old:
                old_value = old[key]
                pct = None if old_value == 0 else 100.0 * (new_value - old_value) / abs(old_value)
                rows.append({"check": c["id"], "metric": key, "baseline": old_value, "current": new_value,
                             "delta_pct": pct, "status": f"{b.get('status')}->{c['status']}"})
    return rows


def print_comparison(rows: list[dict], out=sys.stdout) -> None:
    print(f"{'check':<24} {'metric':<36} {'baseline':>14} {'current':>14} {'delta':>9}", file=out)
    for r in rows:
        d = "n/a" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%"
        print(f"{r['check']:<24} {r['metric']:<36} {r['baseline']:>14.6g} {r['current']:>14.6g} {d:>9}", file=out)
