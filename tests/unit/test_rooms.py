# SPDX-License-Identifier: Apache-2.0
"""The suite's rooms (tests/plugin_rooms.py): tests/unit needs no root, no
kernel and no guest; a test marked lab boots a guest and lives in tests/lab.
A test filed where it does not fit stops the collection, named."""
from conftest import misfiled, room_of, REPO


def test_a_test_is_named_where_its_room_does_not_fit_it():
    tests = [("tests/unit/test_a.py::fits", "unit", {"browser"}, False),
             ("tests/unit/test_a.py::needs_root", "unit", {"root", "bcc"}, False),
             ("tests/unit/test_a.py::boots", "unit", set(), True),
             ("tests/live/test_b.py::boots", "live", {"root"}, True),
             ("tests/live/test_b.py::fits", "live", {"root", "tracepoint"}, False),
             ("tests/lab/test_c.py::fits", "lab", {"root", "qemu"}, True),
             ("tests/test_d.py::outside", None, {"root"}, True)]
    assert misfiled(tests) == [
        "tests/unit/test_a.py::needs_root: needs bcc, root, so it belongs in tests/live",
        "tests/unit/test_a.py::boots: boots a guest (marked lab) outside tests/lab",
        "tests/live/test_b.py::boots: boots a guest (marked lab) outside tests/lab",
        "tests/test_d.py::outside: outside the rooms, so no room's target runs it",
    ]


def test_the_room_is_the_first_directory_under_tests():
    assert room_of(REPO / "tests" / "unit" / "test_x.py") == "unit"
    assert room_of(REPO / "tests" / "lab" / "sub" / "test_x.py") == "lab"
    assert room_of(REPO / "tests" / "test_x.py") is None
    assert room_of(REPO / "lab" / "lab.py") is None


def test_no_two_rooms_hold_a_test_file_of_one_name():
    """The rooms are not packages: pytest imports each test file by its base
    name, and a second file of that name in another room stops the whole
    collection (it did: tests/unit and tests/live each had test_bpf_stats.py)."""
    seen: dict[str, str] = {}
    clashes = []
    for p in sorted((REPO / "tests").rglob("test_*.py")):
        room = room_of(p)
        if p.name in seen and seen[p.name] != room:
            clashes.append(f"{p.name}: {seen[p.name]} and {room}")
        seen.setdefault(p.name, room)
    assert not clashes, clashes
