# SPDX-License-Identifier: Apache-2.0
"""nttrace(1), as tools/manpage.py writes it from the command's parser:
every subcommand at every depth and every option of each is in it, and
groff reads it without a warning."""
import argparse
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from nttrace.cli import build_parser


def page(env=None) -> str:
    return subprocess.run([sys.executable, str(REPO / "tools" / "manpage.py")], capture_output=True, text=True,
                          check=True, env=env).stdout


def commands(parser, path=("nttrace",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def test_every_subcommand_and_option_is_in_the_page():
    text = page()
    found = list(commands(build_parser()))
    assert len(found) >= 12, found          # validate, trace, bench *, daemon, ab *
    for path, sub in found:
        assert f'.SS "{" ".join(path)}"' in text, path
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert "\\fB" + option.replace("-", "\\-") + "\\fR" in text, (path, option)
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "FILES", "SEE ALSO"):
        assert f".SH {section}\n" in text, section


def test_the_date_is_the_sources_so_one_source_builds_one_page():
    import os
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1796570263"}
    assert page(env) == page(env) and '"2026-12-06"' in page(env).split("\n")[0]


@pytest.mark.skipif(not shutil.which("groff"), reason="no groff on this host")
def test_groff_reads_it_without_a_warning(tmp_path):
    src = tmp_path / "nttrace.1"
    src.write_text(page())
    p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(src)], capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
