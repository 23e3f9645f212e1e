# SPDX-License-Identifier: Apache-2.0
"""The one rule for command-line values: every option of every subcommand
that takes a value parses it with one of the typed parsers below (argparse's
`type=`), so a bad value is refused while the command line is read, before
any work starts, in one line that names the flag, exit 2 (nttrace.cli turns
argparse's error into a UsageError).

What each refuses:
  Text          an empty or blank string (an empty value is never "not given")
  Count         what is not an integer, or one outside [minimum, maximum]
  Number        what is not a number, NaN and infinities, or one outside its bounds
  CheckPattern  a --check pattern that selects no check of the catalog
  ProbeNames    an empty list, an empty item, an unknown probe
  TextList      an empty list or an empty item
  ListenAddress what is not ADDR:PORT (the daemon config's own rule)
  LoopName      what `nttrace ab` cannot name a directory by
  KernelSeries  an `ab start --series` list it cannot read (fewer than two
                kernels, an empty one, a label twice or not a plain word)
  LocalTime     what is not a local time HH:MM
  InputFile     a path that is not an existing, readable file
  InputDir      a path that is not an existing directory
  OutputFile    a directory, or a file whose directory does not exist or is
                not writable: checked before tracing, not after it
  OutputDir     a file, or a directory that cannot be made or written

Each parser also gives one value it takes (example) and the values of its
kind it refuses (bad_values): tests/unit/test_option_values.py walks every
option the parser holds and feeds it those, so an option added later is
covered by being given one of these parsers, and the test refuses an option
that has none.
"""
from __future__ import annotations

import argparse
import errno
import math
import os
from pathlib import Path


class OptionValue:
    """A typed parser: called with the option's text, returns its value or
    raises argparse.ArgumentTypeError with the reason (argparse puts the
    flag in front of it)."""

    def __call__(self, text: str):
        if not text.strip():
            raise argparse.ArgumentTypeError("an empty value: give one, or leave the option out")
        return self.parse(text)

    def parse(self, text: str):
        return text

    def example(self, tmp: Path) -> str:
        """A value this parser takes (files and directories made under tmp)."""
        raise NotImplementedError

    def bad_values(self, tmp: Path) -> list[str]:
        """Values of this kind it refuses."""
        return ["", " "]


class Text(OptionValue):
    """Any non-blank string (a namespace, a kernel, a command line)."""

    def __init__(self, example: str = "x"):
        self._example = example

    def example(self, tmp: Path) -> str:
        return self._example


