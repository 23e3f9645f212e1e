# SPDX-License-Identifier: Apache-2.0
"""Every value an `nttrace` option takes is parsed by one rule
(nttrace.option_values). The walk below reads every subcommand's options
from the parser itself (nttrace.cli.build_parser), so an option added later
is walked too: it must have a typed parser of that module (or a fixed set of
choices), and each of its kind's bad values (empty, blank, not a number, NaN,
infinite, below or above its range, a directory where a file is written, a
pattern or probe that names nothing, ...) is refused while the command line
is read, in one line that names the flag."""
import argparse
import time
from pathlib import Path

import pytest

from conftest import one_line_error, run_nttrace
from nttrace import cli, option_values
from nttrace.errors import UsageError
from nttrace.validate import checks


def _walk(parser: argparse.ArgumentParser, path: tuple = ()):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _walk(sub, path + (name,))
        elif a.nargs != 0 and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            yield path, parser, a


OPTIONS = list(_walk(cli.build_parser()))


def _name(a: argparse.Action) -> str:
    return a.option_strings[-1] if a.option_strings else a.metavar


def _example(a: argparse.Action, tmp: Path) -> str:
    return a.type.example(tmp) if isinstance(a.type, option_values.OptionValue) else a.choices[0]


def _argv(path: tuple, parser, action, value: str, tmp: Path) -> list[str]:
    """The subcommand with its required options and positionals at their
    examples, and `action` at `value`."""
    argv, positionals = list(path), []
    for a in parser._actions:
        if a.nargs == 0 or isinstance(a, argparse._SubParsersAction):
            continue
        given = value if a is action else None
        if not a.option_strings:
            positionals.append(given if given is not None else _example(a, tmp))
        elif given is not None:
            argv.append(f"{a.option_strings[0]}={given}")      # "=": a value may begin with "-"
        elif a.required:
            argv.append(f"{a.option_strings[0]}={_example(a, tmp)}")
    return argv + positionals


def test_the_walk_reaches_every_subcommand():
    """Fails if the walk stops short of a subcommand (a nested parser it does
    not descend into would leave its options unwalked)."""
    reached = {path for path, _p, _a in OPTIONS}
    for sub in ("validate", "trace", "daemon", "bench probes", "bench daemon", "bench overhead", "ab start",
                "ab step", "ab status", "ab stop", "ab report"):
        assert tuple(sub.split()) in reached, sub
    assert len(OPTIONS) >= 50, len(OPTIONS)


@pytest.mark.parametrize("path,parser,action", OPTIONS,
                         ids=[f"{' '.join(p)} {_name(a)}" for p, _parser, a in OPTIONS])
def test_every_option_refuses_the_bad_values_of_its_type(path, parser, action, tmp_path):
    """Fails if an option that takes a value has no typed parser of
    nttrace.option_values (argparse's bare int/float/str take '', 'nan',
    '-1' or a directory as they come), if a bad value of its kind is taken,
    or if the refusal does not name the flag in one line."""
    flag = _name(action)
    assert isinstance(action.type, option_values.OptionValue) or action.choices, (
        f"nttrace {' '.join(path)} {flag} takes a value but parses it with {action.type!r}: give it a parser of "
        "nttrace.option_values (then its bad values are fed to it here)")
    good = _argv(path, parser, action, _example(action, tmp_path), tmp_path)
    cli.build_parser().parse_args(good)         # the walk's own command line is a good one
    bad_values = (action.type.bad_values(tmp_path) if isinstance(action.type, option_values.OptionValue)
                  else ["", "zzz"])
    for bad in bad_values:
        with pytest.raises(UsageError) as refused:
            cli.build_parser().parse_args(_argv(path, parser, action, bad, tmp_path))
        message = str(refused.value)
        assert f"argument {flag.split('=')[0]}" in message or f"argument {action.metavar}" in message, (bad, message)
        assert "\n" not in message, message


