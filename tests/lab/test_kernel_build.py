"""The lab's kernel builds: series cut from mailing-list text, the config
check, and the failures a user must be told about (a patch that does not
apply, a build that breaks), each named by its step, within a bound, with
nothing left running."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import kernel_build, mailing_list

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


def _mbox(patches, cte: str | None, attach: bool = False) -> str:
    """An mboxrd such as `git format-patch --stdout` or lore's t.mbox gives:
    long subjects folded, bodies in the transfer encoding given (or the diff
    attached as base64 text/x-diff), body lines "From " quoted as ">From "."""
    import email.message
    import email.policy
    out = []
    for p in patches:
        m = email.message.EmailMessage(policy=email.policy.SMTP.clone(linesep="\n"))
        m["From"] = "A U Thor <a@example.org>"
        m["Subject"] = f"[RFC PATCH {p.version} {p.number}/{p.total}] {p.title}, with words enough to fold the header"
        body = "From the commit message.\n\nSigned-off-by: A U Thor <a@example.org>\n---\n"
        if attach:
            m.set_content(body)
            m.add_attachment(p.diff, subtype="x-diff", cte="base64", filename=f"{p.number:04d}.patch")
        else:
            m.set_content(body + p.diff + "-- \n2.43.0\n", cte=cte)
        lines = [(">" + ln) if ln.lstrip(">").startswith("From ") else ln for ln in m.as_string().split("\n")]
        out.append("From mboxrd@z Thu Jan  1 00:00:00 1970\n" + "\n".join(lines) + "\n")
    return "\n".join(out)


@pytest.mark.needs("seeds")
@pytest.mark.parametrize("cte,attach", [("8bit", False), ("quoted-printable", False), ("base64", False),
                                        (None, True)])
def test_an_mbox_of_the_series_gives_the_same_diffs(tmp_path, cte, attach):
    posted = mailing_list.series(SEEDS / "nt-demotion-rfc-v2-v3.txt", "v3")
    f = tmp_path / "series.mbx"
    f.write_text(_mbox(posted, cte, attach))
    got = mailing_list.series(f, "v3")
    assert [(p.number, p.total, p.diff) for p in got] == [(p.number, p.total, p.diff) for p in posted]
    assert got[0].title.startswith(posted[0].title) and "\n" not in got[0].title  # the header unfolded


def test_an_mbox_of_one_unnumbered_patch_is_1_of_1(tmp_path):
    one = mailing_list.Patch("v2", 1, 1, "x: change b to c", "diff --git a/x b/x\n--- a/x\n+++ b/x\n"
                             "@@ -1,3 +1,3 @@\n a\n-b\n+c\n \n", 0)
    text = _mbox([one], "quoted-printable").replace("[RFC PATCH v2 1/1]", "[PATCH v2]")
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
    assert err.step == "build (make bzImage modules)"
    assert "nttrace test: an injected build failure" in str(err)


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


def test_one_builder_per_variant_across_processes(tmp_path, monkeypatch):
    """kernel_build's lock: a second process asking for a variant another
    one is building waits for it (the suite's background prebuild and a test
    share the cache), and a holder killed with -9 does not leave it locked."""
    monkeypatch.setattr(kernel_build, "CACHE", tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path\n"
        "from lab import kernel_build as kb\nkb.CACHE = Path(sys.argv[2])\n"
        "with kb._locked('variant-x'):\n    print('held', flush=True); time.sleep(30)\n"),
        str(Path(kernel_build.__file__).parents[1]), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import threading
        got = threading.Event()

        def take():
            with kernel_build._locked("variant-x"):
                got.set()
        t = threading.Thread(target=take, daemon=True)
        t.start()
        assert not got.wait(1.0), "the lock was taken while another process held it"
        holder.kill()                    # kill -9: the kernel drops its flock with the process
        assert got.wait(10), "the lock stayed held after its holder died"
    finally:
        holder.kill()
        holder.wait()