class Count(OptionValue):
    """An integer in [minimum, maximum] (maximum None: no bound)."""

    def __init__(self, minimum: int, maximum: int | None = None):
        self.minimum, self.maximum = minimum, maximum

    def _range(self) -> str:
        if self.maximum is not None:
            return f"an integer from {self.minimum} to {self.maximum}"
        return "a positive integer" if self.minimum == 1 else f"an integer of at least {self.minimum}"

    def parse(self, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {self._range()}") from None
        if value < self.minimum or (self.maximum is not None and value > self.maximum):
            raise argparse.ArgumentTypeError(f"{value} is not {self._range()}")
        return value

    def example(self, tmp: Path) -> str:
        return str(self.minimum)

    def bad_values(self, tmp: Path) -> list[str]:
        out = super().bad_values(tmp) + ["x", "1.5", str(self.minimum - 1)]
        return out + ([str(self.maximum + 1)] if self.maximum is not None else [])


class Number(OptionValue):
    """A finite number within its bounds: `above` (exclusive) or `at_least`
    (inclusive) below, `below` (exclusive) above; `unit` words it."""

    def __init__(self, above: float | None = None, at_least: float | None = None, below: float | None = None,
                 unit: str = ""):
        self.above, self.at_least, self.below, self.unit = above, at_least, below, unit

    def _range(self) -> str:
        unit = f" of {self.unit}" if self.unit else ""
        if self.above is not None and self.below is not None:
            return f"a number{unit} between {self.above:g} and {self.below:g}"
        if self.above == 0:
            return f"a positive, finite number{unit}"
        if self.at_least == 0:
            return f"a finite number{unit}, 0 or more"
        if self.above is not None:
            return f"a finite number{unit} above {self.above:g}"
        return f"a finite number{unit} of at least {self.at_least:g}"

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {self._range()}") from None
        if (not math.isfinite(value) or (self.above is not None and value <= self.above)
                or (self.at_least is not None and value < self.at_least)
                or (self.below is not None and value >= self.below)):
            raise argparse.ArgumentTypeError(f"{text.strip()} is not {self._range()}")
        return value

    def example(self, tmp: Path) -> str:
        low = self.above if self.above is not None else self.at_least
        return f"{(low or 0) + 1:g}"

    def bad_values(self, tmp: Path) -> list[str]:
        out = super().bad_values(tmp) + ["x", "nan", "inf", "-inf"]
        if self.above is not None:
            out.append(f"{self.above:g}")
        if self.at_least is not None:
            out.append(f"{self.at_least - 1:g}")
        if self.below is not None:
            out.append(f"{self.below:g}")
        return out


def _by_its_rule(rule, text: str, prefix: str):
    """`rule(text)`, a rule that lives with what it guards and raises
    UsageError: its refusal, less `prefix`, is the option's."""
    from nttrace.errors import UsageError
    try:
        return rule(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(prefix)) from None


class CheckPattern(OptionValue):
    """A --check pattern (a glob, an id, a family) that selects at least one
    check of the catalog: the catalog's own rule, nttrace.validate.checks.select,
    which also refuses at run time a pattern --quick leaves with nothing."""

    def parse(self, text: str) -> str:
        from nttrace.validate import checks
        _by_its_rule(lambda t: checks.select([t], quick=False), text, "--check ")
        return text

    def example(self, tmp: Path) -> str:
        return "env.core"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + ["zzz", "probe.migrat"]


class TextList(OptionValue):
    """Comma-separated items, none empty; returns them joined by commas,
    blanks around them dropped."""

    def items(self, text: str) -> list[str]:
        items = [i.strip() for i in text.split(",")]
        if any(not i for i in items):
            raise argparse.ArgumentTypeError(f"{text!r} has an empty item (items are separated by one comma)")
        return items

    def parse(self, text: str) -> str:
        return ",".join(self.items(text))

    def example(self, tmp: Path) -> str:
        return "a,b"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + [",", "a,,b", "a,"]


class ProbeNames(TextList):
    """Probe names, comma-separated, each one of nttrace.probes.PROBES;
    returns them as TextList does (its users split it)."""

    def parse(self, text: str) -> str:
        from nttrace.probes import PROBES
        items = self.items(text)
        unknown = [n for n in items if n not in PROBES]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown probe {', '.join(unknown)} (choose from {', '.join(PROBES)})")
        return ",".join(items)

    def example(self, tmp: Path) -> str:
        return "migrate"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + ["zzz", "migrate,zzz"]


class ListenAddress(OptionValue):
    """ADDR:PORT, by the daemon configuration's rule (one rule for both)."""

    def parse(self, text: str) -> str:
        from nttrace.daemon.config import parse_listen
        _by_its_rule(lambda t: parse_listen(t, "listen"), text, "listen: ")
        return text

    def example(self, tmp: Path) -> str:
        return "127.0.0.1:9435"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + ["9435", "localhost", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                                          "example.org:80"]


class LoopName(OptionValue):
    """An `nttrace ab` loop's name, by the loops' store's rule."""

    def parse(self, text: str) -> str:
        from nttrace.ab import store
        return _by_its_rule(store.check_name, text, "ab: NAME ")

    def example(self, tmp: Path) -> str:
        return "mine"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + [".x", "a/b", "../x", "x" * 65]


class KernelSeries(OptionValue):
    """`ab start --series [LABEL=]K0,[LABEL=]K1,...`, by the loop's schedule's
    rule (nttrace.ab.schedule.parse_series); the kernels themselves are
    resolved when the loop starts."""

    def parse(self, text: str) -> str:
        from nttrace.ab import schedule
        _by_its_rule(schedule.parse_series, text, "ab start --series: ")
        return text

    def example(self, tmp: Path) -> str:
        return "base=6.1.0-base,1-3=6.1.0-v9-3,6.1.0-v9"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + ["6.1.0-base", "a,,b", "x=a,x=b", "a b=k,c"]


class LocalTime(OptionValue):
    """HH:MM on the local clock, by `ab start --until`'s rule."""

    def parse(self, text: str) -> str:
        from nttrace.ab import start
        _by_its_rule(start.until_time, text, "ab start --until ")
        return text

    def example(self, tmp: Path) -> str:
        return "06:30"

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + ["6", "25:00", "06:60", "6.30", "tomorrow"]


def _a_file(tmp: Path) -> Path:
    f = tmp / "a-file"
    if not f.exists():
        f.write_text("{}\n")
    return f


class InputFile(OptionValue):
    """An existing file this process can read."""

    def parse(self, text: str) -> str:
        p = Path(text)
        if not p.exists():
            raise argparse.ArgumentTypeError(f"{text}: {os.strerror(errno.ENOENT)}")
        if p.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: a directory, not a file")
        if not os.access(p, os.R_OK):
            raise argparse.ArgumentTypeError(f"{text}: {os.strerror(errno.EACCES)}")
        return text

    def example(self, tmp: Path) -> str:
        return str(_a_file(tmp))

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + [str(tmp / "missing.json"), str(tmp)]


class InputDir(OptionValue):
    """An existing directory."""

    def parse(self, text: str) -> str:
        if not os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{text}: not a directory")
        return text

    def example(self, tmp: Path) -> str:
        return str(tmp)

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + [str(tmp / "missing"), str(_a_file(tmp))]


def _writable_dir(d: Path, text: str) -> None:
    """`d`, the directory `text` is written into (or `text` itself), is a
    directory this process may write."""
    where = "" if d == Path(text) else f"its directory {d} is "
    if not d.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {where}not a directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: {where}not writable")


class OutputFile(OptionValue):
    """A file to write: not a directory, in an existing, writable directory
    (checked here, so a bad path stops the command before its work, not
    after it)."""

    def parse(self, text: str) -> str:
        p = Path(text)
        if p.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: a directory, not a file")
        _writable_dir(p.parent, text)
        if p.exists() and not os.access(p, os.W_OK):
            raise argparse.ArgumentTypeError(f"{text}: not writable")
        return text

    def example(self, tmp: Path) -> str:
        return str(tmp / "out.json")

    def bad_values(self, tmp: Path) -> list[str]:
        return super().bad_values(tmp) + [str(tmp), str(tmp / "missing" / "out.json"),
                                          str(_a_file(tmp) / "out.json")]


class OutputDir(OptionValue):
    """A directory to write into: an existing, writable one, or (`create`)
    one the command makes, whose nearest existing ancestor is a writable
    directory."""

    def __init__(self, create: bool = False):
        self.create = create

    def parse(self, text: str) -> str:
        p = Path(text)
        if p.exists() or not self.create:
            if not p.is_dir():
                raise argparse.ArgumentTypeError(f"{text}: not a directory")
            _writable_dir(p, text)
            return text
        ancestor = p.absolute().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        _writable_dir(ancestor, text)
        return text

    def example(self, tmp: Path) -> str:
        return str(tmp / "new-dir") if self.create else str(tmp)

    def bad_values(self, tmp: Path) -> list[str]:
        out = super().bad_values(tmp) + [str(_a_file(tmp)), str(_a_file(tmp) / "under-a-file")]
        return out + ([] if self.create else [str(tmp / "missing")])
