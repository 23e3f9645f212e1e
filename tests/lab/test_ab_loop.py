# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab` proven in the lab, on a guest that boots like a server
(lab/loop_disk.py: firmware and grub from its own disk, Debian's stock
kernel as grub's default entry, base and nt-v3 installed as the packages
`make bindeb-pkg` made, with releases of their own, ext4, an i6300ESB
watchdog). The lab gives the loop nothing: no command line, no module
tree, no reset of its own; its hands in it are the faults it injects.

Two QEMU runs (lab/ab_loop.py), one boot a side each:
- `--via kexec`, with a power cut (QEMU's system_reset from its monitor)
  while the base kernel's boot runs validate: the run is cut, redone at the
  next boot, and the loop completes on an ext4 root; and, where nttrace sets
  up its own reset (tracer/ab/reset.py), a panic at the patched kernel's
  first boot, reset by the panic= nttrace put on the kexec command line;
- `--via reboot` (grub-reboot and a reboot through the firmware), and,
  where nttrace sets up its own reset, a hang at the patched kernel's first
  boot (PID 1 stopped: nothing feeds the watchdog), reset by the watchdog
  nttrace armed.
At each end the machine is back on its default kernel, with nothing of
the loop left enabled. The tests read the loop's own state directory and
report, copied out by the guest, and the lab's own record of each boot.

A third QEMU run (`--faults`, lab/ab_loop.py's fault_scenarios) takes
what must not become a run: `start` refusing the same kernel twice and a
grub default left to Debian's choice (the highest version: the patched
kernel); then three 1+1 loops by kexec, with the patched kernel changed at
the base kernel's boot, between the start and the patched boot: its image
rebuilt and a module of its tree rebuilt (the loop stops before booting
it), its headers package purged (its checks skip: failed measurements,
never a run; the loop ends incomplete). After each, nothing of the loop is
left enabled.

One boot a side proves the machinery, not a change: the report says no
figure is testable at 1/1 runs, as it must.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import SELECTED, has, lab_kernel
from lab import ab_loop
from lab import lab as labmod
from lab import loop_disk
from lab_boots import POOL, Boot
from nttrace.ab.text import verdict

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu", "kernel-build", "seeds")]

BOOTS = 1
RUNS = 3           # rebinds a boot: enough for the check's figures, few for the guest's time
KEEP = Path(os.environ.get("NTTRACE_LAB_KEEP", labmod.CACHE / "kernels-last-run"))
TIMEOUT = float(os.environ.get("NTTRACE_LAB_TIMEOUT", "2400"))
# The power cut: 5 s after the loop's step said it runs validate at the
# base kernel's boot (validate takes about 20 s there under TCG)
POWER_CUT = ab_loop.PowerCut("base", 5)
RUN_ARGS = {
    "kexec": {"via": "kexec", "power_cut": POWER_CUT, "inject": ("panic",)},
    "reboot": {"via": "reboot", "power_cut": None, "inject": ("hang",)},
}


def _wanted() -> bool:
    return any("test_ab_loop.py" in n for n in SELECTED) and has("kernel-build", "seeds")


def _prepare():
    """The kernels, then the disk they are installed on (built once for both runs)."""
    kernels = lab_kernel("base"), lab_kernel("nt-v3")
    for k in kernels:
        if isinstance(k, Exception):
            return k
    try:
        loop_disk.disk(list(kernels))
    except labmod.LabError as exc:
        return exc
    return kernels


def _loop(via: str):
    def run(prepared):
        if isinstance(prepared, Exception):
            return prepared
        out = KEEP / f"ab-loop-{via}"
        shutil.rmtree(out, ignore_errors=True)
        try:
            return ab_loop.run_loop(out, *prepared, boots=BOOTS, timeout=TIMEOUT, **RUN_ARGS[via],
                                    check_args=[*ab_loop.MEMMAP, "--runs", str(RUNS), "--wait-quiet", "60"])
        except labmod.LabError as exc:
            return exc
    return run


FAULT_CHECKS = [*ab_loop.MEMMAP, "--runs", "1", "--wait-quiet", "60"]


def _faults(prepared):
    if isinstance(prepared, Exception):
        return prepared
    out = KEEP / "ab-loop-faults"
    shutil.rmtree(out, ignore_errors=True)
    try:
        return ab_loop.run_loop(out, *prepared, timeout=TIMEOUT,
                                scenarios=ab_loop.fault_scenarios(*prepared, FAULT_CHECKS))
    except labmod.LabError as exc:
        return exc


# Each run's time on this 2-core Xeon VM, from the wheel's build to QEMU's
# exit (the disk built before): the pool starts the longest guest first.
SECONDS = {"kexec": 600, "reboot": 600, "faults": 650}
for _via in RUN_ARGS:
    POOL.register(Boot(f"ab-loop-{_via}", _wanted, _loop(_via), prepare=_prepare, seconds=SECONDS[_via]))
POOL.register(Boot("ab-loop-faults", _wanted, _faults, prepare=_prepare, seconds=SECONDS["faults"]))


def _run(name: str):
    """The pool's QEMU run `name`: its LoopRun, or its error raised."""
    r = POOL.result(name)
    if isinstance(r, Exception):
        raise r
    return r


@pytest.fixture(scope="module", params=list(RUN_ARGS))
def loop(request):
    return _run(f"ab-loop-{request.param}")


@pytest.fixture(scope="module")
def kexec_loop():
    return _run("ab-loop-kexec")


@pytest.fixture(scope="module")
def reboot_loop():
    return _run("ab-loop-reboot")


@pytest.fixture(scope="module")
def faults():
    return _run("ab-loop-faults")


def _report(loop) -> dict:
    return loop.json("report/ab.json")


def _via(loop) -> str:
    return "reboot" if loop.out.name.endswith("reboot") else "kexec"


def _nothing_left(end: dict) -> None:
    """No unit, no loaded kexec kernel, no drop-in, no watchdog of the
    loop's, no one-shot entry left for grub (the next boot is the default one)."""
    assert not [u for u in end["unit_files"] if u.startswith("nttrace-ab")] and not end["enabled"], end
    assert end["kexec_loaded"] == "0", end
    assert end["dropins"] == [], end["dropins"]
    assert "RuntimeWatchdogUSec=0" in end["watchdog"], end["watchdog"]
    assert not [v for v in end["grubenv"] if v.startswith("next_entry=") and v != "next_entry="], end["grubenv"]


def test_the_loop_completes_and_the_machine_ends_on_its_default_kernel(loop):
    end = loop.end
    assert end.get("why") == "complete, back on the default kernel", loop.run.tail()
    assert end["status"]["state"] == "complete" and end["status"]["done"] == 2 * BOOTS, end["status"]
    # grub's default entry, Debian's stock kernel, through the firmware
    assert (end["kernel"], end["release"], end["booted_by"]) == (None, loop.disk.stock_release, "firmware"), end


def test_nothing_of_the_loop_is_left_on_the_machine(loop):
    assert not loop.end["status"]["unit_installed"], loop.end["status"]
    _nothing_left(loop.end)


def test_the_loop_writes_its_report_in_every_format(loop):
    assert sorted(p.name for p in (loop.state / "report").iterdir()) == ["ab.html", "ab.json", "ab.md", "ab.txt"], \
        (loop.run.results / "ab-journal.txt").read_text()[-3000:]


def test_the_kernels_are_the_installed_packages_with_releases_of_their_own(loop):
    lp = _report(loop)["loop"]
    assert lp["state"] == "complete" and lp["via"] == _via(loop), lp
    assert {side: (r["kept"], r["planned"]) for side, r in lp["runs"].items()} == \
        {"base": (BOOTS, BOOTS), "patched": (BOOTS, BOOTS)}, lp["runs"]
    kernels = lp["kernels"]
    for side in ("base", "patched"):
        release = loop.kernels[side].release
        assert release == f"7.2.13-nttrace-{loop.kernels[side].variant}"
        assert (kernels[side]["release"], kernels[side]["image"]) == (release, f"/boot/vmlinuz-{release}"), kernels
        assert loop.disk.releases[loop.kernels[side].variant] == release
    assert kernels["base"]["release"] != kernels["patched"]["release"]


def test_each_run_was_taken_on_its_sides_kernel(loop):
    """Each kept run's boot (its boot id) is one the guest's early unit saw
    running that side's kernel: the lab's own account, not the loop's."""
    variant_at = {b["boot_id"]: b["kernel"] for b in loop.kernel_boots()}
    runs = [json.loads(f.read_text()) for f in sorted((loop.state / "runs").glob("*.json"))]
    assert len(runs) == 2 * BOOTS
    for run in runs:
        ab = run["ab_run"]
        assert ab["complete"] is True and ab["validate_exit"] in (0, 1), ab
        assert variant_at[ab["boot_id"]] == loop.kernels[ab["side"]].variant, (ab["slot"], ab["side"], variant_at)
        memmap = next(c for c in run["checks"] if c["id"] == "kernel.memmap_latency")
        assert memmap["evidence"]["runs"] == RUNS and memmap["evidence"]["mode"] == "fsdax", memmap["summary"]


def test_the_boots_came_in_the_schedules_order(loop):
    """The kernels the guest's early unit found at each boot, and how each
    was reached (grub marks what it boots with BOOT_IMAGE=), are the
    schedule's, slot by slot: the default kernel first (through the
    firmware), then each slot's kernel (by kexec, or through the firmware
    and grub's one-shot entry); a boot that did not end in a run (a fault
    the lab injected) is followed by the default kernel, through the
    firmware, and the slot's kernel again; the default kernel at the end."""
    lp = _report(loop)["loop"]
    schedule = sorted(lp["schedule"], key=lambda s: s["slot"])
    variant = {side: k.variant for side, k in loop.kernels.items()}
    how = "kexec" if _via(loop) == "kexec" else "firmware"
    cut = {f["variant"] for f in loop.faults}
    injected = {b["kernel"] for b in loop.boots if b["event"] == "inject"}
    expected = [(None, "firmware")]
    for s in schedule:
        v = variant[s["side"]]
        if v in cut | injected:
            expected += [(v, how), (None, "firmware")]
        expected.append((v, how))
    expected.append((None, "firmware"))
    seen = [(b["kernel"], b["booted_by"]) for b in loop.kernel_boots()]
    assert seen == expected, (seen, lp["order"])


def test_one_run_a_side_is_not_tested_and_the_report_says_so(loop):
    """validate's rules hold in the loop's report: one run a side gives no
    spread to test a difference against, so no figure is tested, and the
    report says so."""
    rows = _report(loop)["ab"]["baseline_comparison"]
    tested = [r for r in rows if r["role"] in ("primary", "secondary")]
    assert any(r["role"] == "primary" and r["check"] == "kernel.memmap_latency" for r in tested), rows
    for r in tested:
        assert r["runs"] == [BOOTS, BOOTS] and not r["stats"]["significant"], r
        assert verdict(r) == "not tested: 1 run a side", (r["label"], r["stats"]["verdict"])


# -- the faults -----------------------------------------------------------------
def _console_between(loop, start_marker: str) -> str:
    """The console from the line holding start_marker to the next boot's line."""
    text = loop.run.console
    i = text.index(start_marker)
    j = text.find("nttrace-lab: boot: ", i + len(start_marker))
    return text[i:j if j >= 0 else len(text)]


def test_a_power_cut_while_validate_runs_is_a_run_redone_and_the_loop_completes(kexec_loop):
    loop = kexec_loop
    assert [f["fault"] for f in loop.faults] == ["power cut"], loop.faults
    st = loop.end["status"]
    # the cut came during validate: the run was cut short and redone, not a failed boot (the one
    # failure of this loop is the patched kernel's injected panic)
    assert st["runs_redone"] == 1 and [f["side"] for f in st["failures"]] == ["patched"], st
    base_boots = [b for b in loop.kernel_boots() if b["kernel"] == "base"]
    assert len(base_boots) == 2 and base_boots[0]["boot_id"] != base_boots[1]["boot_id"], base_boots
    # a power cut: the kernel said nothing of a reboot or a panic before the next boot
    after = _console_between(loop, "nttrace-lab: boot: kernel base")
    assert "reboot: Restarting system" not in after and "Kernel panic" not in after, after[-3000:]


def test_a_panic_at_a_patched_boot_is_reset_by_the_panic_setting_nttrace_made(kexec_loop):
    loop = kexec_loop
    lp = _report(loop)["loop"]
    failed = lp["failed_boots"]
    assert len(failed) == 1 and failed[0]["side"] == "patched" and not failed[0]["slot_given_up"], failed
    assert loop.end["injected"] == ["panic"], loop.end
    # a real panic, once; the kernel rebooted itself after nttrace's panic=N
    panic = _console_between(loop, "nttrace-lab: injected panic at the first boot of nt-v3")
    assert "Kernel panic - not syncing: sysrq triggered crash" in panic, panic[-3000:]
    m = re.search(r"Rebooting in (\d+) seconds", panic)
    assert m, panic[-3000:]
    sched_reset = loop.json("schedule.json")["reset"]
    assert f"panic={m[1]}" in sched_reset["cmdline_added"], sched_reset
    assert sched_reset["text"] in (loop.state / "report" / "ab.txt").read_text()


def test_a_hang_at_a_patched_boot_is_reset_by_the_watchdog_nttrace_armed(reboot_loop):
    loop = reboot_loop
    lp = _report(loop)["loop"]
    failed = lp["failed_boots"]
    assert len(failed) == 1 and failed[0]["side"] == "patched" and not failed[0]["slot_given_up"], failed
    assert loop.end["injected"] == ["hang"], loop.end
    sched_reset = loop.json("schedule.json")["reset"]
    wd = sched_reset["watchdog"]
    assert wd and wd["module"] == "i6300esb" and wd["device"].startswith("/dev/watchdog"), sched_reset
    # nothing in the guest rebooted it: no kernel reboot, no panic, between
    # the hang and the next boot; only the watchdog's reset brought it back
    hung = _console_between(loop, "nttrace-lab: injected hang at the first boot of nt-v3")
    assert "reboot: Restarting system" not in hung and "Kernel panic" not in hung, hung[-3000:]
    inject = next(b for b in loop.boots if b["event"] == "inject")
    after = [b for b in loop.kernel_boots() if b["host_time"] > inject["host_time"]][0]
    assert after["kernel"] is None and after["booted_by"] == "firmware", after
    # the reset came no sooner than the watchdog's runtime timeout after the hang
    assert after["host_time"] - inject["host_time"] >= wd["runtime_s"] - 2, (inject, after, wd)


# -- what must not become a run (the --faults run) ----------------------------------------
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


def _changed_between_boots(faults, name: str, fault: str) -> tuple[dict, str]:
    end = faults.end_of(name)
    st = end["status"]
    assert st["state"] == "failed", st
    inject = [b for b in faults.boots if b["event"] == "inject" and b["fault"] == fault]
    assert len(inject) == 1 and inject[0]["kernel"] == faults.kernels["base"].variant, inject
    # stopped at the base kernel's boot, before validate: where the loop stopped, no patched boot after it
    assert end["kernel"] == faults.kernels["base"].variant and end["booted_by"] == "kexec", end
    ended = next(b["host_time"] for b in faults.boots if b["event"] == "end" and b.get("scenario") == name)
    patched = [b for b in faults.kernel_boots() if inject[0]["host_time"] < b["host_time"] < ended]
    assert patched == [], patched
    runs = faults.run.results / "ab" / name / "runs"
    assert not list(runs.glob("*.json")) if runs.exists() else True
    journal = (faults.run.results / f"ab-journal-{name}.txt").read_text()
    assert f"{name}: LOOP STOPPED: {st['why']}" in journal, journal[-3000:]
    _nothing_left(end)
    return st, journal


def test_an_image_rebuilt_between_boots_stops_the_loop(faults):
    st, _ = _changed_between_boots(faults, "image", "image")
    patched = faults.kernels["patched"].release
    assert st["why"].startswith(f"the patched kernel {patched}: /boot/vmlinuz-{patched} changed since the loop "
                                "started (sha256 "), st["why"]
    assert st["why"].endswith("no mixed builds"), st["why"]
    assert faults.end_of("image")["put_back"] == [f"/boot/vmlinuz-{patched}"]


def test_a_module_tree_rebuilt_between_boots_stops_the_loop(faults):
    st, _ = _changed_between_boots(faults, "modules", "modules")
    patched = faults.kernels["patched"].release
    assert st["why"].startswith(f"the patched kernel {patched}: the module tree /lib/modules/{patched} changed "
                                "since the loop started (sha256 "), st["why"]
    assert faults.end_of("modules")["put_back"][0].startswith(f"/lib/modules/{patched}/kernel/")


def test_a_patched_kernel_whose_checks_skip_gives_no_run_and_the_loop_ends_incomplete(faults):
    """Its headers purged after the start (as apt autoremove would): at its
    boots bcc has nothing to compile the probe against, the check skips,
    and each boot is a failed measurement, never a run; the slot is given up
    after its second, and the loop ends failed, incomplete, on the default
    kernel, with nothing left enabled."""
    end = faults.end_of("headers")
    st = end["status"]
    assert st["state"] == "failed" and st["why"].startswith("incomplete: no patched run (last: a failed "
                                                             "measurement: "), st
    assert (end["kernel"], end["booted_by"]) == (None, "firmware"), end
    _nothing_left(end)
    lp = faults.json("report/ab.json", "headers")["loop"]
    assert {side: r["kept"] for side, r in lp["runs"].items()} == {"base": 1, "patched": 0}, lp["runs"]
    failed = lp["failed_boots"]
    assert [(f["side"], f["kind"]) for f in failed] == [("patched", "measurement")] * 2, failed
    assert failed[-1]["slot_given_up"], failed
    patched = faults.kernels["patched"].release
    for f in failed:        # bcc found nothing to compile the probe against: the check skipped, named why
        assert f["why"].startswith("a failed measurement: its one selected check skipped (kernel.memmap_latency: "), \
            f["why"]
        assert f"/lib/modules/{patched}/build missing" in f["why"], f["why"]
    unmeasured = faults.run.results / "ab" / "headers" / "unmeasured"
    assert len(list(unmeasured.glob("*.json"))) == 2, list(unmeasured.iterdir()) if unmeasured.exists() else None
    text = (faults.run.results / "ab" / "headers" / "report" / "ab.txt").read_text()
    assert text.startswith("nttrace ab headers: failed (incomplete: no patched run"), text[:500]
    assert "no A/B yet: 1 base and 0 patched runs kept" in text, text
    journal = (faults.run.results / "ab-journal-headers.txt").read_text()
    assert "a failed measurement (1 in a row)" in journal and "LOOP INCOMPLETE: incomplete: no patched run" in journal, \
        journal[-3000:]
