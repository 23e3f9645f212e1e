# SPDX-License-Identifier: Apache-2.0
"""The lab's kernel builds: the posted series cut from mailing-list text,
and the failures a user must be told about (a patch that does not apply, a
build that breaks), each named by its step, within a bound, with nothing
left running (what needs no seeds nor build: tests/unit/test_kernel_build_inputs.py)."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lab import kernel_build, mailing_list
from mbox import mbox

SEEDS = kernel_build.SEEDS


@pytest.mark.needs("seeds")
@pytest.mark.parametrize("file,version,count,files_of_first", [
    ("zone-device-memmap-template-nt-v8.txt", "v8", 9, ["mm/mm_init.c"]),
    ("nt-demotion-rfc-v2-v3.txt", "v3", 3, ["arch/x86/include/asm/page_64.h", "arch/x86/lib/copy_page_64.S",
                                             "include/linux/highmem.h", "include/linux/mm.h", "mm/util.c"]),
    ("nt-demotion-rfc-v2-v3.txt", "v2", 3, ["arch/x86/include/asm/uaccess.h", "arch/x86/lib/copy_mc.c",
                                             "include/linux/highmem.h", "include/linux/mm.h", "mm/util.c"]),
])
def test_series_are_cut_from_the_posted_text(file, version, count, files_of_first):
    ps = mailing_list.series(SEEDS / file, version)
    assert [p.number for p in ps] == list(range(1, count + 1)) and {p.total for p in ps} == {count}
    assert ps[0].files == files_of_first
    for p in ps:
        # what patch(1) gets is the diff alone: no quoted copy, no signature
        assert p.diff.startswith("diff --git ") and "\n> " not in p.diff and "\n-- \n" not in p.diff


@pytest.mark.needs("seeds")
def test_quoted_copies_in_review_replies_are_not_taken_for_the_patch():
    text = (SEEDS / "nt-demotion-rfc-v2-v3.txt").read_text()
    assert "> diff --git a/arch/x86/include/asm/uaccess.h" in text  # the reply quoting v2 1/3
    v2_1 = mailing_list.series(SEEDS / "nt-demotion-rfc-v2-v3.txt", "v2", [1])[0]
    assert v2_1.source_line < text[:text.index("> diff --git")].count("\n")


@pytest.mark.needs("seeds")
@pytest.mark.parametrize("cte,attach", [("8bit", False), ("quoted-printable", False), ("base64", False),
                                        (None, True)])
def test_an_mbox_of_the_series_gives_the_same_diffs(tmp_path, cte, attach):
    posted = mailing_list.series(SEEDS / "nt-demotion-rfc-v2-v3.txt", "v3")
    f = tmp_path / "series.mbx"
    f.write_text(mbox(posted, cte, attach))
    got = mailing_list.series(f, "v3")
    assert [(p.number, p.total, p.diff) for p in got] == [(p.number, p.total, p.diff) for p in posted]
    assert got[0].title.startswith(posted[0].title) and "\n" not in got[0].title  # the header unfolded


def _series_file(tmp_path: Path, name: str, diff: str) -> Path:
    f = tmp_path / f"{name}.txt"
    f.write_text(f"[PATCH v1 1/1] {name}\n\n[nttrace test]\n\nInjected by the test suite.\n---\n{diff}-- \n2.0\n")
    return f


def _no_make_left(work: Path) -> None:
    ps = subprocess.run(["pgrep", "-af", f"O={work}"], capture_output=True, text=True).stdout
    assert ps.strip() == "", ps


def _inject(tmp_path, name: str, series: kernel_build.Series, bound_s: float) -> kernel_build.KernelBuildError:
    variant = kernel_build.Variant(name, (series,))
    work = kernel_build.CACHE / "work" / name
    t0 = time.monotonic()
    try:
        with pytest.raises(kernel_build.KernelBuildError) as err:
            kernel_build.build(variant, timeout=bound_s)
        assert time.monotonic() - t0 < bound_s
        _no_make_left(work / "build")
        return err.value
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for d in (kernel_build.CACHE / "kernels").glob(f"{name}-*"):
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.lab
@pytest.mark.needs("root", "kernel-build", "seeds")
def test_a_patch_that_does_not_apply_fails_its_step_with_the_log(tmp_path):
    text = (SEEDS / "zone-device-memmap-template-nt-v8.txt").read_text()
    # v8 4/9 removing a line 7.2 does not have (no fuzz can apply that)
    broken = text.replace("-\t\tzone_device_page_init_slow(page, pfn, zone_idx, nid, pgmap);",
                          "-\t\tzone_device_page_init_slow(page, pfn, zone_idx, nid, pgmap, 0);", 1)
    assert broken != text
    f = tmp_path / "v8-broken.txt"
    f.write_text(broken)
    err = _inject(tmp_path, "inject-noapply", kernel_build.Series(str(f), "v8"), bound_s=300)
    assert err.step.startswith("apply v8 4/9 (mm: add a template-based fast path") and "v8-broken.txt" in err.step
    assert "does not apply" in str(err) and "FAILED" in str(err)   # patch's own words, from the log


@pytest.mark.lab
@pytest.mark.needs("root", "kernel-build", "seeds")
def test_a_build_that_breaks_fails_its_step_with_the_log(tmp_path):
    # applies cleanly and configures; make stops on it in its first steps
    # (archprepare's host tool `relocs`, before scripts/, objtool and modpost)
    diff = ("diff --git a/arch/x86/tools/relocs_common.c b/arch/x86/tools/relocs_common.c\n"
            "--- a/arch/x86/tools/relocs_common.c\n+++ b/arch/x86/tools/relocs_common.c\n"
            "@@ -1,3 +1,4 @@\n+#error nttrace test: an injected build failure\n"
            " // SPDX-License-Identifier: GPL-2.0\n #include \"relocs.h\"\n \n")
    f = _series_file(tmp_path, "inject-build", diff)
    err = _inject(tmp_path, "inject-build", kernel_build.Series(str(f), "v1"), bound_s=600)
    assert err.step == "build (make bindeb-pkg)"
    assert "nttrace test: an injected build failure" in str(err)
