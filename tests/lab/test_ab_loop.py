# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab` proven in the lab, on a guest that boots like a server
(lab/loop_disk.py: firmware and grub from its own disk, Debian's stock
kernel as grub's default entry, base, nt-v2 and nt-v3 installed as the
packages `make bindeb-pkg` made, with releases of their own, ext4, an
i6300ESB watchdog; one disk for the three runs). The lab gives the loop nothing: no command line, no module
tree, no reset of its own; its hands in it are the faults it injects, and
each is one a real machine has.

Three QEMU runs (lab/ab_loop.py), one boot a kernel each:
- `--via kexec`, base and nt-v3: a power cut (QEMU's system_reset from its
  monitor) while the base kernel's boot runs validate (the run is cut,
  redone at the next boot); a power cut inside the kexec into nt-v3 (a
  reset nobody is blamed for: retried without spending the slot's
  attempts); then nt-v3's first boot that comes up locks a CPU up in its
  initramfs, before systemd has armed any watchdog (the kernel's own soft
  lockup detector, made a panic and a reboot by the softlockup_panic= and
  panic= nttrace put on the kexec command line). The loop completes.
- `--via reboot` (grub's one-shot entry and the firmware), a series of
  three kernels standing in for a series' steps: base, nt-v2 and nt-v3.
  nt-v3's first boot panics in its initramfs, before any sysctl (only
  the panic= nttrace gave every grub entry reboots it); base's first boot
  stops answering once systemd fed the watchdog (PID 1 held in a ptrace
  stop: the watchdog nttrace armed resets it). The loop completes with its
  step table.
- `--faults`: what `start` must refuse (the same kernel twice, a default
  entry that boots the patched kernel); loops that must stop, then boot
  the default kernel: a module of the patched kernel rewritten and its
  headers purged between the start and its boot, and a base kernel booted
  without its watchdog's driver; and a loop whose base boot never reaches
  multi-user.target with PID 1 alive (the boot deadline resets it) and whose
  patched boot drops to emergency mode (a pmem namespace fstab mounts does
  not come up), both retried, the loop complete.
At each end the machine is back on its default kernel, with nothing of the
loop left enabled. The tests read the loop's own state directory and
report, copied out by the guest, and the lab's own record of each boot.

One boot a kernel proves the machinery, not a change: the report says no
figure is testable at 1/1 runs, as it must.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import SELECTED_USES, has, lab_kernel
from lab import ab_loop
from lab import lab as labmod
from lab import loop_disk
from lab_boots import POOL, Boot
from nttrace.ab.text import verdict

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu", "kernel-build", "seeds")]

BOOTS = 1
RUNS = 3           # rebinds a boot: enough for the check's figures, few for the guest's time
KEEP = Path(os.environ.get("NTTRACE_LAB_KEEP", labmod.CACHE / "kernels-last-run"))
TIMEOUT = float(os.environ.get("NTTRACE_LAB_TIMEOUT", "3600"))
CHECKS = [*ab_loop.MEMMAP, "--runs", str(RUNS), "--wait-quiet", "60"]
# The power cuts: 5 s after the loop's step said it runs validate at the
# base kernel's boot (validate takes about 20 s there under TCG); inside the
# kexec into nt-v3: as soon as the console shows the services stopping after
# the step asked for that boot, 3 s after the ask at the latest (the
# shutdown's last second and the kexec itself are too short to aim a
# fixed delay at: PowerCut)
VALIDATE_CUT = ab_loop.PowerCut("base", 5)
KEXEC_CUT = ab_loop.PowerCut("nt-v3", 3, "booting")


# the fixture through which the tests take each run alone; `loop` takes the
# kexec and series runs, one a parameter
RUN_FIXTURE = {"ab-loop-kexec": "kexec_loop", "ab-loop-series": "series_loop", "ab-loop-faults": "faults"}