def _refusal(argv: list[str]) -> str:
    with pytest.raises(UsageError) as refused:
        cli.build_parser().parse_args(argv)
    return str(refused.value)


def test_the_values_the_issue_found_misread_are_refused_while_parsing(tmp_path):
    """Fails on each value a user saw taken as something else: an empty
    --check-config taken as "not given" (the daemon started), a --check typo
    dropped beside a pattern that matches, a NaN duration (a trace without
    end), a directory as --record-maps (found only after the whole trace)."""
    assert "argument --check-config: an empty value" in _refusal(["daemon", "--check-config", ""])
    assert "argument --check: zzz matches no check" in _refusal(
        ["validate", "--check", "probe.migrate", "--check", "zzz"])
    assert "argument --check: zzz matches no check" in _refusal(
        ["ab", "start", "mine", "--base", "a", "--patched", "b", "--boots", "2", "--check", "env.*", "--check", "zzz"])
    assert "argument --duration: nan is not a positive, finite number of seconds" in _refusal(
        ["trace", "--duration", "nan"])
    assert f"argument --record-maps: {tmp_path}: a directory" in _refusal(["trace", "--record-maps", str(tmp_path)])
    assert "argument --listen: " in _refusal(["daemon", "--listen", ""])


def test_a_pattern_that_selects_nothing_is_refused_beside_one_that_does():
    """The catalog's rule for --check (validate's and ab start's): fails if a
    pattern that selects nothing is dropped because another selects checks,
    or if a pattern --quick leaves with nothing is run as no check."""
    assert [c.id for c in checks.select(["env.core"], quick=False)] == ["env.core"]
    with pytest.raises(UsageError, match=r"--check zzz matches no check"):
        checks.select(["env.core", "zzz"], quick=False)
    with pytest.raises(UsageError, match=r"--check kernel.memmap_latency matches only slow checks "
                                         r"\(kernel.memmap_latency\), which --quick leaves out"):
        checks.select(["env.*", "kernel.memmap_latency"], quick=True)


@pytest.mark.parametrize("argv,says", [
    (["daemon", "--check-config", ""], "daemon: argument --check-config: an empty value"),
    (["trace", "--duration", "nan"], "trace: argument --duration: nan is not a positive, finite number"),
    (["trace", "--duration", "1", "--record-maps", "{tmp}"], "trace: argument --record-maps: {tmp}: a directory"),
    (["ab", "report", "mine", "--out", "{tmp}/a-file"], "ab report: argument --out: {tmp}/a-file: not a directory"),
], ids=["check-config-empty", "duration-nan", "record-maps-dir", "report-out-file"])
def test_the_installed_command_refuses_before_any_work_in_one_line(argv, says, tmp_path):
    """Through the installed command: exit 2, one `nttrace:` line, within
    seconds. Fails where the value reaches the command (the daemon starts and
    listens, the trace runs until the timeout or for its whole duration)."""
    (tmp_path / "a-file").write_text("")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] == "daemon":
        argv += ["--listen", "127.0.0.1:1"]     # were the value taken, a port nothing else here uses
    t0 = time.monotonic()
    proc = run_nttrace(*argv, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert says.replace("{tmp}", str(tmp_path)) in one_line_error(proc)
    assert time.monotonic() - t0 < 30 and proc.stdout == ""


def test_quick_help_says_what_the_quick_checks_change():
    """`validate --help` says, for --quick, what every quick check that
    changes system state changes, as --list does. Fails if a quick check that
    changes something is added or reworded and --help is not."""
    help_text = " ".join(run_nttrace("validate", "--help", check=True).stdout.split())
    options = help_text.split("options:", 1)[1]
    quick = options.split(" --quick ", 1)[1].split(" --textfile-dir ", 1)[0]
    changing = [c for c in checks.catalog() if c.quick and c.triggers]
    assert changing
    for c in changing:
        assert c.id in quick and " ".join(c.triggers.split()) in quick, (c.id, c.triggers, quick)
