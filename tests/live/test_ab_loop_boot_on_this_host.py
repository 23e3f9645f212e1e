# SPDX-License-Identifier: Apache-2.0
"""One boot of a loop on this host, with everything real but the boot: the
running kernel's facts (uname, /proc/version, the boot id), the quiet-host
wait, and `nttrace validate --json` run by the installed command as the
unit runs it. The loop's base kernel is this running kernel (its release and
build string from /proc/version); the boot action and the unit's removal
are recorders, so nothing is loaded, installed or booted."""
import json
import os
import platform
import sys
from pathlib import Path

import pytest

from ab_loop_machine import make_loop
from nttrace.ab import kernels, step, store
from nttrace.ab.step import Machine, real_machine


@pytest.mark.needs("root")
def test_the_running_kernel_is_measured_and_the_next_boot_asked_for(tmp_path):
    loop = make_loop(tmp_path, rounds=1, seed=1)
    sched = loop.schedule()
    here = kernels.Running.now()
    first = loop.slots()[0]
    # the first slot's kernel is the one running here, as a real loop's would be after its boot
    sched["kernels"][first.side].update(release=platform.release(), build=here.build())
    # a check with a primary figure that runs unasked here (compaction's migrate_pages() calls): a boot
    # whose measured checks give none is a failed measurement, not a run
    sched["validate_args"] = ["--check", "probe.migrate"]
    sched["wait_quiet_s"] = 30
    sched["nttrace"]["exe"] = str(Path(sys.executable).with_name("nttrace"))
    store.write_json(loop.schedule_path, sched)
    st = loop.state()
    st["booting"] = {"slot": 1, "side": first.side, "attempt": 1, "at": 0}
    st["slots"] = {"1": {"attempts": 1, "failures": [], "outcome": None, "booted_at": 0, "stored_at": None}}
    loop.save_state(st)

    real = real_machine(loop, sched)
    asked, finished = [], []
    m = Machine(boot=lambda k, c, e: asked.append(k), finish=lambda reboot: finished.append(reboot) or [],
                wait_quiet=real.wait_quiet, validate=real.validate, write_report=lambda lp: None)
    assert step.step(loop, m) == 0, loop.state().get("why")
    run = loop.runs()[1]
    assert run["kernel_release"] == platform.release()
    assert run["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert [c["id"] for c in run["checks"]] == ["probe.migrate"]
    assert run["ab_run"]["machine"]["cmdline"] == Path("/proc/cmdline").read_text().strip()
    assert run["ab_run"]["quiet_wait"]["state"] in ("quiet", "busy", "contended")
    assert run["ab_run"]["quiet_wait"]["window_s"] >= 9
    assert run["ab_run"]["validate_exit"] in (0, 1) and run["ab_run"]["kernel"]["release"] == platform.release()
    assert asked and asked[-1]["build"] == sched["kernels"][loop.slots()[1].side]["build"]
    assert finished == []
    assert os.stat(loop.run_path(first)).st_mode & 0o777 == 0o600
    # the unit running again in the same boot does nothing
    assert step.step(loop, m) == 0 and len(asked) == 1
    assert json.loads(loop.state_path.read_text())["slots"]["1"]["outcome"] == "run"
