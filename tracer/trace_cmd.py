"""`nttrace trace`: attach probes, print a periodic table (bcc-tools style)
or a final JSON summary, optionally recording per-call events as JSON Lines."""
from __future__ import annotations

import json
import sys
import time

from nttrace.errors import EXIT_OK, UsageError
from nttrace.tracer import Terminated, Tracer


def parse_probes(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("--probes is empty")
    return names


def probe_options(names: list[str], record: bool) -> dict:
    opts: dict = {n: {} for n in names}
    if "migrate" in names:
        opts["migrate"]["record"] = record
    if "memmap" in names and "page_ref" in names:
        opts["memmap"]["page_ref"] = True
    return opts


def print_table(snap: dict, elapsed: float, out=sys.stdout) -> None:
    print(f"{time.strftime('%H:%M:%S')}  after {elapsed:.1f}s", file=out)
    for name, entry in snap.items():
        if entry["status"] != "attached":
            print(f"  {name}: {entry['status']}: {entry.get('reason', '')}", file=out)
            continue
        if name in ("migrate", "migrate_fn"):
            print(f"  {'MODE':<34} {'REASON':<20} {'NT':<3} {'CALLS':>7} {'OK PAGES':>9} {'FAILED':>7} {'P50 us':>9} {'MAX us':>9}", file=out)
            for r in entry["rows"]:
                lat = r["latency_ns"]
                p50 = f"{lat['p50'] / 1e3:.1f}" if lat["p50"] is not None else "-"
                mx = f"{lat['max'] / 1e3:.1f}" if lat["max"] is not None else "-"
                ok = "-" if r["succeeded"] is None else r["succeeded"]
                print(f"  {r['mode']:<34} {r['reason']:<20} {'y' if r['nt'] else 'n':<3} {r['calls']:>7} "
                      f"{ok:>9} {r['failed']:>7} {p50:>9} {mx:>9}", file=out)
        elif name == "memmap":
            for r in entry["rows"]:
                print(f"  memmap {r['pgmap_type']:<10} node {r['nid']:>2} calls {r['calls']:>5} pages {r['pages']:>10} "
                      f"ns/page {r['ns_per_page'] or 0:.2f}", file=out)
        elif name == "copy":
            for r in entry["rows"]:
                print(f"  copy {r['routine']:<18} nt={'y' if r['nt'] else 'n'} calls {r['calls']:>8} bytes {r['bytes']:>12}", file=out)
        elif name == "page_ref":
            print(f"  page_ref_set total {entry['page_ref_set_total']}", file=out)
    out.flush()


def main(args) -> int:
    names = parse_probes(args.probes)
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    tracer = Tracer(names, probe_options(names, bool(args.record)))
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
    try:
        tracer.attach()
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
        finally:
            tracer.detach()
            if record_file:
                record_file.close()
    summary = {"probes": snap, "duration_s": round(time.monotonic() - start, 3)}
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print_table(snap, summary["duration_s"])
    return EXIT_OK


def _write_records(tracer: Tracer, f) -> None:
    recs = tracer.records()
    if f is not None:
        for r in recs:
            f.write(json.dumps(r) + "\n")
