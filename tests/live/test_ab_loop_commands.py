# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab status|report|stop|step` through the installed command on a
loop whose boots were simulated (tests/ab_loop_machine.py: the state machine
is the real one, the runs the lab's recorded ones): what a user on the
machine runs mid-loop and after it. Nothing here boots: `step` runs only on a
stopped loop, where all it may do is make sure nothing is left enabled."""
import json
import os
from pathlib import Path

import pytest

from ab_loop_machine import DEFAULT, SimMachine, make_loop
from conftest import run_nttrace
from nttrace.ab import step, unit


@pytest.fixture
def mid_loop(tmp_path):
    before = sorted(unit.UNIT_DIR.glob("nttrace-ab*"))
    # the loop's units, as `ab start` leaves them: their drop-ins, which `ab stop` removes
    loop = make_loop(tmp_path, rounds=3, seed=6, unit_dir=unit.UNIT_DIR)
    sim = SimMachine(loop)
    m = sim.machine()
    step.begin(loop, m)
    for n in range(4):
        sim.reboot(DEFAULT if n == 1 else None)
        step.step(loop, m)
    env = dict(os.environ, NTTRACE_AB_DIR=str(loop.dir.parent))
    try:
        yield loop, env
    finally:
        left = sorted(unit.UNIT_DIR.glob("nttrace-ab*"))
        unit.remove("t")
    assert left == before


@pytest.mark.needs("root")
def test_status_report_stop_and_a_step_after_stop(mid_loop, tmp_path):
    loop, env = mid_loop
    p = run_nttrace("ab", "status", "t", "--json", env=env)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert (s["state"], s["total"], s["done"]) == ("running", 6, 3)
    assert [f["slot"] for f in s["failures"]] == [2] and s["next"]["slot"] == 4
    assert s["running_kernel"]["release"] == os.uname().release and s["running_kernel"]["is"] is None
    text = run_nttrace("ab", "status", "t", env=env)
    assert text.returncode == 0 and "boot 4 of 6 next: " in text.stdout and "failed boots: 1" in text.stdout

    out = tmp_path / "report"
    r = run_nttrace("ab", "report", "t", "--out", str(out), env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ab.html", "ab.json", "ab.md", "ab.txt"]
    data = json.loads((out / "ab.json").read_text())
    kept = data["loop"]["runs"]
    assert kept["base"]["kept"] + kept["patched"]["kept"] == 3
    md = run_nttrace("ab", "report", "t", "--format", "markdown", env=env, timeout=600)
    assert md.returncode == 0 and md.stdout.startswith("```\nnttrace ab t: running")

    stop = run_nttrace("ab", "stop", "t", env=env)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith("nttrace ab t: stopped; 3 runs kept in ")
    assert loop.state()["state"] == "stopped" and len(loop.runs()) == 3
    kexec_loaded = Path("/sys/kernel/kexec_loaded")
    assert not kexec_loaded.exists() or kexec_loaded.read_text().strip() == "0"

    st = run_nttrace("ab", "step", "t", env=env)
    assert st.returncode == 0 and "t is stopped: nothing to do" in st.stderr
    assert loop.state()["state"] == "stopped" and len(loop.runs()) == 3
