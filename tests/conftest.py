# SPDX-License-Identifier: Apache-2.0
"""What every room shares: the checkout's paths, the installed command
(run_nttrace, one_line_error), the running kernel's own tables, a document's
excerpts, and the fixtures below. The suite's jobs are plugins of their own:
host capabilities and `needs` marks (plugin_capabilities), the rooms
(plugin_rooms), the lab's background kernel build and guest boots
(plugin_lab); the BPF-leak helpers are in bpf_leaks. Their names that tests
import are imported here too (`from conftest import ...`).
"""
from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.register_assert_rewrite("plugin_capabilities", "plugin_rooms", "plugin_lab", "bpf_leaks")

from bpf_leaks import bpf_programs, bpftool_prog_ids, held_by, nttrace_programs, program_holders, programs_left  # noqa: F401
from plugin_capabilities import CAPABILITIES, has, required  # noqa: F401
from plugin_lab import SELECTED, SELECTED_USES, lab_kernel, lab_variants, prebuild_running  # noqa: F401
from plugin_rooms import ROOMS, UNIT_NEEDS, misfiled, room_of  # noqa: F401

pytest_plugins = ["plugin_capabilities", "plugin_rooms", "plugin_lab"]

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# the version string of the kernel image the suite makes (kernel_image)
TEST_IMAGE_VERSION = "7.2.13-nttrace-test (tests@nttrace) #1 SMP PREEMPT_DYNAMIC Sun Dec 6 00:00:00 UTC 2026"


@pytest.fixture(scope="session")
def kernel_image(tmp_path_factory) -> Path:
    """An x86 bzImage made here, in every room and on every host: the boot
    sector's 0xAA55, the setup header ("HdrS" at 0x202, protocol 2.15,
    loaded high) and its kernel_version field (0x20E) pointing at
    TEST_IMAGE_VERSION: what `nttrace ab start` reads of an image (its
    release and build string) and what file(1) reads of one. It boots
    nothing: the tests that take it never boot."""
    data = bytearray(0x400)
    data[0x1F1] = 1                                   # setup_sects
    data[0x1FE:0x200] = b"\x55\xaa"
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x206, 0x020F)
    struct.pack_into("<H", data, 0x20E, 0x400 - 0x200)
    data[0x211] = 0x01                                # loadflags: LOADED_HIGH (a bzImage)
    data += TEST_IMAGE_VERSION.encode() + b"\0" + bytes(4096)
    path = tmp_path_factory.mktemp("kernel-image") / "vmlinuz"
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(autouse=True)
def ab_unit_dir(request, tmp_path_factory, monkeypatch):
    """In the unit room, the loop's unit directory (nttrace.ab.unit.UNIT_DIR)
    is the test's tmp_path/units, where tests/ab_loop_machine.py's make_loop
    writes a loop's drop-ins: no unit test reads or writes the host's
    /etc/systemd/system."""
    if room_of(request.node.path) != "unit" or "tmp_path" not in request.fixturenames:
        return None
    from nttrace.ab import unit
    d = request.getfixturevalue("tmp_path") / "units"      # made by whatever writes into it
    monkeypatch.setattr(unit, "UNIT_DIR", d)
    return d


def run_nttrace(*args, check=False, timeout=120, env=None, **kw) -> subprocess.CompletedProcess:
    """Run the installed `nttrace` console script (the one a user runs)."""
    exe = Path(sys.executable).with_name("nttrace")
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"nttrace {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def one_line_error(proc) -> str:
    """The single stderr line of a failed nttrace run (never a traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("nttrace: ")
    return lines[0]



def live_tracepoint_tables() -> tuple[dict[str, int], dict[str, int]]:
    """The running kernel's own facts, read here without nttrace: the
    __print_symbolic tables of mm_migrate_pages_start's format file, as
    ({mode name: value}, {reason label: value}). On a v2 kernel MIGRATE_SYNC
    is 3, on the others 2; the tests below take it from here, never from
    this host."""
    fmt = Path("/sys/kernel/tracing/events/migrate/mm_migrate_pages_start/format").read_text()
    tables = re.findall(r"__print_symbolic\(REC->(\w+),((?:\s*\{[^}]*\},?)+)\)", fmt)
    out = {}
    for field, body in tables:
        out[field] = {name: int(value, 0) for value, name in re.findall(r'\{\s*([-\dxa-fA-F]+)\s*,\s*"([^"]+)"\s*\}', body)}
    return out["mode"], out["reason"]


def live_nt_revision() -> str:
    """The NT demotion revision the running kernel's tracepoint table names."""
    from nttrace.kernel.metadata import NT_MODES
    modes, _reasons = live_tracepoint_tables()
    found = sorted(set(modes) & set(NT_MODES))
    return NT_MODES[found[0]] if found else "none"


def assert_excerpt(block: str, path: str, where: str) -> None:
    """An example shown in a document is an excerpt of a recorded output:
    its lines stand in the file at `path` in the same order ("..." marks what
    is left out)."""
    recorded = (REPO / path).read_text().splitlines()
    at = 0
    for line in block.splitlines():
        if line.strip() == "...":
            continue
        assert line in recorded[at:], f"{where}'s excerpt of {path}: {line!r} is not in it (in this order)"
        at = recorded.index(line, at) + 1