def _wanted(name: str):
    """The run `name` is wanted when a selected test takes it, as pytest
    resolved the test's fixtures: a session of the fault tests alone (-k)
    starts no kexec or series guest."""
    def wanted() -> bool:
        return has("kernel-build", "seeds") and any(
            RUN_FIXTURE[name] in fixtures or params.get("loop") == name
            for nodeid, (fixtures, params) in SELECTED_USES.items() if "test_ab_loop.py" in nodeid)
    return wanted


# The disks' kernels: base and patched for the kexec and fault runs, and
# the series' middle step beside them for the series run. Two disks (one
# more install of base and nt-v3, about two minutes) so the two runs that
# need base and nt-v3 only start as soon as those are built, not after
# nt-v2, the last kernel a cold session builds.
PAIR = ("base", "nt-v3")
SERIES = (*PAIR, "nt-v2")


def _prepare(variants: tuple[str, ...]):
    """The kernels, then the disk they are installed on (built once, cached)."""
    def prepare():
        kernels = tuple(lab_kernel(v) for v in variants)
        for k in kernels:
            if isinstance(k, Exception):
                return k
        try:
            loop_disk.disk(list(kernels))
        except labmod.LabError as exc:
            return exc
        return kernels
    return prepare


def _runner(name: str, kw):
    def run(prepared):
        if isinstance(prepared, Exception):
            return prepared
        out = KEEP / name
        shutil.rmtree(out, ignore_errors=True)
        base, patched, *others = prepared
        try:
            return ab_loop.run_loop(out, base, patched, timeout=TIMEOUT, others=tuple(others), **kw(*prepared))
        except labmod.LabError as exc:
            return exc
    return run


def _kexec(base, patched) -> dict:
    return {"boots": BOOTS, "via": "kexec", "check_args": CHECKS, "power_cuts": (VALIDATE_CUT, KEXEC_CUT),
            "inject": (f"lockup:{patched.variant}",)}


def _series(base, patched, step) -> dict:
    return {"scenarios": [ab_loop.loop_scenario(
        "series", [("base", base), (step.variant, step), (patched.variant, patched)], BOOTS, CHECKS, "reboot",
        inject=(f"panic:{patched.variant}", f"hang:{base.variant}"))]}


def _faults(base, patched) -> dict:
    return {"scenarios": ab_loop.fault_scenarios(base, patched, [*ab_loop.MEMMAP, "--runs", "1", "--wait-quiet", "60"])}


# Each run's time on a 2-core VM, from the wheel's build to QEMU's exit (the
# disk built before): the pool starts the longest guest first.
RUNS_OF = {"ab-loop-kexec": (_kexec, PAIR, 700), "ab-loop-series": (_series, SERIES, 750),
           "ab-loop-faults": (_faults, PAIR, 1000)}
for _name, (_args, _kernels, _seconds) in RUNS_OF.items():
    POOL.register(Boot(_name, _wanted(_name), _runner(_name, _args), prepare=_prepare(_kernels), seconds=_seconds))


def _run(name: str):
    """The pool's QEMU run `name`: its LoopRun, or its error raised."""
    r = POOL.result(name)
    if isinstance(r, Exception):
        raise r
    return r


@pytest.fixture(scope="module", params=["ab-loop-kexec", "ab-loop-series"])
def loop(request):
    return _run(request.param)


@pytest.fixture(scope="module")
def kexec_loop():
    return _run("ab-loop-kexec")


@pytest.fixture(scope="module")
def series_loop():
    return _run("ab-loop-series")


@pytest.fixture(scope="module")
def faults():
    return _run("ab-loop-faults")


def _report(loop, name: str | None = None) -> dict:
    return loop.json("report/ab.json", name)


def _kernels(loop) -> dict[str, str | None]:
    """{label: lab variant or None (the disk's stock kernel)} of the run's loop."""
    lp = _report(loop)["loop"]
    by_release = {k.release: k.variant for k in loop.kernels.values()}
    return {label: by_release.get(k["release"]) for label, k in lp["kernels"].items()}


