# SPDX-License-Identifier: Apache-2.0
"""Runs that are what they say: a boot whose checks all skipped, or that
measured nothing an A/B can use, is a failed measurement (never a run, and
never a "complete" loop with an empty side); each run records the boot's
settings and how the boot was reached (read from a directory laid out like
/proc and /sys); a run whose quiet-host wait timed out is marked and the
report says whether leaving it out changes a verdict. The state machine is
the real one (nttrace.ab.step) on the simulated machine."""
import json

from ab_loop_machine import BUILDS, DEFAULT, FIRMWARE_CMDLINE, SimMachine, drive, first_slot_measured, make_loop
from nttrace.ab import measured, report, status, step, store
from nttrace.ab.loop import slot_state
from nttrace.kernel import boot_settings

SKIPPED = {"version": "0.1.0", "kernel_release": "7.2.13-nt",
           "checks": [{"id": "kernel.memmap_latency", "status": "skip",
                       "summary": "no fsdax namespace (ndctl create-namespace first)", "evidence": {}},
                      {"id": "env.kernel_btf", "status": "skip", "summary": "no BTF", "evidence": {}}]}


def skipping_on(sim, side, report=SKIPPED):
    """validate as on a machine where `side`'s kernel cannot run the checks."""
    def validate(argv, timeout):
        if sim.side_now() == side:
            sim.validated.append((side, sim.bid))
            return 0, json.dumps(report), ""
        return sim.validate(argv, timeout)
    return validate


def driven_with_patched_skipping(tmp_path, **loop_args):
    """A loop (make_loop(tmp_path, **loop_args)) driven to its end on a
    machine where the patched kernel's checks all skip: loop, sim, m and
    the exit codes of begin and each step."""
    loop = make_loop(tmp_path, **loop_args)
    sim = SimMachine(loop)
    m = sim.machine()
    m.validate = skipping_on(sim, "patched")
    return loop, sim, m, drive(loop, sim, m)


def test_a_boot_whose_checks_all_skipped_is_a_failed_measurement_retried_never_a_run(tmp_path):
    loop = make_loop(tmp_path, rounds=2, seed=3, max_failures=5)
    sim = SimMachine(loop)
    m = sim.machine()
    first_patched = next(s for s in loop.slots() if s.side == "patched")
    once = {"done": False}

    def validate(argv, timeout):
        if sim.side_now() == "patched" and not once["done"]:     # the namespace came up late once
            once["done"] = True
            return 0, json.dumps(SKIPPED), ""
        return sim.validate(argv, timeout)
    m.validate = validate
    drive(loop, sim, m)
    st = loop.state()
    assert st["state"] == "complete" and st["why"] == "complete: 4 of 4 boots measured"
    ss = slot_state(st, first_patched.slot)
    assert ss["attempts"] == 2 and ss["outcome"] == "run"
    [f] = ss["failures"]
    assert f["kind"] == "measurement"
    assert f["why"] == ("a failed measurement: its one measured check gave no figure (kernel.memmap_latency "
                        "skipped: no fsdax namespace (ndctl create-namespace first))")
    # the skipped report is kept to read, never as a run
    kept = loop.unmeasured_dir / f"{first_patched.key}-attempt1.json"
    data = store.read_json(kept)
    assert data["ab_run"]["complete"] is False and data["ab_run"]["unmeasured"].startswith("its one measured check")
    assert sorted(loop.runs()) == [1, 2, 3, 4]
    assert all(r["ab_run"]["attempt"] == (2 if n == first_patched.slot else 1) for n, r in loop.runs().items())


def test_a_patched_kernel_whose_checks_always_skip_never_completes_and_k_in_a_row_stop_it(tmp_path):
    loop, sim, _, codes = driven_with_patched_skipping(tmp_path, rounds=3, seed=5, max_failures=3)
    st = loop.state()
    assert st["state"] == "failed" and codes[-1] == 1
    assert st["why"].startswith("stopped after 3 consecutive failed boots (--max-failures 3): slot ")
    assert "a failed measurement: its one measured check gave no figure" in st["why"]
    assert all(r["ab_run"]["side"] == "base" for r in loop.runs().values())
    assert sim.finished == [True]           # stopped on the patched kernel: the default kernel booted


