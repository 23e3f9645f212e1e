# SPDX-License-Identifier: Apache-2.0
"""What the A/B report needs and says when it is missing: numpy for the
statistics (validate --baseline, nttrace ab's report), matplotlib for the
HTML page; each missing one is a line and exit 3, never a traceback; and a
failed boot between two builds of one release names both builds."""
import sys
from types import SimpleNamespace

import pytest

from nttrace.ab import start
from nttrace.ab.loop import expected_found, why_failed
from nttrace.errors import CapabilityError
from nttrace.ab import html as ab_html
from nttrace.ab import statistics


def test_the_statistics_without_numpy_are_one_capability_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)      # import numpy raises ImportError
    with pytest.raises(CapabilityError, match="numpy.*python3-numpy"):
        statistics._np()


def test_the_html_plots_without_matplotlib_are_one_capability_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(CapabilityError, match="matplotlib.*text, markdown and json"):
        ab_html._pyplot()


def test_ab_start_refuses_without_numpy_and_says_no_html_without_matplotlib(monkeypatch):
    real = start.importlib.util.find_spec
    monkeypatch.setattr(start.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("numpy", "matplotlib") else real(name, *a))
    found, missing = start.check_machine(SimpleNamespace(via="reboot"), {}, "")
    assert any("needs numpy" in str(e) for e in missing), missing
    assert any("no matplotlib" in line and "no HTML" in line for line in found), found


def test_a_failed_boot_of_the_same_release_names_both_builds():
    exp = {"release": "7.2.13", "build": "#1 SMP PREEMPT_DYNAMIC Sun Dec  6 07:07:28 UTC 2026"}
    got = {"release": "7.2.13", "build": "#1 SMP PREEMPT_DYNAMIC Sun Dec  6 07:26:01 UTC 2026"}
    line = why_failed({"expected": exp, "found": got})
    assert exp["build"] in line and got["build"] in line, line
    assert expected_found({"release": "6.12", "build": "x"}, {"release": "6.1", "build": "y"}) == \
        "expected 6.12, found 6.1"
