# SPDX-License-Identifier: Apache-2.0
"""The BPF C a probe is compiled from is all installed: every header a
program includes with "..." (common.h, inflight.h) is in the installed
nttrace.bpf beside the .bpf.c files (setup.cfg's package_data, which the
Debian package's pybuild install uses too), where bcc finds it on the
include path nttrace compiles with."""
import re
from pathlib import Path

import nttrace
from conftest import REPO
from nttrace.probes import PROBES
from nttrace.probe_framework.base import compile_flags

INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def test_every_header_a_program_includes_is_installed_on_the_include_path():
    installed = Path(nttrace.__file__).parent / "bpf"
    assert f"-I{installed}" in compile_flags()
    included = set()
    for source in {cls.source for cls in PROBES.values()}:
        text = (installed / source).read_text()
        assert text == (REPO / "bpf" / source).read_text(), f"{source}: installed differs from the checkout's"
        included |= set(INCLUDE.findall(text))
    assert {"common.h", "inflight.h"} <= included
    for header in sorted(included):
        assert (installed / header).read_text() == (REPO / "bpf" / header).read_text(), header
    assert {p.name for p in (REPO / "bpf").glob("*.h")} <= {p.name for p in installed.glob("*.h")}


def test_every_program_that_times_a_call_pairs_it_through_inflight_h():
    """No program keeps an in-flight table of its own making: each map named
    *_inflight is inflight.h's direct-mapped array, reached through its macros."""
    users = []
    for path in sorted((REPO / "bpf").glob("*.bpf.c")):
        text = path.read_text()
        if "_inflight" not in text:
            continue
        users.append(path.name)
        assert '#include "inflight.h"' in text, path.name
        assert re.search(r"^BPF_ARRAY\(\w+_inflight, struct \w+_inflight, NTTRACE_INFLIGHT_SLOTS\);", text, re.M), \
            path.name
        assert not re.search(r"^BPF_HASH\(\w+_inflight", text, re.M), path.name
        assert "INFLIGHT_START(" in text and "INFLIGHT_FIND(" in text, path.name
    assert set(users) >= {"migrate.bpf.c", "memmap.bpf.c", "memremap.bpf.c", "reclaim.bpf.c"}