def test_a_schedule_that_ends_with_an_empty_side_ends_incomplete_not_complete(tmp_path, capsys):
    # K large enough that the schedule runs out first: every patched boot measured nothing
    loop, sim, m, codes = driven_with_patched_skipping(tmp_path, rounds=2, seed=3, max_failures=9)
    st = loop.state()
    assert codes[-1] == 1
    assert st["state"] == "failed"
    assert st["why"] == ("incomplete: no patched run (last: a failed measurement: its one measured check gave no "
                         "figure (kernel.memmap_latency skipped: no fsdax namespace (ndctl create-namespace first))); "
                         "2 of 4 boots measured")
    assert sim.finished == [True] and sim.reports == [loop]       # the report written, the default kernel next
    text = report.render(loop, "text")
    assert text.startswith("nttrace ab t: failed (incomplete: no patched run")
    assert ", failed measurement; slot given up:\n      a failed measurement: its one measured check gave no" in text
    assert "no A/B yet: 2 base and 0 patched runs kept" in text
    status.print_status(status.status(loop, running=sim.now, this_boot=m.boot_id()))
    out = capsys.readouterr().out
    assert "nttrace ab t: failed (incomplete: no patched run" in out
    assert out.count("failed measurement: a failed measurement") == 4


def test_a_report_whose_checks_ran_but_gave_no_figure_is_a_failed_measurement(tmp_path):
    loop = make_loop(tmp_path, rounds=1, seed=1, max_failures=2)
    sim = SimMachine(loop)
    m = sim.machine()
    nothing = {"version": "0.1.0", "checks": [
        {"id": "env.x", "status": "pass", "summary": "fine", "evidence": {"mode": "fsdax"}},
        {"id": "env.y", "status": "skip", "summary": "no", "evidence": {}}]}
    sim.validate_result = (0, json.dumps(nothing), "")
    drive(loop, sim, m)
    st = loop.state()
    f = slot_state(st, 1)["failures"][0]
    assert f["kind"] == "measurement"
    assert f["why"] == ("a failed measurement: its one measured check gave no figure (kernel.memmap_latency is not "
                        "in validate's report)")
    assert loop.runs() == {}
    assert measured.unmeasured({"checks": []}, ["kernel.memmap_latency"]) == "validate ran no check"


def test_a_boot_where_other_checks_gave_figures_but_the_measured_one_skipped_is_not_a_run(tmp_path):
    """The patched kernel's headers are gone: kernel.memmap_latency skips
    (bcc has nothing to compile against) while env.kernel_metadata passes
    with its offsets, numbers the A/B shows. That boot measured nothing the
    A/B tests: a failed measurement (fails if any figure of any check makes
    a run, as when a loop without --check selected the whole catalog)."""
    loop = make_loop(tmp_path, rounds=1, seed=1, max_failures=2)
    sim = SimMachine(loop)
    m = sim.machine()
    headless = {"version": "0.1.0", "kernel_release": "7.2.13-nt", "checks": [
        {"id": "env.kernel_metadata", "status": "pass", "summary": "enum values agree",
         "evidence": {"offsets": {"migrate_mode": 3, "reason": 5}, "nt_revision_index": 3}},
        {"id": "kernel.memmap_latency", "status": "skip",
         "summary": "memmap probe unavailable: /lib/modules/7.2.13-nt/build missing", "evidence": {}}]}
    sim.validate_result = (0, json.dumps(headless), "")
    drive(loop, sim, m)
    f = slot_state(loop.state(), 1)["failures"][0]
    assert f["kind"] == "measurement" and loop.runs() == {}
    assert f["why"] == ("a failed measurement: its one measured check gave no figure (kernel.memmap_latency skipped: "
                        "memmap probe unavailable: /lib/modules/7.2.13-nt/build missing)")


def test_the_measured_checks_are_the_selected_ones_with_a_primary_figure_that_the_options_ask_to_work():
    """kernel.demotion_nt without --demote skips: not measured; probe.memremap
    is asked (--exercise), probe.migrate and probe.reclaim run unasked; env.*
    carries no primary figure."""
    args = measured.validate_args(["kernel.*", "probe.*", "env.*"], False, "namespace0.0", 3, False, "memremap")
    assert sorted(measured.measured_checks(args)) == ["kernel.memmap_latency", "probe.memremap", "probe.migrate",
                                                       "probe.reclaim"]
    assert measured.measured_checks(measured.validate_args(["env.*"], False, None, 30, False, "")) == []
    lacking = measured.not_asked(measured.validate_args(["kernel.*"], False, None, 30, False, ""))
    assert sorted(lacking) == ["kernel.demotion_nt (--demote)", "kernel.memmap_latency (--rebind NAMESPACE)"]