def _nothing_left(end: dict) -> None:
    """No unit or drop-in of the loop's, no loaded kexec kernel, no systemd,
    sysctl or grub drop-in (nor its panic settings in grub.cfg), no watchdog
    of the loop's, no one-shot entry left for grub (the next boot is the
    default one)."""
    assert not [u for u in end["unit_files"] if u.startswith("nttrace-ab") and "@.service" not in u
                and "@.timer" not in u] and not end["enabled"], end
    assert end["unit_dropins"] == [], end["unit_dropins"]
    assert end["kexec_loaded"] == "0", end
    assert end["dropins"] == [] and not end["grub_cfg_panic"], (end["dropins"], end["grub_cfg_panic"])
    assert "RuntimeWatchdogUSec=0" in end["watchdog"], end["watchdog"]
    assert not [v for v in end["grubenv"] if v.startswith("next_entry=") and v != "next_entry="], end["grubenv"]


def _console_between(loop, start_marker: str) -> str:
    """The console from the line holding start_marker to the next boot's line."""
    text = loop.run.console
    i = text.index(start_marker)
    j = text.find("nttrace-lab: boot: ", i + len(start_marker))
    return text[i:j if j >= 0 else len(text)]


def _failures(loop, name: str | None = None) -> list[dict]:
    return _report(loop, name)["loop"]["failed_boots"]


# -- the loops that complete ----------------------------------------------------------
def test_the_loop_completes_and_the_machine_ends_on_its_default_kernel(loop):
    end = loop.end
    kernels = _kernels(loop)
    assert end.get("why") == "complete, back on the default kernel", loop.run.tail()
    assert end["status"]["state"] == "complete" and end["status"]["done"] == len(kernels) * BOOTS, end["status"]
    # grub's default entry, Debian's stock kernel, through the firmware
    assert (end["kernel"], end["release"], end["booted_by"]) == (None, loop.disk.stock_release, "firmware"), end
    assert not end["status"]["unit_installed"], end["status"]
    _nothing_left(end)


def test_the_loop_writes_its_report_in_every_format(loop):
    assert sorted(p.name for p in (loop.state / "report").iterdir()) == ["ab.html", "ab.json", "ab.md", "ab.txt"], \
        (loop.run.results / "ab-journal.txt").read_text()[-3000:]


def test_the_kernels_are_the_installed_packages_with_releases_of_their_own(loop):
    lp = _report(loop)["loop"]
    assert lp["state"] == "complete", lp
    assert {side: (r["kept"], r["planned"]) for side, r in lp["runs"].items()} == \
        {side: (BOOTS, BOOTS) for side in lp["kernels"]}, lp["runs"]
    for label, variant in _kernels(loop).items():
        release = lp["kernels"][label]["release"]
        assert lp["kernels"][label]["image"] == f"/boot/vmlinuz-{release}"
        assert release == (f"7.2.13-nttrace-{variant}" if variant else loop.disk.stock_release)
    assert len({k["release"] for k in lp["kernels"].values()}) == len(lp["kernels"])


def test_each_run_was_taken_on_its_kernel_and_says_which_build(loop):
    """Each kept run's boot (its boot id) is one the guest's early unit saw
    running that kernel: the lab's own account, not the loop's; and the run
    carries that kernel's build-id, config and headers hashes."""
    variant_at = {b["boot_id"]: b["kernel"] for b in loop.boots if b["event"] == "boot"}
    kernels = _kernels(loop)
    runs = [json.loads(f.read_text()) for f in sorted((loop.state / "runs").glob("*.json"))]
    assert len(runs) == len(kernels) * BOOTS
    for run in runs:
        ab = run["ab_run"]
        assert ab["complete"] is True and ab["validate_exit"] in (0, 1), ab
        assert variant_at[ab["boot_id"]] == kernels[ab["side"]], (ab["slot"], ab["side"], variant_at)
        ident = ab["kernel_identity"]
        assert re.fullmatch(r"[0-9a-f]{40}", ident["build_id"] or ""), ident
        assert len(ident["config_sha256"]) == 64 and len(ident["headers_sha256"]) == 64, ident
        memmap = next(c for c in run["checks"] if c["id"] == "kernel.memmap_latency")
        assert memmap["evidence"]["runs"] == RUNS and memmap["evidence"]["mode"] == "fsdax", memmap["summary"]


