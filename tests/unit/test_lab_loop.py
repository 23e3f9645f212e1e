# SPDX-License-Identifier: Apache-2.0
"""The A/B loop guest's host side that needs no guest: the packages a
kernel build keeps, the superseded kernels the cache keeps, a release per
variant, and the faults' arguments (the guest itself: tests/lab/test_ab_loop.py)."""
from __future__ import annotations

import json
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


@pytest.mark.parametrize("text,want", [("base:5", ("base", 5.0, "validate")), ("nt-v3:2.5", ("nt-v3", 2.5, "validate")),
                                       ("booting:nt-v3:4", ("nt-v3", 4.0, "booting"))])
def test_a_power_cut_names_a_kernel_and_seconds(text, want):
    cut = ab_loop.PowerCut.parse(text)
    assert (cut.variant, cut.seconds, cut.event) == want


@pytest.mark.parametrize("text", ["base", ":10", "base:-1", "base:soon", "later:base:4", "booting::4"])
def test_a_power_cut_that_says_no_kernel_or_time_is_refused(text):
    with pytest.raises(ValueError, match=r"want \[booting:\]VARIANT:SECONDS"):
        ab_loop.PowerCut.parse(text)


def test_a_power_cut_is_timed_from_its_own_line_of_its_own_kernel():
    """validate: from the step's "running validate" line at that kernel's
    boot; booting: from the step's "booting slot" line that names the
    kernel's release (fails if a cut meant inside nt-v3's kexec were timed
    from base's)."""
    releases = {"base": "7.2.13-nttrace-base", "nt-v3": "7.2.13-nttrace-nt-v3"}
    lines = [(100.0, {"event": "boot", "kernel": "base"}),
             (130.0, {"event": "validate", "kernel": "base"}),
             (190.0, {"event": "booting", "kernel": "base",
                      "line": "nttrace ab: booting slot 2 of 2: patched 7.2.13-nttrace-nt-v3 (attempt 1, via kexec)"})]
    assert ab_loop.PowerCut("base", 5).due(lines, releases) == 135.0
    assert ab_loop.PowerCut("nt-v3", 5).due(lines, releases) is None
    assert ab_loop.PowerCut("nt-v3", 3, "booting").due(lines, releases) == 193.0
    assert ab_loop.PowerCut("base", 3, "booting").due(lines, releases) is None


def test_a_fault_names_what_and_which_kernel_and_lands_where_it_happens():
    assert ab_loop.fault("lockup:nt-v3") == "lockup:nt-v3"
    for bad in ("lockup", "reboot:nt-v3", "panic:"):
        with pytest.raises(ValueError, match="want FAULT:VARIANT"):
            ab_loop.fault(bad)
    k = {"base": "7.2.13-nttrace-base", "nt-v3": "7.2.13-nttrace-nt-v3"}
    sc = ab_loop.loop_scenario("x", [("base", k["base"]), ("patched", k["nt-v3"])], 1, [],
                               inject=("panic:nt-v3", "hang:base"))
    assert (sc["base"], sc["patched"], sc["inject"], sc["initramfs"]) == (k["base"], k["nt-v3"], ["hang:base"],
                                                                          [["panic", "nt-v3"]])
    series = ab_loop.loop_scenario("s", [("stock", ab_loop.STOCK), ("base", k["base"])], 1, [])
    assert series["series"] == [("stock", ab_loop.STOCK), ("base", k["base"])] and "base" not in series


def test_a_cut_inside_the_kexec_comes_when_the_console_shows_the_shutdown_begun(tmp_path):
    """A "booting" cut is due `seconds` after the step's line, or sooner,
    as soon as the guest's console shows the services stopping after that
    line: a cut timed from the line alone lands in the next kernel's boot
    on a host that runs the guest faster. Fails if the console is not read
    (the cut waits out its seconds), or if a shutdown printed before the
    step asked for the boot (an earlier loop's) is taken for this one."""
    releases = {"base": "7.2.13-nttrace-base", "nt-v3": "7.2.13-nttrace-nt-v3"}
    boots, console = tmp_path / "ab-boots.jsonl", tmp_path / "console.log"
    cut = ab_loop.PowerCut("nt-v3", 30, "booting")
    w = ab_loop._Watcher(boots, tmp_path / "monitor", [cut], releases, console)
    console.write_text("         Stopping getty@tty1.service - Getty on tty1...\n")    # an earlier shutdown
    boots.write_text(json.dumps({"event": "boot", "kernel": "base"}) + "\n")
    w._read()
    w._read_console(w._armed(set()))
    boots.write_text(boots.read_text() + "not json\n" + json.dumps(
        {"event": "booting", "line": "nttrace ab: booting slot 2 of 2: patched 7.2.13-nttrace-nt-v3 (attempt 1)"}) + "\n")
    w._read()
    assert w._armed(set()) == [2]
    w._read_console(w._armed(set()))
    asked = w._lines()[2][0]
    assert w.shutdown_seen == {} and cut.due(w._lines(), releases, w.shutdown_seen) == asked + 30
    with console.open("a") as f:
        f.write("[   88.1] nttrace: ...\n         Stopping \x1b[0;1;39mkexec-load.service\x1b[0m - Load kernel...\n")
    w._read_console(w._armed(set()))
    assert list(w.shutdown_seen) == [2] and w._armed(set()) == []
    assert cut.due(w._lines(), releases, w.shutdown_seen) == w.shutdown_seen[2] < asked + 30
    # a validate cut is timed from its line alone
    assert ab_loop.PowerCut("base", 5).due([(10.0, {"event": "validate", "kernel": "base"})], releases, {0: 11.0}) == 15.0
