# SPDX-License-Identifier: Apache-2.0
"""lab/guest_debs.py on the host, no guest booted: what the lab's
autopkgtest run asks apt for (read from debian/tests/control), the image's
dpkg status read out of a real ext2 image, the cache reused, and apt's
failure reported with its output."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from lab import guest_debs
from lab import lab as labmod

MKFS = shutil.which("mkfs.ext2") or "/sbin/mkfs.ext2"
STATUS = "Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n\n"


def write_control(tmp_path: Path, text: str) -> Path:
    control = tmp_path / "control"
    control.write_text(text)
    return control


def test_the_lab_run_asks_for_the_runner_and_the_dependencies_of_the_tests_it_runs():
    control = REPO / "debian" / "tests" / "control"
    tests = guest_debs.test_depends(control)
    assert set(tests) == {"smoke", "unit-room", "daemon"}
    assert set(guest_debs.LAB_SKIPS) <= set(tests)
    # unit-room is skipped in the guest: none of its own dependencies is fetched for it
    wanted = guest_debs.autopkgtest_packages(control)
    assert wanted == sorted({"autopkgtest", "dpkg-dev", *guest_debs.package_names(tests["daemon"])})
    assert "git" not in wanted and "python3-numpy" not in wanted
    # run them all and unit-room's come along
    everything = guest_debs.autopkgtest_packages(control, skips={})
    assert {"git", "python3-numpy", "python3-pytest", "bpftool"} <= set(everything)
    assert "@" not in everything


def test_depends_items_become_package_names():
    assert guest_debs.package_names(["@", "@builddeps@", "git", "python3-pytest (>= 7.0)",
                                     "python3:any", "bpftool [amd64]", "foo <!nocheck>", "aa (<< 2) | bb"]) \
        == ["git", "python3-pytest", "python3", "bpftool", "foo", "aa"]
    with pytest.raises(guest_debs.ControlError, match="Depends item"):
        guest_debs.package_names(["${misc:Depends}"])


def test_control_paragraphs_continuations_and_comments(tmp_path):
    control = write_control(tmp_path, "# a comment\nTests: one, two\nDepends: @,\n         git\n"
                                      "Restrictions: needs-root\n\n\nTests: three\n")
    assert guest_debs.test_depends(control) == {"one": ["@", "git"], "two": ["@", "git"], "three": ["@"]}
    assert guest_debs.autopkgtest_packages(control, skips={"two": "why"}) == ["autopkgtest", "dpkg-dev", "git"]
    with pytest.raises(guest_debs.ControlError, match="no test four to skip"):
        guest_debs.autopkgtest_packages(control, skips={"four": "why"})


@pytest.mark.parametrize("text, says", [
    ("Test-Command: true\nDepends: @\n", "without Tests"),
    ("  git\nTests: one\n", "continuation line before any field"),
    ("Tests: one\nnot a field\n", "not a field"),
])
def test_control_it_cannot_read_is_refused_naming_why(tmp_path, text, says):
    with pytest.raises(guest_debs.ControlError, match=says):
        guest_debs.test_depends(write_control(tmp_path, text))


def ext2_image(tmp_path: Path, status: str | None) -> Path:
    """An image directory as lab.image() makes one: root.img, an ext2
    filesystem holding /var/lib/dpkg/status (when `status` is given)."""
    root = tmp_path / "root"
    (root / "var" / "lib" / "dpkg").mkdir(parents=True)
    if status is not None:
        (root / "var" / "lib" / "dpkg" / "status").write_text(status)
    img = tmp_path / "0123456789abcdef"
    img.mkdir()
    subprocess.run([MKFS, "-q", "-F", "-d", str(root), str(img / "root.img"), "4M"], check=True,
                   capture_output=True)
    return img


def test_the_images_dpkg_status_is_read_out_of_its_root_image(tmp_path):
    assert guest_debs.image_status(ext2_image(tmp_path, STATUS)).decode() == STATUS


def test_an_image_without_a_dpkg_status_is_an_error_naming_it(tmp_path):
    with pytest.raises(labmod.LabError, match="could not read /var/lib/dpkg/status"):
        guest_debs.image_status(ext2_image(tmp_path, None))


def test_a_complete_fetch_is_reused_without_apt(tmp_path):
    img = tmp_path / "0123456789abcdef"
    img.mkdir()         # no root.img: a fetch that ran apt would fail reading it
    d = tmp_path / f"guest-debs-{guest_debs.cache_key(['autopkgtest'], img)}"
    (d / "debs").mkdir(parents=True)
    (d / "debs" / "autopkgtest_5.28_all.deb").write_bytes(b"!<arch>\n")
    (d / "complete").write_text("")
    assert guest_debs.fetch(["autopkgtest"], img, cache=tmp_path) == [d / "debs" / "autopkgtest_5.28_all.deb"]
    # another package list, another key: not this directory
    assert guest_debs.cache_key(["autopkgtest", "git"], img) != guest_debs.cache_key(["autopkgtest"], img)


def test_a_mirror_apt_cannot_use_fails_with_apts_words_and_leaves_no_complete_cache(tmp_path, monkeypatch):
    """A mirror with no archive in it (an empty local directory): apt's
    update fails; the error names the step and carries apt's output, and
    the cache directory is not marked complete."""
    (tmp_path / "mirror").mkdir()
    monkeypatch.setattr(guest_debs, "MIRROR", f"file://{tmp_path}/mirror")
    monkeypatch.setattr(guest_debs, "SECURITY", f"file://{tmp_path}/mirror")
    img = ext2_image(tmp_path, STATUS)
    with pytest.raises(labmod.LabError, match=r"(?s)^apt-get update \(private state\) for the guest's packages "
                                              r"failed \(100\): .*does not have a Release file"):
        guest_debs.fetch(["autopkgtest"], img, cache=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("guest-debs-*/complete"))
