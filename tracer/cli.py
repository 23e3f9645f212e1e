# SPDX-License-Identifier: Apache-2.0
"""The `nttrace` command line.

Exit codes:
  0  all checks passed / the command succeeded
  1  a validation check failed
  2  usage, configuration or input-file error
  3  missing privilege or kernel capability
  4  internal error (a bug in nttrace; NTTRACE_DEBUG=1 shows the traceback)
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from nttrace import __version__
from nttrace.errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, NttraceError, UsageError
from nttrace.option_values import (CheckPattern, Count, InputDir, InputFile, KernelSeries, ListenAddress,
                                   LocalTime, LoopName, Number, OutputDir, OutputFile, ProbeNames, Text)

EPILOG_EXIT = "exit codes: 0 ok, 1 a check failed, 2 usage/config/input error, 3 missing privilege or kernel capability, 4 internal error"

VALIDATE_EXAMPLES = """examples:
  nttrace validate                      # capability report and every default check
  nttrace validate --quick --json       # the fast set, as JSON
  nttrace validate --list               # the check catalog
  nttrace validate --check 'native.*'   # only the native reference checks
  nttrace validate --sysroot ./capture  # decode another machine's BTF/tracefs offline
  nttrace validate --json > base.json; (reboot into the patched kernel)
  nttrace validate --baseline base.json # per-check deltas against the saved run
  nttrace validate --baseline base.json --current patched.json  # compare two saved runs
  nttrace validate --baseline base.json --current patched.json --format markdown  # a table for a cover letter
  nttrace validate --baseline base/*.json --current nt/*.json --format html > ab.html  # several boots a side:
                                        # changes with exact rank intervals, verdicts, per-boot plots
  nttrace validate --baseline base/*.json --current nt/*.json --detect 10  # boots a side a 10% change needs
  nttrace validate --rebind namespace0.0 --runs 30  # time memmap init over 30 rebinds
  nttrace validate --quick --textfile-dir /var/lib/prometheus/node-exporter  # results for node_exporter
"""
TRACE_EXAMPLES = """examples:
  nttrace trace                                   # migrate probe, table every 1 s until Ctrl-C
  nttrace trace --probes migrate --duration 5 --json
  nttrace trace --probes migrate,memmap,copy --record calls.jsonl
  nttrace trace --ebpf --probes migrate           # print the BPF program and exit
"""
BENCH_EXAMPLES = """examples:
  nttrace bench native --quick          # the seeds' tables on this CPU, small sizes
  nttrace bench native --json > native.json
  nttrace bench probes                  # per-event cost of each BPF program
  nttrace bench probes --rounds 5 --events 5000 --json
  nttrace bench daemon --requests 2000  # daemon start-up, RSS, idle CPU, scrape latency
  nttrace bench daemon --idle-connections 200   # scrape p99 with 200 idle connections open vs none
  nttrace bench overhead --rounds 21    # compaction throughput with the default probes vs none
  nttrace bench overhead --rounds 21 --aa   # the same with no probes on either side: the noise floor
  nttrace bench overhead --method counted --cross-check 7   # the kernel's count per program, and the A/B
  nttrace bench overhead --work demotion    # demotion throughput (needs a lower memory tier and cgroup v2)
"""
AB_EXAMPLES = """examples:
  nttrace ab start mine --base 6.12.0-base --patched 6.12.0-nt --boots 8 --rebind namespace0.0 --dry-run
                                        # every check, the plan, its time, its reset, what it changes; nothing done
  nttrace ab start mine --base 6.12.0-base --patched 6.12.0-nt --boots 8 --rebind namespace0.0
                                        # 8 boots of each, kexec between them; asks before the first reboot
  nttrace ab start v9 --series 6.12.0-base,1-3=6.12.0-v9-3,4=6.12.0-v9-4,5-9=6.12.0-v9-9 --boots 5 \\
        --rebind namespace0.0 --until 06:30 --yes
                                        # a series: base and each step's kernel, 5 boots each, a table per step;
                                        # the night ends at 06:30 on the default kernel, whatever was reached
  nttrace ab start mine --base 6.12.0-base --patched 6.12.0-nt --boots 8 --via reboot --demote --yes
                                        # through the firmware (the bootloader's one-shot entry), without asking;
                                        # each boot demotes a scratch cgroup (kernel.demotion_nt)
  nttrace ab status mine                # boot k of N, the kernel now, failed boots, time left
  nttrace ab stop mine                  # end now: unit and watchdog removed, default kernel next, runs kept
  nttrace ab report mine --format html > mine.html   # the A/B of the runs so far (text, markdown, json, html)
  nttrace ab report mine --out mine-report          # every format into a directory
(docs/ab-loop.md: what a machine needs, what happens at each boot, the faults, the state directory)
"""
DAEMON_EXAMPLES = """examples:
  nttrace daemon                                  # Prometheus metrics on 127.0.0.1:9435
  nttrace daemon --config /etc/nttrace/nttrace.toml
  nttrace daemon --check-config /etc/nttrace/nttrace.toml
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump; main() prefixes "nttrace: "
        where = self.prog.removeprefix("nttrace").strip()
        raise UsageError(f"{where + ': ' if where else ''}{message} (see --help)")


def _formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="nttrace", description="Trace and validate the kernel's non-temporal-store memory paths.",
                epilog=EPILOG_EXIT, formatter_class=_formatter)
    p.add_argument("--version", action="version", version=f"nttrace {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    v = sub.add_parser("validate", help="check this kernel's NT paths against the native reference",
                       epilog=VALIDATE_EXAMPLES + "\n" + EPILOG_EXIT, formatter_class=_formatter)
    v.add_argument("--json", action="store_true", help="print the report as JSON (same as --format json)")
    v.add_argument("--format", choices=("text", "json", "markdown", "html"), default=None,
                   help="output format (default text); markdown: tables to paste into a mail or a cover letter")
    v.add_argument("--list", action="store_true", help="print the check catalog and exit")
    v.add_argument("--check", action="append", metavar="PATTERN", type=CheckPattern(), help="run only checks matching PATTERN (a glob, an id, or a family: env, native, kernel, perf, probe; repeatable)")
    v.add_argument("--quick", action="store_true",
                   help="only the checks marked [quick] in --list (seconds, not minutes); two of them change "
                        "system state, as in a full run: probe.migrate compacts memory "
                        "(/proc/sys/vm/compact_memory), probe.reclaim reclaims a scratch memory cgroup's page "
                        "cache (a 64 MiB file in /var/tmp)")
    v.add_argument("--textfile-dir", metavar="DIR", type=OutputDir(),
                   help="also write the results to DIR/nttrace_validate.prom for node_exporter's textfile "
                        "collector (atomically; nttrace-validate.timer does this on a schedule)")
    v.add_argument("--sysroot", metavar="DIR", default="/", type=InputDir(),
                   help="read BTF, tracefs and kallsyms under DIR, a copy of another machine's files (offline; "
                        "which files: docs/validate.md)")
    v.add_argument("--baseline", metavar="FILE", nargs="+", action="extend", type=InputFile(),
                   help="saved `validate --json` reports of the base kernel: one per run (boot), several for "
                        "statistics across runs; a boot's reports of different checks merge (repeatable)")
    v.add_argument("--current", metavar="FILE", nargs="+", action="extend", type=InputFile(),
                   help="with --baseline: the patched kernel's saved reports, as --baseline, compared instead "
                        "of running (repeatable)")
    v.add_argument("--detect", metavar="PCT", type=Number(above=0, below=100, unit="percent"),
                   help="with --baseline: also say how many runs (boots) a side a change of PCT percent in each "
                        "scenario's primary figure needs, at these runs' spread")
    v.add_argument("--rebind", metavar="NAMESPACE", type=Text("namespace0.0"), help="rebind this pmem namespace to time memmap init (changes system state)")
    v.add_argument("--runs", type=Count(1), default=30, help="rebinds with --rebind (default 30)")
    v.add_argument("--exercise", metavar="PROBE[,PROBE]", type=ProbeNames(),
                   help="run these probes' workloads in their probe.<name> checks (they may change system state: "
                        "e.g. load a module; compaction's and memcg reclaim's run unasked); see "
                        "`nttrace validate --list`")
    v.add_argument("--demote", action="store_true", help="demote a scratch cgroup to the lower tier (changes system state)")
    v.add_argument("--page-ref", action="store_true",
                   help="with --rebind: count page_ref_set per call (on a kernel with the template series' patches 4-8 but not 9/9 it turns the template path off)")

    t = sub.add_parser("trace", help="attach the probes and print live aggregates",
                       epilog=TRACE_EXAMPLES + "\n" + EPILOG_EXIT, formatter_class=_formatter)
    from nttrace.probes import DEFAULT, PROBES
    t.add_argument("--probes", default=",".join(DEFAULT), type=ProbeNames(),
                   help=f"comma-separated: {','.join(PROBES)} (default {','.join(DEFAULT)})")
    t.add_argument("--duration", type=Number(above=0, unit="seconds"), help="seconds to trace (default: until Ctrl-C)")
    t.add_argument("--interval", type=Number(above=0, unit="seconds"), default=1.0,
                   help="seconds between table updates (default 1)")
    t.add_argument("--json", action="store_true", help="print only a final JSON summary")
    t.add_argument("--record", metavar="FILE", type=OutputFile(), help="write per-call events as JSON Lines")
    t.add_argument("--record-maps", metavar="FILE", type=OutputFile(), help="at the end, write the probes' BPF maps as the kernel "
                   "holds them (bytes), with what decodes them: a recording the goldens replay offline")
    from nttrace.tracing.stop_guard import STOP_GRACE_S
    t.add_argument("--stop-grace", type=Number(above=0, unit="seconds"), default=STOP_GRACE_S, metavar="SECONDS",
                   help="after Ctrl-C or SIGTERM, how long the probes' detach and the final summary may take "
                        f"before the process ends without them (default {STOP_GRACE_S:g}; more on a slow or "
                        "emulated machine)")
    t.add_argument("--ebpf", action="store_true", help="print the generated BPF programs and exit")

    b = sub.add_parser("bench", help="benchmarks: the native reference and the probes' cost",
                       epilog=BENCH_EXAMPLES + "\n" + EPILOG_EXIT, formatter_class=_formatter)
    bsub = b.add_subparsers(dest="bench", metavar="WHAT", parser_class=_Parser)
    bn = bsub.add_parser("native", help="the seeds' copy tables, reproduced with the native reference")
    bn.add_argument("--json", action="store_true")
    bn.add_argument("--quick", action="store_true", help="smaller arrays and shorter cells")
    bp = bsub.add_parser("probes", help="per-event cost of each BPF program (kernel.bpf_stats_enabled)")
    bp.add_argument("--json", action="store_true")
    bp.add_argument("--events", type=Count(1), default=2000, help="events to drive per program (default 2000)")
    bp.add_argument("--rounds", type=Count(1), default=3,
                    help="rounds of probe, empty and clock-only programs, each alone (default 3)")
    bd = bsub.add_parser("daemon", help="daemon start-up, memory, idle CPU and scrape latency on loopback")
    bd.add_argument("--json", action="store_true")
    bd.add_argument("--requests", type=Count(1), default=2000, help="scrapes in the bounded load (default 2000)")
    bd.add_argument("--concurrency", type=Count(1), default=4, help="client threads (default 4)")
    bd.add_argument("--idle", type=Number(above=0, unit="seconds"), default=10.0, help="seconds of idle CPU measurement (default 10)")
    bd.add_argument("--idle-connections", type=Count(0), default=0, metavar="N",
                    help="also time one scraper with N idle connections held open against none (slowloris)")
    bd.add_argument("--rounds", type=Count(1), default=5, help="interleaved rounds for --idle-connections (default 5)")

    bo = bsub.add_parser("overhead", help="what the probes cost the work they observe (migrate_pages throughput)")
    bo.add_argument("--json", action="store_true")
    bo.add_argument("--rounds", type=Count(1), default=7, help="interleaved rounds of each condition (default 7)")
    bo.add_argument("--work", choices=("compaction", "demotion"), default="compaction",
                    help="what moves the pages: compaction (any host) or demotion by memory.reclaim (default compaction)")
    bo.add_argument("--per-round", type=Count(1), default=3, help="timed compactions or demotions per condition and round "
                    "(default 3)")
    bo.add_argument("--scratch-mib", type=Count(1), default=256, help="scratch memory per compaction or demotion "
                    "(default 256)")
    bo.add_argument("--method", choices=("ab", "counted"), default="ab",
                    help="ab: throughput with the probes against none, interleaved (default); counted: each program's "
                         "run time as the kernel counts it plus its attach type's entry cost, as a share of the "
                         "workload's CPU time (--rounds x --per-round compactions)")
    bo.add_argument("--cross-check", type=Count(0), default=0, metavar="ROUNDS",
                    help="with --method counted: also the interleaved A/B and A/A of ROUNDS rounds, and whether "
                         "they can resolve the counted figure")
    bo.add_argument("--aa", action="store_true", help="no probes in either condition: the method's noise floor")
    bo.add_argument("--warmup", type=Count(0), default=None, help="untimed runs at the start of each condition, after "
                    "the probes attach or detach (default: 1 for demotion, 0 for compaction)")

    _ab_parser(sub)

    d = sub.add_parser("daemon", help="export Prometheus metrics (systemd service)",
                       epilog=DAEMON_EXAMPLES + "\n" + EPILOG_EXIT, formatter_class=_formatter)
    d.add_argument("--config", metavar="FILE", type=InputFile(), help="TOML configuration")
    d.add_argument("--listen", metavar="ADDR:PORT", type=ListenAddress(), help="override the listen address")
    d.add_argument("--web.config.file", dest="web_config_file", metavar="FILE", type=InputFile(),
                   help="the exporter toolkit's web config (TLS, client certificates, bcrypt basic auth, headers), "
                        "re-read when it changes; overrides the config's web_config_file")
    d.add_argument("--check-config", metavar="FILE", type=InputFile(), help="validate FILE and exit")
    return p


def _ab_parser(sub) -> None:
    a = sub.add_parser("ab", help="boot base and patched kernels (or a series) in turn, unattended, and report the A/B",
                       epilog=AB_EXAMPLES + "\n" + EPILOG_EXIT, formatter_class=_formatter)
    asub = a.add_subparsers(dest="ab", metavar="WHAT", parser_class=_Parser)
    s = asub.add_parser("start", help="check, write the schedule, install the unit, boot the first kernel",
                        epilog=AB_EXAMPLES + "\n" + EPILOG_EXIT, formatter_class=_formatter)
    s.add_argument("name", metavar="NAME", type=LoopName(), help="the loop's name (its directory under /var/lib/nttrace/ab)")
    s.add_argument("--base", metavar="KERNEL", type=Text("6.1.0-base"),
                   help="an installed release R (/boot/vmlinuz-R) or a path to a bzImage (PATH[:INITRD])")
    s.add_argument("--patched", metavar="KERNEL", type=Text("6.1.0-nt"), help="as --base")
    s.add_argument("--series", metavar="[LABEL=]K0,[LABEL=]K1,...", type=KernelSeries(),
                   help="instead of --base and --patched: a series of kernels, the base first, each one a step on "
                        "the one before (labels default to base, step1, step2, ...); the report has a row per step")
    s.add_argument("--boots", required=True, type=Count(1), metavar="N", help="boots of each kernel (rounds)")
    s.add_argument("--check", action="append", metavar="PATTERN", type=CheckPattern(), help="validate's --check at each boot (repeatable)")
    s.add_argument("--quick", action="store_true", help="validate's --quick at each boot")
    s.add_argument("--rebind", metavar="NAMESPACE", type=Text("namespace0.0"), help="validate's --rebind: time memmap init on this namespace")
    s.add_argument("--runs", type=Count(1), default=30, help="rebinds a boot with --rebind (default 30)")
    s.add_argument("--exercise", metavar="PROBE[,PROBE]", type=ProbeNames(), help="validate's --exercise at each boot")
    s.add_argument("--demote", action="store_true", help="validate's --demote at each boot (kernel.demotion_nt)")
    s.add_argument("--via", choices=("kexec", "reboot"), default="kexec",
                   help="kexec (default: no firmware) or reboot (firmware, grub-reboot's one-shot entry)")
    s.add_argument("--cmdline", metavar="TEXT", type=Text("root=/dev/vda1 ro"),
                   help="with --via kexec: the kernels' command line (default: this boot's, less BOOT_IMAGE=/initrd=)")
    s.add_argument("--seed", type=Count(0), help="the order's seed (default: random, recorded)")
    s.add_argument("--max-failures", type=Count(1), default=3, metavar="K",
                   help="stop after K consecutive failed boots (default 3)")
    s.add_argument("--wait-quiet", type=Number(at_least=0, unit="seconds"), default=600, metavar="S",
                   help="at each boot, wait up to S seconds for a quiet host (default 600; 0: do not wait)")
    s.add_argument("--validate-timeout", type=Number(above=0, unit="seconds"), default=7200, metavar="S",
                   help="bound on each boot's validate run (default 7200)")
    s.add_argument("--boot-deadline", type=Number(at_least=60, unit="seconds"), metavar="S",
                   help="reset a boot of a loop kernel that has not reached the loop's step S seconds after the "
                        "kernel started (emergency or rescue mode, a hang with PID 1 alive; default: 4 times this "
                        "machine's measured boot, at least 600)")
    s.add_argument("--until", metavar="HH:MM", type=LocalTime(),
                   help="end the loop at this local time (the next time the clock reads it): the report of the "
                        "runs reached, the machine back on its default kernel")
    s.add_argument("--stay", action="store_true",
                   help="a loop that stops on a fault leaves the machine on the kernel it stopped at (default: "
                        "it reboots into the default kernel)")
    s.add_argument("--no-watchdog", action="store_true",
                   help="run without a hardware watchdog (required where the machine has none): a kernel that hangs "
                        "at a boot then needs a hand on the power button")
    s.add_argument("--yes", "-y", action="store_true",
                   help="start without asking before the first reboot (required without a terminal)")
    s.add_argument("--dry-run", action="store_true",
                   help="every check, print the plan and every refusal; install and boot nothing "
                        "(exit code as the real start's)")
    st = asub.add_parser("step", help="what the loop's unit runs at each boot (not for users)")
    st.add_argument("name", metavar="NAME", type=LoopName())
    st.add_argument("--ended", action="store_true",
                    help="the unit's ExecStopPost: stop the loop if systemd ended the step ($SERVICE_RESULT)")
    st.add_argument("--deadline", action="store_true",
                    help="the boot deadline's unit: record a boot that never reached the step, and reset")
    ss = asub.add_parser("status", help="boot k of N, the kernel now, failed boots, time left")
    ss.add_argument("name", metavar="NAME", type=LoopName())
    ss.add_argument("--json", action="store_true")
    sp = asub.add_parser("stop", help="end the loop: unit removed, nothing pending, runs kept")
    sp.add_argument("name", metavar="NAME", type=LoopName())
    r = asub.add_parser("report", help="the A/B of the runs so far")
    r.add_argument("name", metavar="NAME", type=LoopName())
    r.add_argument("--format", choices=("text", "markdown", "json", "html"), default="text")
    r.add_argument("--out", metavar="DIR", type=OutputDir(create=True), help="write every format into DIR (ab.txt, ab.md, ab.json, ab.html)")


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return EXIT_USAGE
        return _dispatch(args)
    except NttraceError as exc:
        print(f"nttrace: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug in nttrace: one line, traceback on request
        if os.environ.get("NTTRACE_DEBUG"):
            raise
        print(f"nttrace: internal error: {exc.__class__.__name__}: {exc} (NTTRACE_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
    except BaseException as exc:      # Terminated (SIGTERM), a BaseException so nothing swallows it
        if type(exc).__name__ != "Terminated":
            raise
        return 143


def _dispatch(args) -> int:
    if args.command == "validate":
        return _validate(args)
    if args.command == "trace":
        from nttrace import trace_cmd
        return trace_cmd.main(args)
    if args.command == "bench":
        if args.bench == "native":
            from nttrace.bench import native as bench_native
            return bench_native.main(args)
        if args.bench == "probes":
            from nttrace.bench import probes as bench_probes
            return bench_probes.main(args)
        if args.bench == "daemon":
            from nttrace.bench import daemon as bench_daemon
            return bench_daemon.main(args)
        if args.bench == "overhead":
            from nttrace.bench import overhead as bench_overhead
            return bench_overhead.main(args)
        raise UsageError("nttrace bench: choose native, probes, daemon or overhead (see --help)")
    if args.command == "daemon":
        from nttrace.daemon import service as daemon
        return daemon.main(args)
    if args.command == "ab":
        from nttrace.ab import command as ab_command
        return ab_command.main(args)
    raise UsageError(f"unknown command {args.command}")


def _validate(args) -> int:
    import platform
    import time

    from nttrace.ab import compare, formats
    from nttrace.kernel.sysroot import Sysroot
    from nttrace.validate import runner as validate
    from nttrace.validate import textfile

    if args.list:
        validate.print_list()
        return EXIT_OK
    if args.current and not args.baseline:
        raise UsageError("--current needs --baseline")
    if args.detect is not None and not args.baseline:
        raise UsageError("--detect PCT needs --baseline")
    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json and --format {args.format} disagree")
    if args.textfile_dir and args.current:
        raise UsageError("--textfile-dir writes a run's results: it does not go with --current")
    fmt = "json" if args.json else (args.format or "text")
    if fmt == "html" and not args.baseline:
        raise UsageError("--format html is the A/B report: it needs --baseline")
    if args.current:
        base, current = formats.load_sides(args.baseline, args.current)
        report = compare.merge(current)
    else:
        base = None
        if args.baseline:
            from nttrace.kernel import boot_id
            base = [compare.load_report(p, "--baseline") for p in args.baseline]
            compare.check_side(base, "--baseline")
            # before the run: a baseline recorded in this boot is this run's own boot
            compare.refuse_a_run_on_both_sides(base, [{"boot_id": boot_id()}])
        exercise = tuple(args.exercise.split(",")) if args.exercise else ()
        options = validate.ValidateOptions(rebind=args.rebind, runs=args.runs, demote=args.demote,
                                           page_ref=args.page_ref, quick=args.quick, exercise=exercise)
        started = time.time()
        try:
            report = validate.run(Sysroot(args.sysroot), args.check, options)
        except NttraceError as exc:
            if args.textfile_dir:     # the run failed as a whole: say so to the collector too
                textfile.write(args.textfile_dir, None, started, time.time(), exc.exit_code, platform.release())
            raise
        if args.textfile_dir:
            textfile.write(args.textfile_dir, report, started, time.time(), validate.exit_code(report))
    if base is not None:
        cur = current if args.current else [report]
        rows = compare.compare(base, cur, strict=bool(args.current), detect_pct=args.detect)
        sys.stdout.write(formats.render(fmt, rows, base, cur, report))     # computed whole before any output
        return validate.exit_code(report)
    report.pop("_source", None)
    if fmt == "json":
        json.dump(report, sys.stdout, indent=2, sort_keys=False)
        print()
    elif fmt == "markdown":
        validate.print_markdown(report)
    else:
        validate.print_table(report)
    return validate.exit_code(report)
