# SPDX-License-Identifier: Apache-2.0
"""A loop over a series of kernels (`ab start --series K0,K1,...,Kn`): one
schedule (every round boots each kernel once, seeded), one step machine,
one report path, which for a series gives a step table (each step against
the one before and against the base, at the series' alpha) and each step's
A/B; two kernels are the series base,patched and read as before. `--until`
ends the night where it is. The state machine is the real one on the
simulated machine (tests/ab_loop_machine.py)."""
import json

import pytest

from ab_loop_machine import BUILDS, SimMachine, drive, make_loop
from nttrace.ab import report, schedule, series, statistics, status
from nttrace.errors import UsageError

SERIES = {"base": BUILDS["base"],
          "v9-3": "7.2.13-v9-3 (builder@lab) #1 SMP PREEMPT_DYNAMIC Sat Nov 28 10:30:00 UTC 2026",
          "v9-9": BUILDS["patched"]}


def test_series_parses_labels_defaults_and_refuses_what_cannot_name_a_kernel():
    assert schedule.parse_series("6.12-base,6.12-v9-3,6.12-v9") == [
        ("base", "6.12-base"), ("step1", "6.12-v9-3"), ("step2", "6.12-v9")]
    assert schedule.parse_series("stock=6.1.0-57-amd64, 1-3=/boot/vmlinuz-x:/boot/initrd-x") == [
        ("stock", "6.1.0-57-amd64"), ("1-3", "/boot/vmlinuz-x:/boot/initrd-x")]
    for bad, said in (("6.12-base", "at least two kernels"), ("a,,b", "an empty kernel"),
                      ("x=a,x=b", "label x is given twice"), ("a b=k,c", "label 'a b'"), ("base=,k", "names no kernel")):
        with pytest.raises(UsageError, match=said):
            schedule.parse_series(bad)


def test_every_round_boots_every_kernel_once_in_a_seeded_order():
    labels = list(SERIES)
    slots = schedule.make(4, 7, labels)
    assert len(slots) == 12 and schedule.make(4, 7, labels) == slots
    for r in range(1, 5):
        assert sorted(s.side for s in slots if s.round == r) == sorted(labels)
    assert len({schedule.order_text(schedule.make(4, seed, labels), labels) for seed in range(10)}) > 1
    assert schedule.legend(labels) == "0 base, 1 v9-3, 2 v9-9"
    # two kernels are the series base, patched: the same order as a loop of two always had
    assert schedule.make(3, 5, ["base", "patched"]) == schedule.make(3, 5)
    assert schedule.legend(["base", "patched"]) == "B base, P patched"


def test_a_series_loop_runs_every_kernel_and_reports_each_step(tmp_path):
    loop = make_loop(tmp_path, rounds=2, seed=5, builds=SERIES)
    sim = SimMachine(loop)
    drive(loop, sim)
    st = loop.state()
    assert st["state"] == "complete" and st["why"] == "complete: 6 of 6 boots measured"
    assert sorted(r["ab_run"]["side"] for r in loop.runs().values()) == ["base", "base", "v9-3", "v9-3",
                                                                          "v9-9", "v9-9"]
    text = report.render(loop, "text")
    assert "  v9-3     7.2.13-v9-3  " in text and "  runs kept: base 2 of 2, v9-3 2 of 2, v9-9 2 of 2" in text
    assert ("Step table: each step against the kernel before it and against the base, each tested at alpha "
            "0.05/2 = 0.025 (Bonferroni over the 2 steps); a step can be marked only from 5 boots a kernel") in text
    assert "Step v9-3 against base\n" in text and "Step v9-9 against v9-3\n" in text
    data = json.loads(report.render(loop, "json"))
    assert set(data["ab"]) == {"v9-3", "v9-9"} and data["ab_missing"] == {}
    [(name, table)] = [(k, v) for k, v in data["steps"].items() if k.startswith("kernel.memmap_latency")]
    assert [r["step"] for r in table["rows"]] == ["base", "v9-3", "v9-9"] and table["alpha"] == 0.025
    assert table["rows"][1]["before"] == "base" and "from_base" in table["rows"][2]
    assert "<h1>nttrace ab t: a series of 3 kernels</h1>" in report.render(loop, "html")
    s = status.status(loop, running=sim.now, this_boot="later")
    assert s["kernels"] == {label: b.split()[0] for label, b in SERIES.items()}
    assert s["legend"] == "0 base, 1 v9-3, 2 v9-9"


