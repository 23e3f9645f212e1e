# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab status NAME`: where the loop is (boot k of N, the kernel now,
the failed boots and failed measurements with who is blamed, the runs cut
short, a state recovered from its copy or rebuilt, the reset the loop
relies on, the kernels' config differences, the time left at the pace of
the boots so far)."""
from __future__ import annotations

import json
import sys
import time

from nttrace.ab import kernels, schedule, unit
from nttrace.kernel import boot_id
from nttrace.ab.loop import Loop, slot_state, why_failed

CONFIG_LINES = 12      # config differences shown by status; the report lists all


def status(loop: Loop, running: kernels.Running | None = None, this_boot: str | None = None) -> dict:
    sched, st = loop.schedule(), loop.state()
    slots = schedule.from_json(sched["slots"])
    runs = loop.runs()
    running = running or kernels.Running.now()
    settled = [s for s in slots if slot_state(st, s.slot)["outcome"] is not None]
    pending = [s for s in slots if slot_state(st, s.slot)["outcome"] is None]
    # validate running in this boot (a record of an earlier boot is a run cut short: redone next)
    measuring = st.get("measuring") if st["state"] == "running" else None
    if measuring and measuring.get("boot_id") != (this_boot or boot_id()):
        measuring = None
    if measuring:
        pending = [s for s in pending if s.slot != measuring["slot"]]
    nxt = pending[0] if pending and st["state"] == "running" else None
    booting = st.get("booting") or {}
    failures = [{"slot": s.slot, "side": s.side, **f} for s in slots for f in slot_state(st, s.slot)["failures"]]
    # pace: from the start to the last slot settled, over the slots settled
    last = max((slot_state(st, s.slot)["stored_at"] or 0 for s in settled), default=0) or \
        max((e["at"] for e in st.get("events", [])), default=0)
    eta = None
    if settled and last and st["state"] == "running":
        eta = round((last - sched["created"]) / len(settled) * (len(pending) + bool(measuring)))
    labels = schedule.sides(sched)
    current = next((side for side in labels if kernels.is_running(sched["kernels"][side], running)), None)
    recoveries = list(st.get("recoveries") or []) + ([st["recovered_now"]] if st.get("recovered_now") else [])
    cut = (st.get("measuring") or {}) if st["state"] == "running" else {}
    state, why = st["state"], st.get("why")
    installed = unit.installed(loop.name)
    if state == "running" and not installed:
        # the units go with every end of a loop; a state that still says running
        # was not saved at that end (a full disk): the journal has why
        state = "ended"
        why = (f"its units are gone but its state says running: it ended without saving its state (a full disk?); "
               f"`journalctl -u {unit.unit_name(loop.name)}` says why; `nttrace ab stop {loop.name}` records the end")
        nxt = None
        measuring = None
    return {"name": loop.name, "state": state, "why": why, "done": len(runs),
            "settled": len(settled), "total": len(slots), "boot": booting.get("slot"), "attempt": booting.get("attempt"),
            "measuring": ({"slot": measuring["slot"], "since": measuring["at"]} if measuring else None),
            "next": ({"slot": nxt.slot, "side": nxt.side, "release": sched["kernels"][nxt.side]["release"]}
                     if nxt else None),
            "running_kernel": {"release": running.release, "is": current},
            "failures": failures, "consecutive_failures": st.get("consecutive_failures", 0),
            "runs_redone": len(st.get("interrupted", [])),
            "runs_redone_shutdown": sum(1 for c in st.get("interrupted", []) if c.get("by") == "shutdown"),
            "cut_pending": ({"slot": cut["slot"], "by": cut.get("cut_by")}
                            if cut and not measuring and cut.get("boot_id") != (this_boot or boot_id()) else None),
            "quiet_timed_out": sorted(n for n, r in runs.items() if (r.get("ab_run") or {}).get("quiet_timed_out")),
            "recoveries": [r.get("text") for r in recoveries],
            "reset": (sched.get("reset") or {}).get("text"),
            "config_diffs": schedule.config_diffs(sched),
            "eta_s": eta if state == "running" else None, "via": sched["via"],
            "unit_installed": installed, "seed": sched["seed"],
            "kernels": {side: sched["kernels"][side]["release"] for side in labels},
            "order": schedule.order_text(slots, labels), "legend": schedule.legend(labels)}


def _dur(s: float | None) -> str:
    if s is None:
        return "unknown until a boot is done"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} m" if s >= 3600 else f"{int(s // 60)} m {int(s % 60):02d} s"


def print_status(s: dict, out=None) -> None:
    out = out or sys.stdout
    print(f"nttrace ab {s['name']}: {s['state']}" + (f" ({s['why']})" if s.get("why") else ""), file=out)
    print(f"  boots settled {s['settled']} of {s['total']}, runs kept {s['done']}; via {s['via']}; "
          f"order ({s['legend']}) {s['order']}", file=out)
    if s.get("reset"):
        print(f"  reset: {s['reset']}", file=out)
    for r in s.get("recoveries") or []:
        print(f"  STATE RECOVERED: {r}", file=out)
    rk = s["running_kernel"]
    print(f"  kernel now: {rk['release']} ({'the ' + rk['is'] + ' kernel' if rk['is'] else 'neither side'})",
          file=out)
    if s["measuring"]:
        print(f"  boot {s['measuring']['slot']} of {s['total']} now: validate running since "
              f"{time.strftime('%H:%M:%S UTC', time.gmtime(s['measuring']['since']))}", file=out)
    if s["next"]:
        again = not s["measuring"] and s.get("attempt") and s["next"]["slot"] == s.get("boot")
        print(f"  boot {s['next']['slot']} of {s['total']} next: {s['next']['side']} {s['next']['release']}"
              + (f" (attempt {s['attempt']})" if again else ""), file=out)
    if s["next"] or s["measuring"]:
        print(f"  time left: {_dur(s['eta_s'])}", file=out)
    print(f"  failed boots: {len(s['failures'])}" + (f" ({s['consecutive_failures']} in a row now)"
                                                     if s["consecutive_failures"] else ""), file=out)
    for f in s["failures"]:
        kind = "failed measurement" if f.get("kind") == "measurement" else "failed boot"
        print(f"    slot {f['slot']} ({f['side']}), {kind}: {why_failed(f)}", file=out)
    if s.get("cut_pending"):
        c = s["cut_pending"]
        print(f"  boot {c['slot']}'s run was cut short" + (f" by an orderly shutdown ({c['by']})" if c.get("by") else "")
              + ": redone at the next step", file=out)
    if s["runs_redone"]:
        orderly = s.get("runs_redone_shutdown") or 0
        print(f"  runs cut short and redone: {s['runs_redone']}"
              + (f" ({orderly} by an orderly shutdown)" if orderly else ""), file=out)
    if s.get("quiet_timed_out"):
        print(f"  runs taken on a host that never became quiet (the wait timed out): slots "
              f"{', '.join(map(str, s['quiet_timed_out']))}", file=out)
    labels = list(s.get("kernels") or [])
    for label, diff in (s.get("config_diffs") or {}).items():
        before = labels[labels.index(label) - 1] if label in labels and labels.index(label) else "base"
        print(f"  config differences ({before} vs {label}): {len(diff) or 'none'}", file=out)
        for line in diff[:CONFIG_LINES]:
            print(f"    {line}", file=out)
        if len(diff) > CONFIG_LINES:
            print(f"    ... {len(diff) - CONFIG_LINES} more in the report", file=out)
    print(f"  unit {'installed' if s['unit_installed'] else 'not installed'}", file=out)


def main_status(args) -> int:
    s = status(Loop.named(args.name))
    if args.json:
        json.dump(s, sys.stdout, indent=1)
        print()
    else:
        print_status(s)
    return 0
