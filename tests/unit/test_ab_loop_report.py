# SPDX-License-Identifier: Apache-2.0
"""The loop's report: validate's own A/B of the kept runs (its statistics
rules unchanged: 2 runs a side are not testable), in every format, with
what only the loop knows: the kernels, the schedule, the failed boots, and
nttrace's version and commit in each run (said when they differ)."""
import json

from ab_loop_machine import DEFAULT, begun, first_slot_measured
from nttrace.ab import report, step


def loop_with(tmp_path, rounds=2, seed=4, lands=None, before_boot=None):
    loop, sim, m = begun(tmp_path, rounds=rounds, seed=seed)
    n = 0
    while loop.state()["state"] == "running":
        n += 1
        if before_boot:
            before_boot(n, sim)
        sim.reboot(lands(n) if lands else None)
        step.step(loop, m)
    return loop


def test_two_boots_a_side_report_every_format_and_say_not_testable(tmp_path):
    loop = loop_with(tmp_path, lands=lambda n: DEFAULT if n == 1 else None)
    written = report.write_all(loop)
    assert sorted(p.name for p in loop.report_dir.iterdir()) == ["ab.html", "ab.json", "ab.md", "ab.txt"]
    text = written["text"].read_text()
    assert "runs kept: base 2 of 2, patched 2 of 2" in text
    order = " | ".join(" ".join("B" if s.side == "base" else "P" for s in loop.slots() if s.round == r) for r in (1, 2))
    assert f"schedule: 2 rounds, seed 4, order (B base, P patched): {order}" in text
    first = loop.slots()[0]
    assert f"failed boots (1):\n    slot 1 ({first.side})" in text
    assert "found 6.1.0-57-amd64" in text
    assert "not testable at 2/2 runs" in text               # validate's rule, kept: never a verdict at 2 a side
    data = json.loads(written["json"].read_text())
    assert data["loop"]["runs"]["base"]["kept"] == 2 and data["loop"]["runs"]["patched"]["kept"] == 2
    assert [b["slot"] for b in data["loop"]["failed_boots"]] == [1]
    assert [s["side"] for s in data["loop"]["schedule"]] == [s.side for s in loop.slots()]
    assert data["ab"]["baseline_comparison"] and data["loop"]["nttrace_changed"] is False
    rows = data["ab"]["baseline_comparison"]
    assert {tuple(r["runs"]) for r in rows} == {(2, 2)}
    primary = [r for r in rows if r["role"] == "primary"]
    assert primary and all(r["stats"]["significant"] is False and r["stats"]["smallest_p"] > r["stats"]["alpha"]
                           for r in primary)
    html = written["html"].read_text()
    assert "<section id='ab-loop'>" in html and html.index("</h1>") < html.index("ab-loop")
    assert "failed boots (1)" in html
    md = written["markdown"].read_text()
    assert md.startswith("```\nnttrace ab t: complete") and "| " in md


def test_a_report_before_both_sides_have_a_run_says_so(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=4)
    text = report.render(loop, "text")
    assert "no A/B yet: " in text and "runs kept: " in text
    data = json.loads(report.render(loop, "json"))
    assert data["ab"] is None and data["ab_missing"].startswith("no A/B yet")


def test_runs_taken_by_different_nttrace_builds_are_said(tmp_path):
    def upgrade(n, sim):
        if n == 3:
            sim.nttrace_ident = {"version": "0.2.0", "commit": "def", "package_sha256": "p2"}
    loop = loop_with(tmp_path, before_boot=upgrade)
    text = report.render(loop, "text")
    assert "NTTRACE CHANGED DURING THE LOOP" in text
    assert "0.1.0 commit abc (package p1): slots 1, 2" in text
    assert "0.2.0 commit def (package p2): slots 3, 4" in text
    assert json.loads(report.render(loop, "json"))["loop"]["nttrace_changed"] is True


def test_the_reset_the_loop_relies_on_and_the_config_differences_are_printed_where_the_schedule_has_them(
        tmp_path, capsys):
    from nttrace.ab import status, store
    loop = loop_with(tmp_path)
    # a schedule from before the reset and preflight records: neither line
    text = report.render(loop, "text")
    assert "  reset: " not in text and "config differences" not in text
    sched = loop.schedule()
    sched["reset"] = {"text": "a panic reboots after 10 s (panic=10); a hang is reset by i6300ESB timer "
                              "(/dev/watchdog0) after 60 s", "cmdline_added": ["panic=10"]}
    sched["preflight"] = {"config_diff": ["CONFIG_NT_MEMMAP: base=not set patched=y",
                                          "CONFIG_LOCALVERSION: base=\"\" patched=\"-nt\""],
                          "default_boot": {"loader": "grub", "entry": "0", "release": "6.1.0-57-amd64", "how": "x"}}
    store.write_json(loop.schedule_path, sched)
    text = report.render(loop, "text")
    assert ("  via kexec; command line: root=/dev/vda ro\n  reset: a panic reboots after 10 s (panic=10); a hang is "
            "reset by i6300ESB timer (/dev/watchdog0) after 60 s\n") in text
    assert ("  config differences (base vs patched): 2\n    CONFIG_NT_MEMMAP: base=not set patched=y\n"
            "    CONFIG_LOCALVERSION: base=\"\" patched=\"-nt\"\n") in text
    data = json.loads(report.render(loop, "json"))["loop"]
    assert data["reset"].startswith("a panic reboots after 10 s") and len(data["config_diffs"]["patched"]) == 2
    status.print_status(status.status(loop))
    out = capsys.readouterr().out
    assert "  reset: a panic reboots after 10 s (panic=10)" in out
    assert "  config differences (base vs patched): 2\n    CONFIG_NT_MEMMAP: base=not set patched=y\n" in out
    sched["preflight"]["config_diff"] = []
    store.write_json(loop.schedule_path, sched)
    assert "  config differences (base vs patched): none\n" in report.render(loop, "text")


def test_a_loop_recorded_complete_with_an_empty_side_is_not_reported_complete(tmp_path):
    loop = loop_with(tmp_path)
    for s in loop.slots():
        if s.side == "patched":
            loop.run_path(s).unlink()           # e.g. a loop recorded before the rule, its runs since lost
    f = report.facts(loop)
    assert f["state"] == "incomplete" and f["runs"]["patched"]["kept"] == 0
    assert report.render(loop, "text").startswith("nttrace ab t: incomplete")