def test_the_step_table_tests_each_step_at_the_series_alpha_against_the_one_before_and_the_base():
    """Values chosen so each change is certain: base 10, step1 5 (-50%),
    step2 5 (no change): at 5 boots a kernel and alpha 0.05/2 the first step
    is marked, the second not; from the base both are. The shares add up to
    100% (fails if a step is compared with the base only, or at alpha 0.05)."""
    vals = {"base": [10.0, 10.1, 9.9, 10.2, 10.05], "s1": [5.0, 5.1, 4.9, 5.05, 4.95],
            "s2": [5.02, 4.97, 5.08, 4.93, 5.01]}
    t = series.steps(["base", "s1", "s2"], vals)
    assert t["alpha"] == statistics.family_alpha(2) and t["boots_to_mark"] == 5
    base, s1, s2 = t["rows"]
    assert "from_before" not in base and base["boots"] == 5
    assert s1["from_before"]["significant"] and series.mark(s1["from_before"]) == "*"
    assert not s2["from_before"]["significant"] and series.mark(s2["from_before"]) == "~"
    assert s2["from_base"]["significant"] and s2["from_base"]["change_pct"] < -49
    assert abs(s1["share_pct"] + s2["share_pct"] - 100) < 1e-6
    # a kernel without a run: the next change is from the last one measured, and says so
    t = series.steps(["base", "s1", "s2"], {"base": vals["base"], "s2": vals["s2"]})
    assert t["rows"][1] == {"step": "s1", "boots": 0}
    assert t["rows"][2]["before"] == "base" and t["rows"][2]["skipped"] == ["s1"]


def test_a_two_kernel_loop_reads_as_it_always_did(tmp_path):
    loop = make_loop(tmp_path, rounds=1, seed=2)
    drive(loop, SimMachine(loop))
    text = report.render(loop, "text")
    assert "Step table" not in text and "Step patched against base" not in text
    assert "order (B base, P patched): " in text
    data = json.loads(report.render(loop, "json"))
    assert set(data) == {"loop", "ab"} and "baseline_comparison" in data["ab"]


def test_until_ends_the_night_where_it_is_with_the_report_and_the_default_kernel(tmp_path):
    """--until: the clock passed it after the second boot's run; the loop
    ends there, stopped, with the report of the runs reached, the default
    kernel booted (fails if the loop boots past it)."""
    loop = make_loop(tmp_path, rounds=3, seed=1, until=1000.0 + 300)
    sim = SimMachine(loop)
    drive(loop, sim)
    st = loop.state()
    assert st["state"] == "stopped" and st["why"].startswith("ended by --until: 2 of 6 boots measured; the night "
                                                             "ended at --until ")
    assert sim.finished == [True] and sim.reports == [loop] and len(sim.asked) == 2


def test_start_takes_a_series_and_refuses_it_beside_base_and_patched(tmp_path, monkeypatch):
    import argparse

    from ab_loop_machine import bzimage
    from nttrace.ab import start
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "ab"))
    images = {label: str(bzimage(tmp_path / label, b)) for label, b in SERIES.items()}

    def a(**kw):
        base = dict(name="s", base=None, patched=None, series=None, boots=2, check=None, quick=False,
                    rebind=None, runs=3, exercise="", demote=False, via="kexec", cmdline="root=/dev/vda",
                    seed=1, max_failures=3, wait_quiet=0.0, validate_timeout=600.0, boot_deadline=None, until=None,
                    stay=False, dry_run=True, yes=True, no_watchdog=True)
        base.update(kw)
        return argparse.Namespace(**base)
    _loop, ks = start.check_input(a(series=",".join(f"{k}={v}" for k, v in images.items())))
    assert list(ks) == ["base", "v9-3", "v9-9"]
    with pytest.raises(UsageError, match="does not go with --base and --patched"):
        start.check_input(a(series=",".join(images.values()), base=images["base"]))
    with pytest.raises(UsageError, match="give --base and --patched, or --series"):
        start.check_input(a(base=images["base"]))
    with pytest.raises(UsageError, match="--until '25:00': a local time HH:MM"):
        start.check_input(a(base=images["base"], patched=images["v9-9"], until="25:00"))
    with pytest.raises(UsageError, match="no selected check measures a figure the A/B tests at these options.*"
                                         r"kernel.memmap_latency \(--rebind NAMESPACE\)"):
        start.check_input(a(base=images["base"], patched=images["v9-9"], rebind=None, check=["kernel.memmap*"]))
    with pytest.raises(UsageError, match="--boot-deadline must be at least 60 seconds"):
        start.check_input(a(base=images["base"], patched=images["v9-9"], boot_deadline=30))


def test_until_is_the_next_time_the_clock_reads_it():
    from datetime import datetime

    from nttrace.ab import start
    now = datetime(2026, 12, 7, 22, 15).timestamp()
    assert start.until_time("06:30", now) == datetime(2026, 12, 8, 6, 30).timestamp()
    assert start.until_time("23:00", now) == datetime(2026, 12, 7, 23, 0).timestamp()
    assert start.until_time(None, now) is None
