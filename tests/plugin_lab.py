# SPDX-License-Identifier: Apache-2.0
"""The lab's kernels built in the background, and its guests booted while
the rest of the suite runs (a pytest plugin, loaded by conftest).

A cold run spends most of its time compiling the three lab kernels, and
most of the rest in single-threaded QEMU guests and tests that leave a core
idle. When the session holds the lab-kernel tests, their kernels start
building at once, niced (the tests keep the CPU whenever they want it), in
the order the tests ask for them; a test that needs a kernel still being
built waits on kernel_build's per-variant lock and takes it. The build is
ended at the session's end (TERM: its make is killed), whatever happened.
The guests boot in one pool (tests/lab_boots.py), and a lab test's body
runs inside the pool's host_work."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from plugin_capabilities import has
from plugin_rooms import room_of

REPO = Path(__file__).resolve().parents[1]
_PREBUILD: subprocess.Popen | None = None
SELECTED: set[str] = set()     # the session's test ids (what a lab test may prepare ahead for)
# each selected test's fixtures, as pytest resolved them (transitively), and its parameters
SELECTED_USES: dict[str, tuple[frozenset[str], dict]] = {}
# Set at the session's end: a boot's prepare step still waiting for a kernel
# then builds none (the interpreter's exit joins the pool's threads, so a
# build started there would hold an interrupted session open for its length)
ENDED = threading.Event()


def pytest_collection_finish(session):
    SELECTED.update(item.nodeid for item in session.items)
    SELECTED_USES.update({item.nodeid: (frozenset(getattr(item, "fixturenames", ())),
                                        dict(getattr(getattr(item, "callspec", None), "params", {})))
                          for item in session.items})
    _start_prebuild(session)
    _start_lab_boots(session)    # after: a lab kernel's boot waits for the prebuild to build it


def _start_prebuild(session) -> None:
    global _PREBUILD
    if os.environ.get("NTTRACE_LAB_PREBUILD", "1") == "0" or session.config.option.collectonly:
        return
    if not any("test_lab_kernels.py" in item.nodeid for item in session.items):
        return
    if not has("root", "kernel-build", "seeds"):
        return      # the tests themselves skip (or fail, where required) saying why
    from lab import kernel_build
    variants = lab_variants()
    (kernel_build.CACHE / "logs").mkdir(parents=True, exist_ok=True)
    with open(kernel_build.CACHE / "logs" / "prebuild.log", "w") as log:
        _PREBUILD = subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "lab.kernel_build", *variants],
                                     cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)


def lab_variants() -> list[str]:
    """The lab kernels this session builds and boots: NTTRACE_LAB_VARIANTS
    (comma-separated), by default all three, in the order they are built."""
    return [v for v in os.environ.get("NTTRACE_LAB_VARIANTS", "base,nt-v3,nt-v2").split(",") if v]


def prebuild_running() -> bool:
    """Whether the background build of the lab kernels is still going."""
    return _PREBUILD is not None and _PREBUILD.poll() is None


def lab_kernel(variant: str):
    """The variant's kernel (kernel_build.Kernel), or the error that stopped
    its build (for a lab boot's `prepare`, outside the pool's slots). While
    the background build runs, it is left to build the variant (niced, one
    kernel at a time), not raced by a second build here."""
    from lab import kernel_build
    while _left_to_the_prebuild(variant) and not ENDED.is_set():
        time.sleep(5)
    if ENDED.is_set():
        return kernel_build.KernelBuildError(variant, "wait for the background build", None, "the test session ended first")
    try:
        return kernel_build.build(variant)
    except kernel_build.KernelBuildError as exc:
        return exc


def _left_to_the_prebuild(variant: str) -> bool:
    from lab import kernel_build
    try:
        return prebuild_running() and not kernel_build.cached(variant)
    except Exception:   # a series that cannot be read: build() reports it as its step
        return False



def _start_lab_boots(session) -> None:
    if "lab_boots" not in sys.modules or session.config.option.collectonly:
        return      # no lab module collected
    if not any(item.get_closest_marker("lab") for item in session.items):
        return      # no lab test selected (make test-unit, -m "not lab"): no guest boots for nothing
    if not has("root", "qemu"):
        return      # the lab tests skip (or fail, where required) saying why
    from lab_boots import EARLY, POOL
    POOL.tmp = session.config._tmp_path_factory
    # the session's base directory is made on its first use and not under a
    # lock: made here, before any boot thread, so a boot thread and the first
    # test's tmp_path cannot each make one (a tmp_path that reads the base
    # directory before and after the other's making raises "is not a
    # normalized and relative path")
    POOL.tmp.getbasetemp()
    if EARLY:
        POOL.start_wanted()


def pytest_sessionfinish(session, exitstatus):
    ENDED.set()
    if "lab_boots" in sys.modules:
        sys.modules["lab_boots"].POOL.close()
    if _PREBUILD is None or _PREBUILD.poll() is not None:
        return
    os.killpg(_PREBUILD.pid, signal.SIGTERM)
    try:
        _PREBUILD.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(_PREBUILD.pid, signal.SIGKILL)
        _PREBUILD.wait()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A lab test's body runs inside the boot pool's host_work: never beside
    the lab A/B's measuring boots (tests/lab_boots.py)."""
    if room_of(item.path) != "lab" or "lab_boots" not in sys.modules:
        yield
        return
    with sys.modules["lab_boots"].POOL.host_work():
        yield

