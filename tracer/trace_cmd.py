# SPDX-License-Identifier: Apache-2.0
"""`nttrace trace`: attach probes, print a periodic table (bcc-tools style)
or a final JSON summary, optionally recording per-call events as JSON Lines."""
from __future__ import annotations

import json
import os
import sys
import time

from nttrace.errors import EXIT_OK, UsageError
from nttrace.kernel import bpf_stats
from nttrace.probes import PROBES, check_names
from nttrace.probe_framework.contract import Column, row_value
from nttrace.tracing.stop_guard import StopGuard
from nttrace.tracing.tracer import Terminated, Tracer


def parse_probes(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("--probes is empty")
    return names


def probe_options(names: list[str], record: bool) -> dict:
    check_names(names)
    return {n: PROBES[n].options_for(names, record) for n in names}


def is_numeric(col: Column, rows: list[dict]) -> bool:
    """A column of numbers (aligned right): formatted, scaled, or holding one."""
    return bool(col.fmt) or col.scale != 1 or any(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in (row_value(r, col.key) for r in rows))


def cell(row: dict, col: Column, numeric: bool) -> str:
    value = row_value(row, col.key)
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "y" if value else "n"
    elif isinstance(value, (int, float)):
        v = value / col.scale if col.scale != 1 else value
        text = format(v, col.fmt) if col.fmt else str(v)
    else:
        text = str(value)
    return text.rjust(col.width) if numeric else text.ljust(col.width)


def print_table(snap: dict, elapsed: float, out=sys.stdout, stamp: str | None = None) -> None:
    """One block per probe: its status, then its rows under the columns it
    declares (nttrace.probe_framework.contract). `stamp` replaces the wall clock."""
    print(f"{stamp or time.strftime('%H:%M:%S')}  after {elapsed:.1f}s", file=out)
    for name, entry in snap.items():
        if entry["status"] != "attached":
            print(f"  {name}: {entry['status']}: {entry.get('reason', '')}", file=out)
            continue
        lost = entry.get("events_lost", 0)
        print(f"  {name} (via {entry.get('via', '?')}){f', {lost} events lost' if lost else ''}", file=out)
        columns, rows = PROBES[name].columns, entry.get("rows", [])
        numeric = [is_numeric(c, rows) for c in columns]
        print("    " + " ".join(c.header.rjust(c.width) if n else c.header.ljust(c.width)
                                for c, n in zip(columns, numeric)).rstrip(), file=out)
        for r in rows:
            print("    " + " ".join(cell(r, c, n) for c, n in zip(columns, numeric)).rstrip(), file=out)
        for note in entry.get("notes", []):
            print(f"    note: {note}", file=out)
    out.flush()


def main(args) -> int:
    # the values are the parser's (nttrace.option_values): --probes known
    # names, the times positive and finite, the output paths writable
    names = parse_probes(args.probes)
    options = probe_options(names, bool(args.record))
    # SIGINT/SIGTERM from here on end the process within the guard's grace,
    # also while bcc compiles (the Tracer's capability report and attach)
    guard = StopGuard(args.stop_grace).install()
    try:
        return _trace(args, names, options, guard)
    finally:
        guard.close()


def _trace(args, names: list[str], options: dict, guard: StopGuard) -> int:
    maps_file = None
    if args.record_maps and not args.ebpf:
        try:   # opened now, so a bad path is a usage error before anything attaches
            maps_file = open(args.record_maps + ".tmp", "w")
        except OSError as exc:
            raise UsageError(f"--record-maps {args.record_maps}: {exc.strerror}") from None
        guard.cleanups.append(lambda: os.unlink(args.record_maps + ".tmp"))   # a stop before it is complete
    try:
        tracer = Tracer(names, options)
    except BaseException:
        if maps_file is not None:
            maps_file.close()
            os.unlink(args.record_maps + ".tmp")
        raise
    if args.ebpf:
        for name, text in tracer.programs().items():
            print(f"/* ===== {name} ===== */\n{text}")
        return EXIT_OK
    record_file = None
    if args.record:
        try:
            record_file = open(args.record, "w")
        except OSError as exc:
            raise UsageError(f"--record {args.record}: {exc.strerror}") from None
    start = time.monotonic()
    stats = bpf_stats.enable()     # the kernel's run time per program, while tracing (released in the finally)
    held = {"method": stats.method or None, "reason": stats.reason}
    programs = {}
    try:
        tracer.attach()
        guard.attached = True
        start = time.monotonic()     # --duration and the table's clock count from attached, not from compiling
        next_print = start + args.interval
        end = start + args.duration if args.duration is not None else None
        while True:
            now = time.monotonic()
            if end is not None and now >= end:
                break
            deadline = min(next_print, end) if end is not None else next_print
            tracer.poll(timeout_ms=max(1, int(min(deadline - now, 0.2) * 1000)))
            _write_records(tracer, record_file)
            if not args.json and time.monotonic() >= next_print:
                print_table(tracer.snapshot(), time.monotonic() - start)
                next_print += args.interval
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        try:
            tracer.poll(timeout_ms=1)
            _write_records(tracer, record_file)
            snap = tracer.snapshot()
            programs = _program_stats(tracer)
            if maps_file is not None:
                recording = tracer.record_maps()
                # what is printed is what the recorded maps decode to
                snap.update({name: rec["snapshot"] for name, rec in recording["probes"].items()})
                json.dump(recording, maps_file)
                maps_file.close()
                os.replace(args.record_maps + ".tmp", args.record_maps)
                maps_file = None
        finally:
            tracer.detach()
            stats.close()
            for name, why in tracer.detach_errors.items():
                print(f"nttrace: warning: detaching {name}: {why} (its descriptors were closed regardless)", file=sys.stderr)
            if record_file:
                record_file.close()
            if maps_file is not None:   # interrupted before the maps were written: no half file left
                maps_file.close()
                os.unlink(args.record_maps + ".tmp")
    summary = {"probes": snap, "duration_s": round(time.monotonic() - start, 3),
               "bpf_stats": {**held, "programs": programs}}
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print_table(snap, summary["duration_s"])
    return EXIT_OK


def _program_stats(tracer: Tracer) -> dict:
    """{probe: {program: run_time_ns, run_cnt, ns_per_run}}: the kernel's
    count of each attached program (nttrace.kernel.bpf_stats)."""
    return {probe: {fn: {"run_time_ns": st.run_time_ns, "run_cnt": st.run_cnt,
                         "ns_per_run": round(st.ns_per_run, 1) if st.ns_per_run else None}
                    for fn, st in progs.items()}
            for probe, progs in tracer.program_stats().items()}


def _write_records(tracer: Tracer, f) -> None:
    recs = tracer.records()
    if f is not None:
        for r in recs:
            f.write(json.dumps(r) + "\n")