def test_each_run_records_the_boots_settings_and_the_boot_it_was_kexecd_from(tmp_path):
    loop = make_loop(tmp_path, rounds=2, seed=6)
    sim = SimMachine(loop)
    m = sim.machine()
    drive(loop, sim, m)
    runs = loop.runs()
    assert sorted(runs) == [1, 2, 3, 4]
    # each kexec command line carries the asking boot's id, and only that marker
    assert sim.cmdlines == [f"root=/dev/vda ro nttrace.ab_from=boot-{n}" for n in range(4)]
    for n, r in runs.items():
        mach = r["ab_run"]["machine"]
        assert mach["reached"] == {"how": "kexec", "from_boot": f"boot-{n - 1}"}
        assert mach["cmdline"] == f"root=/dev/vda ro nttrace.ab_from=boot-{n - 1}"
        assert mach["turbo"] == {"on": True, "intel_pstate_no_turbo": 0, "cpufreq_boost": None}
        assert mach["thp"] == {"enabled": "madvise", "defrag": "madvise"}
        assert mach["numa_balancing"] == 1 and mach["smt"] == {"control": "on", "active": 1}
        assert mach["cstates"]["cpuidle_driver"] == "intel_idle" and mach["cstates"]["intel_idle_max_cstate"] == 9
        assert mach["microcode"] == ["0x2b000571"]
        assert mach["cpufreq"] == {"policy0": {"driver": "intel_pstate", "governor": "performance"},
                                   "policy1": {"driver": "intel_pstate", "governor": "performance"}}
        assert r["ab_run"]["quiet_timed_out"] is False
    text = report.render(loop, "text")
    assert ("boot settings, the same in every run: turbo on; THP madvise/madvise; numa_balancing 1; SMT on; "
            "cpuidle intel_idle (intel_idle max_cstate 9); microcode 0x2b000571; governor performance") in text
    assert "boots reached by kexec: slots 1, 2, 3, 4" in text


def test_a_boot_the_firmware_started_is_recorded_so_and_settings_that_differ_are_said(tmp_path):
    loop, sim, m = first_slot_measured(tmp_path, rounds=2, seed=6)
    # turbo switched off and a C-state limit on the command line by the time
    # slot 2 is measured, which the firmware booted (--via reboot's path)
    (sim.root / "sys/devices/system/cpu/intel_pstate/no_turbo").write_text("1\n")
    sim.reboot()
    sim.set_cmdline(FIRMWARE_CMDLINE + " intel_idle.max_cstate=1 idle=poll")
    step.step(loop, m)
    r2 = loop.runs()[2]["ab_run"]["machine"]
    assert r2["reached"] == {"how": "firmware", "from_boot": None}
    assert r2["turbo"]["on"] is False
    assert r2["cstates"]["cmdline"] == {"intel_idle.max_cstate": "1", "idle": "poll"}
    f = report.facts(loop)
    differ = f["boot_settings"]["differ"]
    assert differ["turbo.on"] == {"slot 1": True, "slot 2": False}
    assert differ["cstates.cmdline.idle"] == {"slot 1": None, "slot 2": "poll"}
    assert "cmdline" in differ                           # the marker alone would not differ: it is left out
    text = report.render(loop, "text")
    assert "  BOOT SETTINGS DIFFER between runs:\n" in text and "    turbo.on: slot 1 true; slot 2 false" in text
    assert "boots reached by kexec: slots 1; by firmware: slots 2" in text


def test_the_marker_alone_is_not_a_difference_between_runs():
    a = {"cmdline": "root=/dev/sda1 nttrace.ab_from=aaa", "reached": {"how": "kexec", "from_boot": "aaa"}}
    b = {"cmdline": "root=/dev/sda1 nttrace.ab_from=bbb", "reached": {"how": "kexec", "from_boot": "bbb"}}
    assert boot_settings.differences({"1": a, "2": b}) == {}
    assert boot_settings.with_marker("ro nttrace.ab_from=old quiet", "new") == "ro quiet nttrace.ab_from=new"
    assert boot_settings.reached("ro nttrace.ab_from=new") == {"how": "kexec", "from_boot": "new"}


def test_the_image_grub_names_is_not_a_difference_between_runs():
    """--via reboot: grub puts each kernel's own image on its command line;
    a parameter that differs still is a difference."""
    a = {"cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.12.0 root=UUID=x ro", "reached": {"how": "firmware"}}
    b = {"cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.12.0-nt root=UUID=x ro", "reached": {"how": "firmware"}}
    assert boot_settings.differences({"1": a, "2": b}) == {}
    c = {"cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.12.0-nt root=UUID=x ro mitigations=off", "reached": {"how": "firmware"}}
    assert boot_settings.differences({"1": a, "3": c}) == {"cmdline": {"1": "root=UUID=x ro",
                                                                        "3": "root=UUID=x ro mitigations=off"}}


