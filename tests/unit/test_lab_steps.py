# SPDX-License-Identifier: Apache-2.0
"""lab.steps, the per-patch attribution, without a kernel: the step list's
bad input, a patch that does not apply (one line naming the patch and the
hunk, exit 2, no half-patched tree left, the steps before it kept), a step
that does not boot (reported failed, the others measured), and the step
table's arithmetic on made-up boots."""
import json
import math
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))
from lab import kernel_build, steps  # noqa: E402

SERIES = """\
From: Someone <someone@example.org>
Subject: [PATCH v1 1/2] tiny: add a line

---
diff --git a/hello.c b/hello.c
--- a/hello.c
+++ b/hello.c
@@ -1,3 +1,4 @@
 int a;
 int b;
+int c;
 int d;
--
2.40.0

From: Someone <someone@example.org>
Subject: [PATCH v1 2/2] tiny: change a line that is not there

---
diff --git a/hello.c b/hello.c
--- a/hello.c
+++ b/hello.c
@@ -1,3 +1,3 @@
 int x;
-int y;
+int z;
 int w;
--
2.40.0
"""


@pytest.mark.parametrize("text,message", [
    ("1-3,4,5,6-8,9", None), ("2-1", "runs backwards"), ("0,1", "outside the series' patches 1-9"),
    ("1,10", "outside"), ("4,1-3", "does not come after"), ("1,,2", "is not N or N-M"), ("a", "is not N or N-M"),
])
def test_the_step_list(text, message):
    if message is None:
        assert steps.parse_steps(text, 9) == [(1, 3), (4, 4), (5, 5), (6, 8), (9, 9)]
    else:
        with pytest.raises(ValueError, match=message):
            steps.parse_steps(text, 9)


def test_a_patch_that_does_not_apply_names_its_hunk_and_leaves_no_tree(tmp_path, monkeypatch):
    """prepare_source on a tiny tree: 1/2 applies, 2/2 does not; the error
    names the patch and the hunk, and the half-patched tree is gone."""
    mbox = tmp_path / "tiny.txt"
    mbox.write_text(SERIES)
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    (pristine / "hello.c").write_text("int a;\nint b;\nint d;\n")
    series = kernel_build.Series(str(mbox), "v1")
    variant = kernel_build.Variant("tiny-to-2", (kernel_build.Series(str(mbox), "v1", upto=2),), tree="tiny-steps")
    plan = [{"series": series, "patch": p, "fixups": []} for p in series.patches()]
    work = tmp_path / "work"
    with pytest.raises(kernel_build.KernelBuildError) as err:
        kernel_build.prepare_source(variant, pristine, plan, work, tmp_path / "log")
    assert err.value.step.startswith("apply v1 2/2 (tiny: change a line that is not there)")
    assert err.value.hunks == ["hello.c hunk #1 at line 1"]
    # only 1/2 applies: a step ending at 1 is a tree of its own
    one = kernel_build.Series(str(mbox), "v1", upto=1)
    assert [p.number for p in one.patches()] == [1]


