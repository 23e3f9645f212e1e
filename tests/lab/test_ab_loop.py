"""`nttrace ab` proven in the lab: ONE QEMU run (lab/ab_loop.py) in which the
guest boots the base kernel, runs `nttrace ab start` with the lab's base and
nt-v3 kernels, two boots a side, and kexecs between them; the patched
kernel's first boot panics for real (sysrq c at boot; QEMU resets into its
default kernel, base, as firmware would), and the loop must record that
failed boot, boot the slot once more and complete; at its end the guest is
back on its default kernel with nothing of the loop left enabled. The tests
read the loop's own state directory and report, copied out by the guest.

Each boot checks the memmap path only (kernel.memmap_latency over a few
rebinds of an fsdax namespace): the series' path, and little else for the
guest to spend time on. Two boots a side prove the machinery, not a change:
the report says no figure is testable at 2/2 runs, as it must.
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
from lab_boots import POOL, Boot
from nttrace.validate.ab_text import verdict

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu", "kernel-build", "seeds")]

BOOTS = 2
RUNS = 3           # rebinds a boot: enough for the check's figures, few for the guest's time
KEEP = Path(os.environ.get("NTTRACE_LAB_KEEP", "/var/cache/nttrace-lab/kernels-last-run")) / "ab-loop"
# one bound for the whole QEMU run: first boot, 2 + 2 slots, the failed boot, the last reboot
TIMEOUT = float(os.environ.get("NTTRACE_LAB_TIMEOUT", "2400"))


def _wanted() -> bool:
    return any("test_ab_loop.py" in n for n in SELECTED) and has("kernel-build", "seeds")


def _kernels():
    return lab_kernel("base"), lab_kernel("nt-v3")


def _loop(kernels):
    """The LoopRun, or the error that stopped a build or the run."""
    for k in kernels:
        if isinstance(k, Exception):
            return k
    shutil.rmtree(KEEP, ignore_errors=True)
    try:
        return ab_loop.run_loop(KEEP, *kernels, boots=BOOTS, inject_panic=True, timeout=TIMEOUT,
                                check_args=[*ab_loop.MEMMAP, "--runs", str(RUNS), "--wait-quiet", "60"])
    except labmod.LabError as exc:
        return exc


# The run's time on epyc-vm, 2026-12-06, from the wheel's build to QEMU's
# exit, 9 boots: 338 s (770d864; 548 s at baf1d45 beside the 4+4 loop's
# guest and a CI run): the pool starts the longest guest first.
SECONDS = 338
POOL.register(Boot("ab-loop", _wanted, _loop, prepare=_kernels, seconds=SECONDS))


@pytest.fixture(scope="module")
def loop():
    r = POOL.result("ab-loop")
    if isinstance(r, Exception):
        raise r
    return r


@pytest.fixture(scope="module")
def report(loop):
    return loop.json("report/ab.json")


def test_the_loop_completes_and_the_guest_ends_on_its_default_kernel(loop):
    end = loop.end
    assert end["why"] == "complete, back on the default kernel", loop.run.tail()
    assert end["status"]["state"] == "complete" and end["status"]["done"] == 2 * BOOTS, end["status"]
    # base is QEMU's -kernel: after the loop's last reboot the guest came up on it
    assert (end["kernel"], end["booted_by"]) == ("base", "firmware"), end
    assert "nttrace.boot=firmware" in end["cmdline"].split()
    # nothing of the loop left enabled or loaded
    assert not end["status"]["unit_installed"], end
    assert not [u for u in end["unit_files"] if u.startswith("nttrace-ab")] and not end["enabled"], end
    assert end["kexec_loaded"] == "0", end


def test_the_loop_writes_its_report_in_every_format(loop):
    assert sorted(p.name for p in (loop.state / "report").iterdir()) == ["ab.html", "ab.json", "ab.md", "ab.txt"], \
        (loop.run.results / "ab-journal.txt").read_text()[-3000:]


def test_the_report_keeps_two_runs_a_side_of_each_kernel(loop, report):
    lp = report["loop"]
    assert lp["state"] == "complete" and lp["via"] == "kexec", lp
    assert {side: (r["kept"], r["planned"]) for side, r in lp["runs"].items()} == \
        {"base": (BOOTS, BOOTS), "patched": (BOOTS, BOOTS)}, lp["runs"]
    # the kernels: the lab's base and nt-v3, one release, told apart by their build strings
    kernels = lp["kernels"]
    assert kernels["base"]["release"] == kernels["patched"]["release"] == loop.kernels["base"].release, kernels
    for side in ("base", "patched"):
        assert kernels[side]["image"] == f"/lab-kernels/{loop.kernels[side].variant}/bzImage", kernels[side]
        assert kernels[side]["build"].endswith(ab_loop.build_string(loop.kernels[side].bzimage)), kernels[side]
    assert kernels["base"]["build"] != kernels["patched"]["build"]


def test_each_run_was_taken_on_its_sides_kernel(loop):
    """Each kept run's boot (its boot id) is one the guest's early unit saw
    running that side's kernel: the lab's own account, not the loop's."""
    variant_at = {b["boot_id"]: b["kernel"] for b in loop.boots if b["event"] == "boot"}
    runs = [json.loads(f.read_text()) for f in sorted((loop.state / "runs").glob("*.json"))]
    assert len(runs) == 2 * BOOTS
    for run in runs:
        ab = run["ab_run"]
        assert ab["complete"] is True and ab["validate_exit"] in (0, 1), ab
        assert variant_at[ab["boot_id"]] == loop.kernels[ab["side"]].variant, (ab["slot"], ab["side"], variant_at)
        memmap = next(c for c in run["checks"] if c["id"] == "kernel.memmap_latency")
        assert memmap["evidence"]["runs"] == RUNS and memmap["evidence"]["mode"] == "fsdax", memmap["summary"]