def test_the_boots_came_in_the_schedules_order(loop):
    """The boots that gave the runs came in the schedule's order, each
    reached as the loop says (by kexec, or through the firmware and grub's
    one-shot entry: grub marks what it boots with BOOT_IMAGE=), as the
    guest's early unit saw them; the loop began and ended on the default
    kernel, and every boot that gave no run (a power cut, a fault the lab
    injected) brought the machine back to it, through the firmware, once."""
    lp = _report(loop)["loop"]
    kernels = _kernels(loop)
    how = "kexec" if lp["via"] == "kexec" else "firmware"
    runs = [json.loads(f.read_text())["ab_run"] for f in sorted((loop.state / "runs").glob("*.json"))]
    run_boots = {r["boot_id"] for r in runs}
    seen = loop.kernel_boots()
    measured = [(b["kernel"], b["booted_by"]) for b in seen if b["boot_id"] in run_boots]
    expected = [(kernels[s["side"]], how if kernels[s["side"]] else "firmware")
                for s in sorted(lp["schedule"], key=lambda s: s["slot"])]
    assert measured == expected, (measured, expected, lp["order"])
    assert (seen[0]["kernel"], seen[0]["booted_by"]) == (None, "firmware") == (seen[-1]["kernel"], seen[-1]["booted_by"])
    for before, after in zip(seen, seen[1:]):
        if before["kernel"] is not None and before["boot_id"] not in run_boots:
            assert (after["kernel"], after["booted_by"]) == (None, "firmware"), (before, after)
    defaults = [b for b in seen if b["kernel"] is None and b["boot_id"] not in run_boots]
    assert len(defaults) == 2 + len(lp["failed_boots"]) + len(lp["runs_redone"]), (seen, lp["failed_boots"])


def test_one_run_a_kernel_is_not_tested_and_the_report_says_so(kexec_loop):
    """validate's rules hold in the loop's report: one run a side gives no
    spread to test a difference against, so no figure is tested, and the
    report says so."""
    rows = _report(kexec_loop)["ab"]["baseline_comparison"]
    tested = [r for r in rows if r["role"] in ("primary", "secondary")]
    assert any(r["role"] == "primary" and r["check"] == "kernel.memmap_latency" for r in tested), rows
    for r in tested:
        assert r["runs"] == [BOOTS, BOOTS] and not r["stats"]["significant"], r
        assert verdict(r) == "not tested: 1 run a side", (r["label"], r["stats"]["verdict"])


# -- kexec: power cuts, a lockup before systemd ----------------------------------------------
def test_a_power_cut_while_validate_runs_is_a_run_redone(kexec_loop):
    loop = kexec_loop
    cuts = {f["event"]: f for f in loop.faults}
    assert set(cuts) == {"validate", "booting"}, loop.faults
    st = loop.end["status"]
    assert st["runs_redone"] == 1, st
    base_boots = [b for b in loop.kernel_boots() if b["kernel"] == "base"]
    assert len(base_boots) == 2 and base_boots[0]["boot_id"] != base_boots[1]["boot_id"], base_boots
    # a power cut: the kernel said nothing of a reboot or a panic before the next boot
    after = _console_between(loop, "nttrace-lab: boot: kernel base")
    assert "reboot: Restarting system" not in after and "Kernel panic" not in after, after[-3000:]


