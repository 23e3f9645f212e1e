# SPDX-License-Identifier: Apache-2.0
"""The quick plan run on this host: native.nt_benefit within its time and
memory budget, a bad emulated LLC refused in one line, and `bench native`
stating its plan, progress, wall time and peak memory."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import one_line_error, run_nttrace
from nttrace.kernel import cache_topology
from nttrace.reference import measurements

BUDGET = measurements.QUICK_BUDGET_BYTES
# What the whole native.nt_benefit run (Python, bcc's capability report, the
# plan's buffers) may hold at its peak: the 200 MiB for validate --quick.
PEAK_RSS_MIB = 200


@pytest.mark.needs("root", "btf", "tracefs", "bcc")
@pytest.mark.parametrize("emulated", [None, "32M"], ids=["this-hosts-llc", "emulated-32MiB-llc"])
def test_nt_benefit_runs_in_budget_and_says_how_its_cells_went_cold(emulated):
    env = dict(os.environ)
    env.pop(cache_topology.ENV, None)
    if emulated:
        env[cache_topology.ENV] = emulated
    exe = str(Path(sys.executable).with_name("nttrace"))
    # a fresh interpreter per measurement, so RUSAGE_CHILDREN holds this run only
    code = ("import resource, subprocess, sys, json; p = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
            "print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr,"
            " 'rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))")
    proc = subprocess.run([sys.executable, "-c", code, exe, "validate", "--quick", "--check", "native.nt_benefit",
                           "--json"], capture_output=True, text=True, env=env, timeout=300)
    res = json.loads(proc.stdout)
    assert res["rc"] == 0, res["err"]
    check = json.loads(res["out"])["checks"][0]
    plan = check["evidence"]["plan"]
    assert plan["budget_bytes"] == BUDGET and plan["memmap_bytes"] <= BUDGET and 2 * plan["page_copy_bytes"] <= BUDGET
    llc = plan["llc"]
    if emulated:
        assert llc["emulated"] and llc["bytes"] == 32 << 20 and "emulated" in llc["source"]
    else:
        assert not llc["emulated"] and llc["bytes"] == cache_topology.last_level_cache(environ={}).bytes
    assert "before every cell" in plan["cold"] and ("CLFLUSH" in plan["cold"])
    assert res["rss"] <= PEAK_RSS_MIB, f"native.nt_benefit peaked at {res['rss']:.0f} MiB"


@pytest.mark.needs("root")   # without it, validate stops at its missing privilege (exit 3)
def test_a_bad_emulated_llc_is_one_line_and_exit_2():
    env = dict(os.environ, **{cache_topology.ENV: "huge"})
    proc = run_nttrace("validate", "--quick", "--check", "native.nt_benefit", env=env)
    assert proc.returncode == 2
    assert cache_topology.ENV in one_line_error(proc)


@pytest.mark.needs("root")
def test_bench_native_prints_progress_wall_time_and_peak_memory():
    proc = run_nttrace("bench", "native", "--quick", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    progress = [line for line in proc.stderr.splitlines() if line.startswith("... ")]
    assert [line.split()[1] for line in progress] == ["correctness", "copy_table", "fixed_size_nt", "memmap_model",
                                                        "page_copy", "store_forwarding", "mixed_nt"]
    assert all("peak RSS" in line for line in progress)
    assert "quick plan" in proc.stderr and "LLC" in proc.stderr
    run = report["run"]
    assert 0 < run["wall_s"] < 600 and PEAK_RSS_MIB >= run["peak_rss_mib"] > 10
    assert report["method"]["evict"] == "flush" and report["method"]["largest_buffers_bytes"] <= BUDGET
    assert report["memmap_model"]["movnti_write_limit_ms"] > 0 and report["memmap_model"]["template_movnti_ms"] > 0