def test_settings_a_machine_does_not_expose_read_as_none(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("root=/dev/vda processor.max_cstate=1\n")
    (tmp_path / "sys/devices/system/cpu/cpufreq").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/cpufreq/boost").write_text("0\n")
    s = boot_settings.read(tmp_path)
    assert s["turbo"] == {"on": False, "intel_pstate_no_turbo": None, "cpufreq_boost": 0}
    assert s["thp"] == {"enabled": None, "defrag": None} and s["numa_balancing"] is None
    assert s["microcode"] is None and s["cpufreq"] == {}
    assert s["cstates"]["cmdline"] == {"processor.max_cstate": "1"}
    assert s["reached"] == {"how": "firmware", "from_boot": None}


def _with_quiet_wait(loop, seconds=600):
    sched = loop.schedule()
    sched["wait_quiet_s"] = seconds
    store.write_json(loop.schedule_path, sched)


def test_a_run_whose_quiet_wait_timed_out_is_marked_and_the_report_says_what_leaving_it_out_changes(tmp_path):
    loop = make_loop(tmp_path, rounds=4, seed=2)
    _with_quiet_wait(loop)
    sim = SimMachine(loop)
    m = sim.machine()
    busy_slot = next(s.slot for s in loop.slots() if s.side == "patched")

    def wait_quiet(limit):
        slot = loop.state()["booting"]["slot"]
        if slot == busy_slot:
            return {"state": "busy", "why": "beside cc1", "others_share": 0.4}
        return {"state": "quiet", "why": "other processes used 1% of a CPU"}
    m.wait_quiet = wait_quiet
    drive(loop, sim, m)
    runs = loop.runs()
    assert [n for n, r in runs.items() if r["ab_run"]["quiet_timed_out"]] == [busy_slot]
    assert runs[busy_slot]["ab_run"]["quiet_wait"]["why"] == "beside cc1"
    f = report.facts(loop)
    q = f["quiet_timed_out"]
    assert q["slots"] == [busy_slot]
    # 4 against 4 runs can be significant, 4 against 3 cannot (validate's own rule): what was
    # significant with the busy run is not tested without it, and the report says so figure by figure
    with_them = report._verdicts([r for r in runs.values() if r["ab_run"]["side"] == "base"],
                                 [r for r in runs.values() if r["ab_run"]["side"] == "patched"])
    significant = sorted(k for k, v in with_them.items() if v.startswith("significant"))
    assert significant, with_them
    assert sorted(c["figure"] for c in q["changes"] if c["with"].startswith("significant")) == significant
    assert all(c["without"] == "not tested" for c in q["changes"])
    n = len(q["changes"])
    assert q["text"] == f"leaving them out changes {n} verdict{'s' if n != 1 else ''}:"
    text = report.render(loop, "text")
    assert (f"  runs on a host that never became quiet (the wait timed out): slots {busy_slot}; "
            f"{q['text']}") in text
    assert f"    {significant[0]}: {with_them[significant[0]]} with them, not tested without" in text
    s = status.status(loop, running=sim.now, this_boot=m.boot_id())
    assert s["quiet_timed_out"] == [busy_slot]


def test_a_quiet_wait_that_timed_out_on_a_run_that_changes_nothing_says_so(tmp_path):
    loop = make_loop(tmp_path, rounds=2, seed=2)
    _with_quiet_wait(loop)
    sim = SimMachine(loop)
    m = sim.machine()
    m.wait_quiet = lambda limit: {"state": "contended", "why": "beside qemu-system-x86_64"} \
        if loop.state()["booting"]["slot"] == 1 else {"state": "quiet"}
    drive(loop, sim, m)
    q = report.facts(loop)["quiet_timed_out"]
    # 2 a side is never tested: no verdict to change, with or without slot 1
    assert q == {"slots": [1], "changes": [], "text": "leaving them out changes no verdict"}


def test_no_quiet_wait_is_not_a_timed_out_wait(tmp_path):
    loop = make_loop(tmp_path, rounds=1)          # wait_quiet_s 0: the wait is skipped, not timed out
    sim = SimMachine(loop)
    m = sim.machine()
    m.wait_quiet = lambda limit: {"state": "busy", "why": "not waited for"}
    drive(loop, sim, m)
    assert all(r["ab_run"]["quiet_timed_out"] is False for r in loop.runs().values())
    assert report.facts(loop)["quiet_timed_out"] is None


def test_the_first_boot_after_a_failed_one_records_the_firmware_and_the_default_kernel(tmp_path):
    loop = make_loop(tmp_path, rounds=1, seed=1)
    sim = SimMachine(loop)
    m = sim.machine()
    drive(loop, sim, m, lands=lambda n: DEFAULT if n == 1 else None)
    f = slot_state(loop.state(), 1)["failures"][0]
    assert f["reached"] == {"how": "firmware", "from_boot": None}
    assert f["found"]["build"].startswith(DEFAULT.split()[0]) and f["expected"]["build"] == BUILDS[loop.slots()[0].side]
