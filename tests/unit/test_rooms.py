"""The suite's rooms (tests/conftest.py): tests/unit needs no root, no
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
    ]


def test_the_room_is_the_first_directory_under_tests():
    assert room_of(REPO / "tests" / "unit" / "test_x.py") == "unit"
    assert room_of(REPO / "tests" / "lab" / "sub" / "test_x.py") == "lab"
    assert room_of(REPO / "tests" / "test_x.py") is None
    assert room_of(REPO / "lab" / "lab.py") is None