def test_a_power_cut_inside_the_kexec_is_retried_without_spending_the_slots_attempts(kexec_loop):
    """The step asked for nt-v3's boot (its state says so); the power went
    before nt-v3 came up. The machine came back on its default kernel with no
    record of why: nobody is blamed, and the slot's attempt is given back."""
    loop = kexec_loop
    cut = next(f for f in loop.faults if f["event"] == "booting")
    asked = next(b for b in loop.boots if b["event"] == "booting" and "nt-v3" in b["line"])
    after_cut = [b for b in loop.kernel_boots() if b["host_time"] > cut["at"]]
    assert after_cut[0]["kernel"] is None and after_cut[0]["booted_by"] == "firmware", after_cut[:2]
    assert asked["host_time"] <= cut["at"], (asked, cut)
    nt = [f for f in _failures(loop) if f["side"] == "patched"]
    assert nt and nt[0]["blamed"] == "unknown" and not nt[0]["slot_given_up"], nt
    st = loop.json("state.json")
    ss = st["slots"][str(nt[0]["slot"])]
    assert ss["unexplained"] >= 1 and ss["outcome"] == "run", ss


# the kernel's own detectors of a CPU stuck with preemption off, each made a
# panic by the setting nttrace puts on the command line
DETECTORS = {"Kernel panic - not syncing: softlockup: hung tasks": "softlockup_panic=1",
             "Kernel panic - not syncing: RCU Stall": "sysctl.kernel.panic_on_rcu_stall=1"}


def test_a_lockup_in_the_initramfs_is_a_panic_by_the_settings_nttrace_put_on_the_kexec_command_line(kexec_loop):
    """Before systemd runs, no watchdog is armed (i6300esb stops the timer
    when it binds): a CPU stuck in the kernel comes back only through the
    kernel's own detectors (the RCU stall detector at 21 s or the soft
    lockup detector at 20 to 30 s, whichever reports first), made a panic
    by panic_on_rcu_stall or softlockup_panic and a reboot by panic=, all on
    the command line nttrace passed to kexec."""
    loop = kexec_loop
    lockup = _console_between(loop, "nttrace-lab: injected lockup in the initramfs of 7.2.13-nttrace-nt-v3")
    fired = [(line, setting) for line, setting in DETECTORS.items() if line in lockup]
    assert len(fired) == 1, lockup[-3000:]
    m = re.search(r"Rebooting in (\d+) seconds", lockup)
    assert m, lockup[-3000:]
    sched = loop.json("schedule.json")
    assert f"panic={m[1]}" in sched["cmdline"].split() and fired[0][1] in sched["cmdline"].split(), sched["cmdline"]
    # the initramfs's own record (it cannot write ab-boots.jsonl; a boot that survives its fault reports it
    # there, this one never got that far): one lockup, in nt-v3's initramfs, at a boot that never reached
    # the boot record every boot that came up wrote
    injected = loop.end.get("initramfs_injected")
    assert [(f, r) for f, r, _id in injected or []] == [("lockup", loop.kernels["patched"].release)], injected
    assert injected[0][2] not in {b["boot_id"] for b in loop.kernel_boots()}, (injected, loop.boots)
    assert sched["reset"]["text"] in (loop.state / "report" / "ab.txt").read_text()


# -- the series, through grub ---------------------------------------------------------
def test_a_series_reports_each_step_against_the_one_before_and_the_base(series_loop):
    loop = series_loop
    data = _report(loop)
    assert list(data["loop"]["kernels"]) == ["base", "nt-v2", "nt-v3"]
    assert _kernels(loop) == {"base": "base", "nt-v2": "nt-v2", "nt-v3": "nt-v3"}
    [table] = [t for name, t in data["steps"].items() if name.startswith("kernel.memmap_latency [fsdax]")]
    assert [r["step"] for r in table["rows"]] == ["base", "nt-v2", "nt-v3"]
    assert table["alpha"] == 0.025 and table["boots_to_mark"] == 5
    assert [r.get("before") for r in table["rows"]] == [None, "base", "nt-v2"]
    assert set(data["ab"]) == {"nt-v2", "nt-v3"}
    text = (loop.state / "report" / "ab.txt").read_text()
    assert "Step table: each step against the kernel before it and against the base" in text
    assert "Step nt-v2 against base\n" in text and "Step nt-v3 against nt-v2\n" in text


