# SPDX-License-Identifier: Apache-2.0
"""The lab's kernel builds before any build: a series cut from text that is
cut short or lacks a patch, an mbox of one unnumbered patch, the config
check, a variant of one's own and bad arguments from the command line, and
the lock that keeps one builder a variant (the posted series and the builds
themselves: tests/lab/test_kernel_build.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab import kernel_build, mailing_list
from lab.locks import locked
from mbox import mbox


def test_a_cut_short_diff_and_a_missing_patch_are_errors(tmp_path):
    f = tmp_path / "series.txt"
    f.write_text("[PATCH v1 1/2] a\n\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n")
    with pytest.raises(mailing_list.SeriesError, match="cut short"):
        mailing_list.series(f, "v1")
    f.write_text("[PATCH v1 1/2] a\n\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-b\n+c\n")
    with pytest.raises(mailing_list.SeriesError, match="lacks patch"):
        mailing_list.series(f, "v1")
    with pytest.raises(mailing_list.SeriesError, match="no v9 patches"):
        mailing_list.series(f, "v9")


def test_an_mbox_of_one_unnumbered_patch_is_1_of_1(tmp_path):
    one = mailing_list.Patch("v2", 1, 1, "x: change b to c", "diff --git a/x b/x\n--- a/x\n+++ b/x\n"
                             "@@ -1,3 +1,3 @@\n a\n-b\n+c\n \n", 0)
    text = mbox([one], "quoted-printable").replace("[RFC PATCH v2 1/1]", "[PATCH v2]")
    (tmp_path / "one.mbox").write_text(text)
    (p,) = mailing_list.series(tmp_path / "one.mbox", "v2")
    assert (p.number, p.total, p.diff) == (1, 1, one.diff)
    # the same bytes read as plain text are not a patch: quoted-printable is undone only for an mbox
    assert mailing_list.is_mbox(text) and not mailing_list.is_mbox(text.split("\n", 1)[1])


def test_the_config_check_names_what_olddefconfig_dropped():
    fragment = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\n# a comment\n"
    config = "CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\n"
    assert kernel_build.config_problems(fragment, config) == ["CONFIG_B=n became y", "CONFIG_C=m became n"]
    assert kernel_build.config_problems(fragment, "CONFIG_A=y\nCONFIG_C=m\n") == []
    # fragments merge in order: a later line for an option is the one that must hold
    later = fragment + "# CONFIG_A is not set\n"
    assert kernel_build.config_problems(later, "CONFIG_A=y\nCONFIG_C=m\n") == ["CONFIG_A=n became y"]


def test_a_variant_of_ones_own_from_the_command_line(tmp_path):
    mine = tmp_path / "mine.mbx"
    mine.write_text("")
    v = kernel_build.variant_from_spec(f"mine={mine}:v9+nt-demotion-rfc-v2-v3.txt:v3")
    assert v.name == "mine" and [(s.version, s.path()) for s in v.series] == [
        ("v9", mine), ("v3", kernel_build.SEEDS / "nt-demotion-rfc-v2-v3.txt")]
    for bad, says in [("nt-v3=x.txt:v3", "new NAME"), ("mine=x.txt", "FILE:VERSION"), ("mine=x.txt:3", "v3")]:
        with pytest.raises(ValueError, match=says):
            kernel_build.variant_from_spec(bad)
        p = subprocess.run([sys.executable, "-m", "lab.kernel_build", bad], capture_output=True, text=True,
                           cwd=Path(kernel_build.__file__).parents[1],   # the checkout, as the README runs it
                           env={"NTTRACE_KERNEL_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"})
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and says in p.stderr, p.stderr


@pytest.mark.parametrize("args,says", [
    (["base", "nope=x.txt:3", "--out", "o"], "v3"),
    (["base", "no-such-variant", "--out", "o"], "unknown variant"),
    (["base", "nt-v3", "--boots", "0", "--out", "o"], "--boots must be at least 1"),
])
def test_the_ab_command_refuses_bad_arguments_in_one_line(tmp_path, args, says):
    """python3 -m lab.ab, as the README runs it: a bad variant or count is one
    line and exit 2, before any kernel is built or booted."""
    p = subprocess.run([sys.executable, "-m", "lab.ab", *args], capture_output=True, text=True, timeout=60,
                       cwd=Path(kernel_build.__file__).parents[1],
                       env={"NTTRACE_KERNEL_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and says in p.stderr, p.stderr
    assert not (tmp_path / "cache").exists()


def test_one_builder_per_variant_across_processes(tmp_path):
    """The lab's lock (lab/locks.py, kernel_build's and the image's): a
    second process asking for a variant another one is building waits for it
    (the suite's background prebuild and a test share the cache), and a
    holder killed with -9 does not leave it locked."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path\n"
        "from lab.locks import locked\n"
        "with locked(Path(sys.argv[2]) / 'locks' / 'variant-x'):\n    print('held', flush=True); time.sleep(30)\n"),
        str(Path(kernel_build.__file__).parents[1]), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import threading
        got = threading.Event()

        def take():
            with locked(tmp_path / "locks" / "variant-x"):
                got.set()
        t = threading.Thread(target=take, daemon=True)
        t.start()
        assert not got.wait(1.0), "the lock was taken while another process held it"
        holder.kill()                    # kill -9: the kernel drops its flock with the process
        assert got.wait(10), "the lock stayed held after its holder died"
    finally:
        holder.kill()
        holder.wait()