def test_lab_steps_says_which_patch_and_hunk_in_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    mbox = tmp_path / "tiny.txt"
    mbox.write_text(SERIES)
    built = []

    def kernel_for(v):
        if v.name == "base":
            return "base-kernel"
        if v.series[0].upto == 2:
            exc = kernel_build.KernelBuildError(v.name, "apply v1 2/2 (tiny: change a line) from tiny.txt", None,
                                                "the patch does not apply")
            exc.hunks = ["hello.c hunk #1 at line 1"]
            raise exc
        built.append(v.name)
        return f"kernel-{v.name}"
    monkeypatch.setattr(steps, "kernel_for", kernel_for)
    rc = steps.main([f"{mbox}:v1", "--steps", "1,2", "--boots", "2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and built == ["v1-to-1"], (rc, built)
    assert err[-1] == ("lab.steps: step 2: v1 2/2 (tiny: change a line) from tiny.txt does not apply: "
                       "hello.c hunk #1 at line 1 (steps before it are built and cached)")


@pytest.mark.parametrize("argv,message", [
    (["nosuch.txt:v8", "--steps", "1"], "cannot read"), (["tiny.txt:8", "--steps", "1"], "want FILE:VERSION"),
    (["{mbox}:v1", "--steps", "3"], "outside the series' patches 1-2"),
    (["{mbox}:v1", "--steps", "1", "--boots", "1"], "--boots must be at least 2"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, capsys, argv, message):
    mbox = tmp_path / "tiny.txt"
    mbox.write_text(SERIES)
    argv = [a.replace("{mbox}", str(mbox)) for a in argv]
    rc = steps.main([*argv, "--out", str(tmp_path / "out")] + ([] if "--boots" in argv else ["--boots", "2"]))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0] and err[0].startswith("lab.steps: "), err


def _report(ms_fsdax: float) -> dict:
    calls = [{"latency_ns": int(ms_fsdax * 1e6 * (1.0 + 0.001 * i)), "nr_pages": 512, "pages_initialised": 512}
             for i in range(31)]
    return {"version": "x", "checks": [{"id": "kernel.memmap_latency", "status": "pass", "summary": "",
                                        "evidence": {"mode": "fsdax", "calls": calls}}]}


def test_a_step_that_does_not_boot_is_reported_and_the_others_are_measured(tmp_path, monkeypatch):
    mbox = tmp_path / "tiny.txt"
    mbox.write_text(SERIES.replace("2/2] tiny: change a line that is not there", "2/2] tiny: always use it"))
    monkeypatch.setattr(steps, "kernel_for", lambda v: type("K", (), {"variant": v.name, "info": {},
                                                                        "directory": tmp_path / v.name})())
    monkeypatch.setattr(steps.conditions, "wait_quiet", lambda *a, **k: {"state": "quiet"})
    speed = {"base": 20.0, "v1-to-1": 18.0, "v1-to-2": 12.0}

    class Run:
        def __init__(self, results, kernel):
            self.results, self.kernel = results, kernel
            self.elapsed_s, self.host_conditions = 1.0, {"state": "quiet", "others_share": 0.0, "busy_beside": []}

    def run(results, timeout, kernel, scenarios, cpu):
        if kernel.variant == "v1-to-1":
            raise steps.lab.LabError("the guest kernel panicked in scenario memmap_fsdax:\nBUG: planted")
        results.mkdir(parents=True, exist_ok=True)
        return Run(results, kernel)

    def save(run, scenarios, dest, kern):
        dest.mkdir(parents=True, exist_ok=True)
        p = dest / "memmap_fsdax.report.json"
        p.write_text(json.dumps(_report(speed[kern.variant] * (1 + 0.002 * len(list(dest.parent.iterdir()))))))
        return [p]
    monkeypatch.setattr(steps.lab, "run", run)
    monkeypatch.setattr(steps, "save_reports", save)
    out = tmp_path / "out"
    rc = steps.main([f"{mbox}:v1", "--steps", "1,2", "--boots", "4", "--out", str(out),
                     "--no-traffic"])   # its traffic boots would start QEMU (the section: test_traffic_report.py)
    assert rc == 0
    t = json.loads((out / "steps.json").read_text())["table"]
    rows = {r["step"]: r for r in t["subjects"]["fsdax"]["rows"]}
    assert rows["1"]["failed"] and "panicked" in rows["1"]["failed"] and rows["1"]["boots"] == 0
    assert rows["base"]["boots"] == rows["2"]["boots"] == 4
    # step 2 is compared with the last step measured (base), and the change is the series'
    assert rows["2"]["change_pct"] == pytest.approx(-40, abs=1) and rows["2"]["share_pct"] == pytest.approx(100)
    assert rows["2"]["cannot"] and "page_ref_set" in rows["2"]["cannot"][0]
    md = (out / "steps.md").read_text()
    assert "step failed" in md and "Step 1 failed" in md


def test_shares_add_up_to_the_whole_series():
    boots = {"base": [], "1-4": [], "5": []}
    for k in range(5):
        for label, ms in (("base", 20.0), ("1-4", 16.0), ("5", 10.0)):
            boots[label].append({"values": {"fsdax": {"primary": ms * (1 + 0.001 * k), "primary_label": "x",
                                                       "mean": ms}}, "page_ref_path": {}})
    st = [steps.Step(1, 4, ["a"]), steps.Step(5, 5, ["b"])]
    t = steps.table(st, boots, {})
    rows = {r["step"]: r for r in t["subjects"]["fsdax"]["rows"]}
    assert rows["1-4"]["share_pct"] + rows["5"]["share_pct"] == pytest.approx(100)
    assert rows["1-4"]["share_pct"] == pytest.approx(100 * math.log(16 / 20) / math.log(10 / 20))
    assert t["alpha_per_step"] == pytest.approx(0.025)
    assert rows["1-4"]["significant"] and rows["5"]["significant"]      # 5 boots, consistent shifts


def test_boots_a_step_are_enough_to_mark_a_step_at_the_corrected_alpha():
    """Four boots a step of five steps: the smallest exact p (0.0286) is
    above 0.05/5, so no step could ever be marked (the v8 run of 2026-12-05
    at 4 boots said so row by row). The default is the fewest that can."""
    from nttrace.ab import statistics
    assert steps.boots_to_mark(5) == 5 and steps.boots_to_mark(9) == 6
    for m in (1, 3, 5, 9, 12):
        n = steps.boots_to_mark(m)
        assert statistics.smallest_p(n, n) <= 0.05 / m < statistics.smallest_p(n - 1, n - 1)


# -- the recorded v8 run (benchmarks/lab-steps-v8-...: steps 1-3,4,5,6-8,9, 5 boots each) ----------
RECORDED_STEPS = REPO / "benchmarks" / "lab-steps-v8-xeon-vm-2026-12-05-45ed58d" / "steps.json"


def recorded_series(tmp_path: Path) -> tuple[kernel_build.Series, dict]:
    """The recorded run's series rebuilt from its step table's patch titles
    (one trivial patch each, in order), and the recorded run."""
    run = json.loads(RECORDED_STEPS.read_text())
    titles = [t for r in run["table"]["subjects"]["fsdax"]["rows"] for t in r.get("patches") or []]
    assert len(titles) == 9, titles
    mbox = "".join(f"From: Someone <someone@example.org>\nSubject: [PATCH v8 {n}/9] {t}\n\n---\n"
                   f"diff --git a/f{n}.c b/f{n}.c\n--- /dev/null\n+++ b/f{n}.c\n@@ -0,0 +1 @@\n+int x{n};\n--\n2.40.0\n\n"
                   for n, t in enumerate(titles, 1))
    (tmp_path / "v8.txt").write_text(mbox)
    return kernel_build.Series(str(tmp_path / "v8.txt"), "v8"), run


def test_each_step_is_named_by_the_patches_it_adds(tmp_path):
    """The recorded run's steps keep their names and patches; `--steps 4,5`
    (the rerun that reproduced fsdax 16.135 and devdax 13.731 ms) is steps
    1-4 and 5: its first kernel holds patches 1-4, and so does its name."""
    series, run = recorded_series(tmp_path)
    rows = {r["step"]: r["patches"] for r in run["table"]["subjects"]["fsdax"]["rows"] if r["step"] != "base"}
    got = steps.step_variants(series, steps.parse_steps(run["meta"]["steps"], 9))
    assert {s.label: s.titles for s, _v in got} == rows
    assert [v.name for _s, v in got] == [k.rsplit("-", 1)[0] for lab_, k in run["meta"]["kernels"].items()
                                         if lab_ != "base"]
    folded = steps.step_variants(series, steps.parse_steps("4,5", 9))
    assert [(s.label, s.titles) for s, _v in folded] == [("1-4", rows["1-3"] + rows["4"]), ("5", rows["5"])]
    assert [v.name for _s, v in folded] == ["v8-to-4", "v8-to-5"]      # the recorded run's kernels 4 and 5
    assert [s.label for s, _v in steps.step_variants(series, steps.parse_steps("2-3,5", 9))] == ["1-3", "4-5"]


def _boots_at(medians: dict[str, dict[str, float]]) -> dict[str, list[dict]]:
    """Five boots a step at the recorded medians (each boot a hundred-
    thousandth apart, as steady as the icount guest's boots)."""
    return {label: [{"values": {subj: {"primary": ms * (1 + 1e-5 * (k - 2)), "primary_label": "rebinds (n=30), min ms",
                                       "mean": ms} for subj, ms in by_subj.items()}, "page_ref_path": {}}
                    for k in range(5)] for label, by_subj in medians.items()}


def test_the_step_table_of_a_folded_step_names_its_patches_and_no_empty_heading(tmp_path):
    """`--steps 4,5` on the recorded medians of base, 4 and 5 (the same
    kernels): the first row is step 1-4 with its four patches, and with no
    step the lab cannot attribute, there is no such heading; the recorded
    run (steps 6-8 and 9 hold such notes) keeps it."""
    series, run = recorded_series(tmp_path)
    rec = {subj: {r["step"]: r["median"] for r in s["rows"]} for subj, s in run["table"]["subjects"].items()}
    medians = {new: {subj: rec[subj][old] for subj in rec} for new, old in (("base", "base"), ("1-4", "4"),
                                                                               ("5", "5"))}
    folded = [s for s, _v in steps.step_variants(series, steps.parse_steps("4,5", 9))]
    t = steps.table(folded, _boots_at(medians), {})
    md = steps.render_markdown(t, run["meta"])
    row = next(ln for ln in md.splitlines() if ln.startswith("| 1-4 |"))
    assert all(title in row for title in folded[0].titles) and len(folded[0].titles) == 4
    first = {subj: t["subjects"][subj]["rows"][1] for subj in ("fsdax", "devdax")}
    assert first["fsdax"]["change_pct"] == pytest.approx(100 * (rec["fsdax"]["4"] / rec["fsdax"]["base"] - 1), abs=0.01)
    assert "What the lab cannot attribute" not in md and "\n\n\n" not in md
    full = steps.render_markdown(run["table"], run["meta"])
    notes = full[full.index("What the lab cannot attribute:"):].split("\n\n")[1].splitlines()
    assert [n.split(":")[0] for n in notes] == ["- step 6-8", "- step 9"]


def test_a_step_measured_after_one_that_failed_says_its_change_holds_that_steps_patches():
    st = [steps.Step(1, 3, ["a", "b", "c"]), steps.Step(4, 4, ["d"]), steps.Step(5, 5, ["e"])]
    t = steps.table(st, _boots_at({"base": {"fsdax": 20.0}, "5": {"fsdax": 10.0}}) | {"1-3": [], "4": []},
                    {"1-3": "boot 1 did not complete", "4": "boot 1 did not complete"})
    row = t["subjects"]["fsdax"]["rows"][-1]
    assert row["since"] == "base" and row["unmeasured"] == ["1-3", "4"] and row["patches_since"] == list("abcd")
    md = steps.render_markdown(t, {"series": "s", "boots": 5, "cpu": "c", "finished": "f", "machine": "m",
                                   "commit": "x", "conditions": "quiet"})
    assert "| 5 | e (the change is from base: it also holds step 1-3, 4, not measured: a; b; c; d) |" in md