def test_a_panic_in_the_initramfs_reboots_by_the_panic_setting_nttrace_gave_grubs_entries(series_loop):
    """nt-v3 panics in its initramfs, before any sysctl: only a panic= on
    the command line grub booted it with reboots it. nttrace gave every
    entry the loop's panic settings (/etc/default/grub.d, update-grub) and
    took them away at the end."""
    loop = series_loop
    panic = _console_between(loop, "nttrace-lab: injected panic in the initramfs of 7.2.13-nttrace-nt-v3")
    assert "Kernel panic - not syncing: sysrq triggered crash" in panic, panic[-3000:]
    assert re.search(r"Rebooting in 10 seconds", panic), panic[-3000:]
    boot = [b for b in loop.kernel_boots() if b["kernel"] == "nt-v3"][0]
    assert "panic=10" in boot["cmdline"].split() and "softlockup_panic=1" in boot["cmdline"].split(), boot
    assert boot["booted_by"] == "firmware"
    reset = loop.json("schedule.json")["reset"]
    assert reset["grub_cmdline_added"] and reset["text"].startswith("a panic reboots after 10 s (panic=10)")
    assert not loop.end["grub_cfg_panic"] and loop.end["dropins"] == []


def test_a_hang_after_systemd_armed_the_watchdog_is_reset_by_it(series_loop):
    loop = series_loop
    wd = loop.json("schedule.json")["reset"]["watchdog"]
    assert wd and wd["module"] == "i6300esb" and wd["device"].startswith("/dev/watchdog"), wd
    hung = _console_between(loop, "nttrace-lab: injected hang:base at the first boot of base")
    assert "reboot: Restarting system" not in hung and "Kernel panic" not in hung, hung[-3000:]
    inject = next(b for b in loop.boots if b["event"] == "inject" and b["fault"] == "hang")
    after = [b for b in loop.kernel_boots() if b["host_time"] > inject["host_time"]][0]
    assert after["kernel"] is None and after["booted_by"] == "firmware", after
    # the reset came no sooner than the watchdog's runtime timeout after the hang
    assert after["host_time"] - inject["host_time"] >= wd["runtime_s"] - 2, (inject, after, wd)


# -- what must not become a run, and what must stop (the --faults run) ------------------------
def test_start_refuses_the_same_kernel_as_base_and_patched(faults):
    r = faults.refusal("same")
    patched = faults.kernels["patched"].release
    assert r["command"][r["command"].index("--base") + 1] == r["command"][r["command"].index("--patched") + 1] == patched
    out = r["stdout"] + r["stderr"]
    assert r["rc"] == 2, out
    assert "ab start: base and patched are the same image (sha256 " in out, out
    assert not r["state_dir"], r
    _nothing_left(r)


def test_start_refuses_a_default_entry_that_boots_the_patched_kernel(faults):
    """grub's default where nobody chose one (GRUB_DEFAULT=0, update-grub):
    the first entry, Debian's highest version, the patched kernel: every
    reset would boot it again."""
    r = faults.refusal("default")
    assert r["update_grub_rc"] == 0 and r["grub_cfg_default"] == "0", r
    out = r["stdout"] + r["stderr"]
    assert r["rc"] == 2, out
    patched = faults.kernels["patched"].release
    assert f"ab start: the bootloader's default entry boots the patched kernel {patched}" in out, out
    assert "every reset" in out and "grub-set-default" in out, out
    assert not r["state_dir"], r
    _nothing_left(r)


def _stopped_at_base_then_default(faults, name: str) -> dict:
    """The loop `name` stopped at the base kernel's first boot, before any
    patched boot, and then rebooted into the default kernel itself."""
    end = faults.end_of(name)
    st = end["status"]
    assert st["state"] == "failed", st
    assert (end["kernel"], end["booted_by"]) == (None, "firmware"), end
    ended = next(b["host_time"] for b in faults.boots if b["event"] == "end" and b.get("scenario") == name)
    started = next(b["host_time"] for b in faults.boots if b["event"] == "start" and b.get("scenario") == name)
    seen = [b["kernel"] for b in faults.kernel_boots() if started < b["host_time"] < ended]
    assert seen == [faults.kernels["base"].variant, None], seen
    runs = faults.run.results / "ab" / name / "runs"
    assert not list(runs.glob("*.json")) if runs.exists() else True
    journal = (faults.run.results / f"ab-journal-{name}.txt").read_text()
    assert f"{name}: LOOP STOPPED: {st['why']}" in journal and "rebooting into the default kernel" in journal, \
        journal[-3000:]
    _nothing_left(end)
    return st