def test_the_boots_came_in_the_schedules_order(loop, report):
    """The kernels the guest's early unit found at each boot are the
    schedule's, slot by slot: the first boot (the default, before the loop),
    then each slot's kernel (the failed one: the patched kernel that
    panicked, the default that the reset brought up, the patched kernel
    again), and the default at the end."""
    schedule = sorted(report["loop"]["schedule"], key=lambda s: s["slot"])
    variant = {side: k.variant for side, k in loop.kernels.items()}
    failed = {b["slot"] for b in report["loop"]["failed_boots"]}
    expected = [("base", "firmware")]
    for s in schedule:
        if s["slot"] in failed:
            expected += [(variant[s["side"]], "kexec"), ("base", "firmware")]
        expected.append((variant[s["side"]], "kexec"))
    expected.append(("base", "firmware"))
    seen = [(b["kernel"], b["booted_by"]) for b in loop.boots if b["event"] == "boot"]
    assert seen == expected, (seen, report["loop"]["order"])
    # interleaved: each round holds one boot of each side
    rounds: dict = {}
    for s in schedule:
        rounds.setdefault(s["round"], []).append(s["side"])
    assert sorted(rounds) == list(range(1, BOOTS + 1)) and all(sorted(v) == ["base", "patched"] for v in rounds.values())


def test_the_panicking_boot_is_recorded_retried_once_and_the_loop_goes_on(loop, report):
    failed = report["loop"]["failed_boots"]
    assert len(failed) == 1, failed
    f = failed[0]
    builds = report["loop"]["kernels"]
    assert f["side"] == "patched" and not f["slot_given_up"], f
    # expected the patched kernel; found the default one, which the reset brought up
    assert (f["expected"]["build"], f["found"]["build"]) == (builds["patched"]["build"], builds["base"]["build"]), f
    slot = loop.json("state.json")["slots"][str(f["slot"])]
    assert slot["attempts"] == 2 and slot["outcome"] == "run", slot
    # it was a real panic, once
    console = loop.run.console
    assert console.count("nttrace-lab: injected panic at the first boot of nt-v3") == 1
    assert re.search(r"Kernel panic - not syncing: sysrq triggered crash", console), loop.run.tail()
    assert loop.end["panicked_marker"]


def test_two_runs_a_side_are_not_tested_and_the_report_says_so(loop, report):
    """validate's rules hold in the loop's report: at 2 runs a side no
    figure can reach its alpha, so none is tested, and the text says so."""
    rows = report["ab"]["baseline_comparison"]
    tested = [r for r in rows if r["role"] in ("primary", "secondary")]
    assert any(r["role"] == "primary" and r["check"] == "kernel.memmap_latency" for r in tested), rows
    for r in tested:
        assert r["runs"] == [BOOTS, BOOTS] and not r["stats"]["significant"], r
        assert verdict(r) == f"not testable at {BOOTS}/{BOOTS} runs", (r["label"], r["stats"]["verdict"])
    text = (loop.state / "report" / "ab.txt").read_text()
    assert f"not testable at {BOOTS}/{BOOTS} runs" in text, text
