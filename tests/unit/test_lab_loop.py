# SPDX-License-Identifier: Apache-2.0
"""The A/B loop guest's host side that needs no guest: the packages a
kernel build keeps, the superseded kernels the cache keeps, a release per
variant, and the faults' arguments (the guest itself: tests/lab/test_ab_loop.py)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lab import ab_loop, kernel_build


def _touch(p: Path, text: str = "x") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_a_build_keeps_its_image_and_headers_packages_and_drops_the_rest(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    r = "7.2.13-nttrace-base"
    for name in (f"linux-image-{r}_7.2.13-3_amd64.deb", f"linux-headers-{r}_7.2.13-3_amd64.deb",
                 "linux-libc-dev_7.2.13-3_amd64.deb", "linux-upstream_7.2.13-3_amd64.buildinfo",
                 "linux-upstream_7.2.13-3_amd64.changes"):
        _touch(work / name)
    _touch(work / "build" / ".config")
    kept = kernel_build.keep_packages(work, out, r, tmp_path / "log", "base")
    assert [p.name for p in kept] == [f"linux-image-{r}_7.2.13-3_amd64.deb", f"linux-headers-{r}_7.2.13-3_amd64.deb"]
    assert sorted(p.name for p in (out / "debs").iterdir()) == sorted(p.name for p in kept)
    assert sorted(p.name for p in work.iterdir()) == ["build"]      # what dpkg-buildpackage wrote is gone
    k = kernel_build.Kernel(variant="base", directory=out, release=r, bzimage=out / "bzImage",
                            modules=out / "modules", info={})
    assert k.debs == sorted(kept)


def test_a_build_without_its_headers_package_fails_the_packaging_step(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    _touch(work / "linux-image-7.2.13-nttrace-base_1_amd64.deb")
    with pytest.raises(kernel_build.KernelBuildError) as err:
        kernel_build.keep_packages(work, out, "7.2.13-nttrace-base", tmp_path / "log", "base")
    assert err.value.step == "bindeb-pkg" and "linux-headers-7.2.13-nttrace-base_*.deb" in str(err.value)


def test_each_variant_has_a_release_of_its_own_and_builds_its_packages():
    for name, v in kernel_build.VARIANTS.items():
        cmd = kernel_build.make_command(Path("/b"), kernel_build.LAB_CONFIG, v)
        assert f"LOCALVERSION=-nttrace-{name}" in cmd and cmd[-1] == "bindeb-pkg", cmd
        assert f"DPKG_FLAGS=-d -P{kernel_build.DEB_PROFILES}" in cmd
    assert len({kernel_build.localversion(v) for v in kernel_build.VARIANTS.values()}) == len(kernel_build.VARIANTS)


def test_the_cache_keeps_the_new_kernel_and_the_newest_complete_one_before_it(tmp_path):
    kernels = tmp_path / "kernels"
    now = time.time()
    dirs = {}
    for i, (key, complete) in enumerate([("a" * 16, True), ("b" * 16, True), ("c" * 16, False), ("d" * 16, True)]):
        d = kernels / f"base-{key}"
        d.mkdir(parents=True)
        if complete:
            _touch(d / "complete")
            os.utime(d / "complete", (now - 100 + i, now - 100 + i))
        dirs[key[0]] = d
    other = _touch(kernels / "base-x-aaaaaaaaaaaaaaaa" / "complete").parent     # another variant's (name base-x)
    removed = kernel_build.prune_superseded("base", dirs["d"])
    assert sorted(p.name for p in removed) == [dirs["a"].name, dirs["c"].name]
    assert sorted(p.name for p in kernels.iterdir()) == sorted([dirs["b"].name, dirs["d"].name, other.name])


@pytest.mark.parametrize("text,want", [("base:5", ("base", 5.0)), ("nt-v3:2.5", ("nt-v3", 2.5))])
def test_a_power_cut_names_a_kernel_and_seconds(text, want):
    cut = ab_loop.PowerCut.parse(text)
    assert (cut.variant, cut.seconds) == want


@pytest.mark.parametrize("text", ["base", ":10", "base:-1", "base:soon"])
def test_a_power_cut_that_says_no_kernel_or_time_is_refused(text):
    with pytest.raises(ValueError, match="want VARIANT:SECONDS"):
        ab_loop.PowerCut.parse(text)