def test_a_module_tree_rebuilt_between_boots_stops_the_loop_and_boots_the_default(faults):
    st = _stopped_at_base_then_default(faults, "modules")
    patched = faults.kernels["patched"].release
    assert st["why"].startswith(f"the patched kernel {patched}: the module tree /lib/modules/{patched} changed "
                                "since the loop started (sha256 "), st["why"]
    assert faults.end_of("modules")["put_back"][0].startswith(f"/lib/modules/{patched}/kernel/")


def test_headers_purged_between_boots_stop_the_loop_and_boot_the_default(faults):
    """The patched kernel's headers package purged after the start (as apt
    autoremove would): bcc would have nothing to compile against at its
    boots; the loop stops at the base kernel's boot, before booting it."""
    st = _stopped_at_base_then_default(faults, "headers")
    patched = faults.kernels["patched"].release
    assert st["why"].startswith(f"the patched kernel {patched}: its headers /lib/modules/{patched}/build are gone"), \
        st["why"]


def test_a_loop_kernel_booted_without_its_watchdog_driver_stops_the_loop(faults):
    """The base kernel's watchdog driver let go of its device in the
    initramfs (as a driver that fails to probe): systemd found no watchdog
    to arm, so nothing would reset a hang at this boot. The loop stops before
    validate and boots the default kernel."""
    st = _stopped_at_base_then_default(faults, "nowatchdog")
    base = faults.kernels["base"].release
    assert st["why"].startswith(f"the watchdog is not armed at this boot of {base} (slot 1, base): /dev/watchdog0 "
                                "does not exist at this boot"), st["why"]
    assert [i[0] for i in faults.end_of("nowatchdog")["initramfs_injected"]] == ["no-watchdog"]


def test_a_boot_held_before_multi_user_and_one_in_emergency_mode_are_reset_and_retried(faults):
    """Base's first boot never reaches multi-user.target while PID 1 lives
    and feeds the watchdog: the boot deadline (ab_loop.FAULT_DEADLINE_S here) resets it. The
    patched kernel's first boot drops to emergency mode (the pmem namespace
    fstab mounts does not come up): the deadline's unit, wanted by
    emergency.target, resets it at once. Each is a failed boot blamed on its
    kernel with the deadline's record, the slot booted again, the loop
    complete."""
    end = faults.end_of("emergency")
    assert end["status"]["state"] == "complete" and end["status"]["done"] == 2, end["status"]
    assert (end["kernel"], end["booted_by"]) == (None, "firmware"), end
    _nothing_left(end)
    failed = {f["side"]: f for f in _failures(faults, "emergency")}
    assert set(failed) == {"base", "patched"} and {f["blamed"] for f in failed.values()} == {"kernel"}, failed
    assert f"did not reach the loop's step within the boot deadline of {ab_loop.FAULT_DEADLINE_S} s" in failed["base"]["why"], failed["base"]
    assert "emergency.target" not in failed["base"]["why"]
    assert "emergency.target" in failed["patched"]["why"], failed["patched"]
    console = faults.run.console
    assert "nttrace-lab: injected emergency in the initramfs of" in console
    # nd_pmem let go of the device fstab mounts (fsdax: the pfn device; unbinding the namespace, which the pfn
    # device claims and nd_pmem never binds, leaves /dev/pmem0 there and the boot mounts it)
    assert re.search(r"nttrace-lab: emergency: unbound (namespace|pfn|btt)\d", console), console[-3000:]
    assert re.search(r"You are in emergency mode|Entering emergency mode", console), console[-3000:]
    held = _console_between(faults, "nttrace-lab: injected hold:base at the first boot of base")
    assert "Kernel panic" not in held, held[-3000:]
