# SPDX-License-Identifier: Apache-2.0
"""Which checks a loop's boot must measure, and whether a boot did.

The loop's A/B rests on each scenario's primary figure. The checks that
carry one (their evidence has a primary figure: kernel.memmap_latency,
kernel.demotion_nt, probe.<name>) and that the loop's validate options ask
to do their work (--rebind, --demote, --exercise NAME; the probes whose
workload runs unasked always) are the loop's measured checks. A boot is a
run only when every measured check gave its primary figure there; a boot
where any of them skipped or gave none is a failed measurement naming which
and why. So a patched kernel whose headers were removed (bcc has nothing to
compile the probe against: the check skips) or whose namespace is missing
never counts as a run because some other check (env.kernel_metadata's
offsets, native.*'s copies) gave figures on that boot.

A loop whose options leave no measured check is refused by `ab start`:
every boot would measure nothing the A/B tests.
"""
from __future__ import annotations

from nttrace.validate import checks as catalog


def validate_args(check: list[str] | None, quick: bool, rebind: str | None, runs: int, demote: bool,
                  exercise: str) -> list[str]:
    """The loop's validate options, as validate's own flags."""
    out = []
    for pat in check or []:
        out += ["--check", pat]
    if quick:
        out.append("--quick")
    if rebind:
        out += ["--rebind", rebind, "--runs", str(runs)]
    if demote:
        out.append("--demote")
    if exercise:
        out += ["--exercise", exercise]
    return out


def _options(args: list[str]) -> dict:
    """validate_args() read back: {"check": [...], "quick", "rebind", "demote", "exercise"}."""
    out = {"check": [], "quick": False, "rebind": None, "demote": False, "exercise": ()}
    it = iter(args)
    for word in it:
        if word == "--check":
            out["check"].append(next(it, ""))
        elif word == "--quick":
            out["quick"] = True
        elif word == "--rebind":
            out["rebind"] = next(it, None)
        elif word == "--demote":
            out["demote"] = True
        elif word == "--exercise":
            out["exercise"] = tuple(n for n in next(it, "").split(",") if n)
        elif word == "--runs":
            next(it, None)
    return out


def measured_checks(args: list[str]) -> list[str]:
    """The ids of the checks a boot must give a primary figure of, for the
    loop's validate options `args` (as validate_args() writes them)."""
    o = _options(args)
    return [c.id for c in catalog.select(o["check"] or None, o["quick"])
            if c.measures() and c.asked(o["rebind"], o["demote"], o["exercise"])]


OPTION_OF = {"rebind": "--rebind NAMESPACE", "demote": "--demote", "exercise": "--exercise {name}"}


def not_asked(args: list[str]) -> list[str]:
    """The selected checks that would measure but are not asked to work, each
    with the option it needs: "kernel.memmap_latency (--rebind NAMESPACE)"."""
    o = _options(args)
    return [f"{c.id} ({OPTION_OF[c.asks].format(name=c.id.split('.', 1)[1])})"
            for c in catalog.select(o["check"] or None, o["quick"])
            if c.measures() and not c.asked(o["rebind"], o["demote"], o["exercise"]) and c.asks in OPTION_OF]


def unmeasured(run: dict, measured: list[str]) -> str | None:
    """Why a validate report is not a run of the loop, or None: a measured
    check it lacks, one that skipped or one that gave no primary figure."""
    from nttrace.validate import evidence
    by_id = {c["id"]: c for c in run.get("checks") or [] if isinstance(c, dict) and "id" in c}
    if not by_id:
        return "validate ran no check"
    missing = []
    for cid in measured:
        c = by_id.get(cid)
        if c is None:
            missing.append(f"{cid} is not in validate's report")
            continue
        summary = c.get("summary") or "no reason given"
        if c.get("status") == catalog.SKIP:
            missing.append(f"{cid} skipped: {summary}")
            continue
        try:
            figures = evidence.of(c).figures()
        except Exception:       # evidence this nttrace cannot read: no figure
            figures = []
        if not any(f.role == "primary" and f.value is not None for f in figures):
            missing.append(f"{cid} ({c.get('status')}) gave no primary figure: {summary}")
    if not missing:
        return None
    if len(missing) == len(measured):
        head = "its one measured check gave no figure" if len(measured) == 1 else \
            f"none of its {len(measured)} measured checks gave a figure"
    else:
        head = f"{len(missing)} of its {len(measured)} measured checks gave no figure"
    return f"{head} ({'; '.join(missing)})"
