# SPDX-License-Identifier: Apache-2.0
"""The suite's rooms (a pytest plugin, loaded by conftest): tests/unit: no
root, no kernel, seconds (`make test-unit`); tests/live: root on this host;
tests/lab: the QEMU guests and their kernels. A test filed in a room it does
not fit is a collection error that names it, so the unit room never comes to
need root or the kernel, nor to boot a guest. The lab's tests run last."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOMS = ("unit", "live", "lab")
UNIT_NEEDS = {"browser", "openssl", "promtool", "systemd-analyze", "dpkg-dev", "apt"}   # tools that run unprivileged


def room_of(path: Path) -> str | None:
    """The room a test file is in (None: a file outside the rooms)."""
    try:
        first = Path(path).resolve().relative_to(Path(__file__).resolve().parent).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in ROOMS else None


def misfiled(tests: list[tuple[str, str | None, set[str], bool]]) -> list[str]:
    """'test id: why' for each (test id, room, capabilities it needs, lab
    mark) that its room does not fit. A file outside the rooms fits none:
    `make test` would run it, but no room's target would."""
    out = []
    for nodeid, room, needs, lab in tests:
        if room is None:
            out.append(f"{nodeid}: outside the rooms, so no room's target runs it")
        elif lab and room in ("unit", "live"):
            out.append(f"{nodeid}: boots a guest (marked lab) outside tests/lab")
        elif room == "unit" and needs - UNIT_NEEDS:
            out.append(f"{nodeid}: needs {', '.join(sorted(needs - UNIT_NEEDS))}, so it belongs in tests/live")
    return out


def pytest_collection_modifyitems(session, config, items):
    """Each test in a room that fits it; the lab's tests last: their guests
    boot while the rest run (tests/lab_boots.py)."""
    wrong = misfiled([(item.nodeid, room_of(item.path), {c for m in item.iter_markers("needs") for c in m.args},
                       item.get_closest_marker("lab") is not None) for item in items])
    if wrong:
        raise pytest.UsageError("tests filed in the wrong room (tests/unit, tests/live, tests/lab):\n"
                                + "\n".join(wrong))
    items.sort(key=lambda item: item.get_closest_marker("lab") is not None)   # stable: order kept otherwise

