#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes nttrace(1), in roff, from the command's own argparse parser
(nttrace.cli.build_parser): every subcommand, at every depth, with its
usage, its options and its examples, so the manual says what `--help` says.
debian/rules runs it at build time against the built package; the page is
not kept in git.

    tools/manpage.py [OUT]      (default: standard output)

The date is SOURCE_DATE_EPOCH's (dpkg-buildpackage sets it from
debian/changelog), so one source builds one page."""
from __future__ import annotations

import argparse
import os
import sys
import time

from nttrace import __version__
from nttrace.cli import build_parser

EXIT_STATUS = [("0", "the command succeeded; every check passed"),
               ("1", "a validation check failed"),
               ("2", "a usage, configuration or input-file error"),
               ("3", "a missing privilege or kernel capability"),
               ("4", "an internal error (a bug in nttrace; NTTRACE_DEBUG=1 shows the traceback)")]
FILES = [("/etc/nttrace/nttrace.toml", "the daemon's configuration (nttrace.service reads it)"),
         ("/etc/nttrace/web-config.yml", "TLS, client certificates and bcrypt users of the daemon's web "
                                         "endpoint, in the Prometheus exporter toolkit's format"),
         ("/var/lib/prometheus/node-exporter/nttrace_validate.prom",
          "the hourly validation's results (nttrace-validate.timer) for node_exporter's textfile collector"),
         ("/var/lib/nttrace/ab/", "the A/B loops' schedules and runs (nttrace ab)"),
         ("/usr/share/nttrace/", "the Grafana dashboard and the Prometheus alert rules")]


def esc(text: str) -> str:
    """Text as roff reads it literally: backslashes, hyphens (an ASCII
    hyphen-minus, as options are typed) and a control character at the start
    of a line."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def options(parser: argparse.ArgumentParser) -> list[str]:
    out = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else " " + (action.metavar or action.dest.upper())
            if action.choices and not action.metavar:
                metavar = " {" + ",".join(action.choices) + "}"
            term = ", ".join(f"\\fB{esc(o)}\\fR{esc(metavar)}" for o in action.option_strings)
        else:
            term = f"\\fI{esc(action.metavar or action.dest)}\\fR"
        text = action.help or ""
        if action.required and action.option_strings:
            text += " (required)"
        out += [".TP", term, esc(text) if text else "\\&"]
    return out


def epilog_examples(parser: argparse.ArgumentParser) -> list[str]:
    """The examples of a parser's epilog (its text up to the exit codes'
    line, which EXIT STATUS says once), as a literal block."""
    epilog = (parser.epilog or "").split("exit codes:")[0].strip()
    if not epilog:
        return []
    return [".PP", ".nf", esc(epilog), ".fi"]


def section(path: str, helptext: str, parser: argparse.ArgumentParser) -> list[str]:
    out = [f'.SS "{esc(path)}"', esc(helptext) if helptext else "", ".PP", esc(usage(parser))]
    out += options(parser) + epilog_examples(parser)
    for name, sub_help, sub in subcommands(parser):
        out += section(f"{path} {name}", sub_help, sub)
    return [line for line in out if line != ""]


def manpage() -> str:
    parser = build_parser()
    when = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())))
    lines = [f'.TH NTTRACE 1 "{time.strftime("%Y-%m-%d", when)}" "nttrace {esc(__version__)}" "User Commands"',
             ".SH NAME", "nttrace \\- " + esc(parser.description.rstrip(".").lower()[0] + parser.description.rstrip(".")[1:]),
             ".SH SYNOPSIS", ".B nttrace", "[\\fB\\-\\-version\\fR] [\\fB\\-h\\fR]", "\\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
             ".SH DESCRIPTION",
             esc("nttrace traces the Linux kernel paths that copy or initialise memory with non-temporal "
                 "stores with BPF programs (compiled by bcc at run time against the running kernel's "
                 "headers) and perf counters, validates them against a native reference, runs unattended "
                 "A/B comparisons of two kernels, and exports Prometheus metrics as a daemon."),
             ".PP", esc("Every command answers -h/--help with its options; this page is generated from the "
                        "same parser."),
             ".SH OPTIONS"] + options(parser)
    lines += [".SH COMMANDS"]
    for name, sub_help, sub in subcommands(parser):
        lines += section(f"nttrace {name}", sub_help, sub)
    lines += [".SH EXIT STATUS"]
    for code, text in EXIT_STATUS:
        lines += [".TP", f"\\fB{code}\\fR", esc(text)]
    lines += [".SH FILES"]
    for path, text in FILES:
        lines += [".TP", f"\\fI{esc(path)}\\fR", esc(text)]
    lines += [".SH SEE ALSO", "\\fBsystemctl\\fR(1), \\fBprometheus\\-node\\-exporter\\fR(1), \\fBbpftool\\fR(8),",
              esc("/usr/share/doc/nttrace/README.Debian")]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = manpage()
    if len(argv) > 1:
        with open(argv[1], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
