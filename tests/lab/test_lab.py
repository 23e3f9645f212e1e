# SPDX-License-Identifier: Apache-2.0
"""nttrace on a real kernel with kprobes, fentry, pmem and a CPU-less memory
tier: a Debian 6.1 guest under QEMU/TCG (lab/). One boot runs every
scenario; the tests below read its results. Select with -m lab, skip with
-m "not lab"."""
import os
import re
import subprocess

import pytest

from lab import lab as labmod
from lab import lab_checks
from lab.lab_checks import checks
from conftest import SELECTED
from lab_boots import POOL, Boot
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.migrate_fn import MigrateFunctionProbe

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu")]

LAB_TIMEOUT = float(os.environ.get("NTTRACE_LAB_TIMEOUT", "2400"))
# The guests this module's tests read, and how each is run; they boot in
# tests/lab_boots.py's pool, from the end of collection.
GUESTS = {
    "lab": {"timeout": LAB_TIMEOUT},
    "systemd": {"systemd": True, "timeout": LAB_TIMEOUT},
    "hang": {"timeout": 90, "append": "nttrace.inject=hang"},
    "panic": {"timeout": 90, "append": "nttrace.inject=panic"},
}


def _wanted(guest: str) -> bool:
    here = [n for n in SELECTED if "test_lab.py" in n]
    if guest in ("hang", "panic"):
        return any(f"[{guest}-" in n for n in here)
    if guest == "systemd":
        return any("systemd" in n for n in here)
    return any("systemd" not in n and "failing_guest" not in n for n in here)


def _run(guest: str):
    """(results directory, the guest's LabRun or the LabError that ended it)."""
    results = POOL.tmp.mktemp(guest)
    try:
        return results, labmod.run(results, **GUESTS[guest])
    except labmod.LabError as exc:
        return results, exc


# Each guest's time in the cached CI run of 2026-12-02 (its console's last
# uptime stamp, seconds): the pool starts the longest first. The hang guest
# boots in ~20 s, then sleeps until its bound: it needs no core of its own.
SECONDS = {"lab": 353, "systemd": 343, "hang": 90, "panic": 26}

for _name in GUESTS:
    POOL.register(Boot(_name, lambda g=_name: _wanted(g), lambda _prepared, g=_name: _run(g),
                       seconds=SECONDS[_name], idle=_name == "hang"))


def finished(name: str):
    _results, run = POOL.result(name)
    if isinstance(run, labmod.LabError):
        raise run
    return run


@pytest.fixture(scope="module")
def lab():
    return finished("lab")


def test_guest_kernel_has_what_this_host_lacks(lab):
    caps = lab.json("capabilities")["capabilities"]
    assert caps["kprobe"]["available"], caps["kprobe"]
    assert caps["btf"]["available"] and caps["bcc"]["available"], lab.tail()
    assert caps["pmem"]["available"], caps["pmem"]
    assert checks(lab.json("capabilities"))["kernel.nt_support"]["status"] == "pass"


@pytest.mark.parametrize("mode", ["fentry", "kprobe"])
def test_probes_attach_and_detach_cleanly(lab, mode):
    r = lab.json("attach_modes")
    st = r[mode]["status"]
    assert st[MigrateProbe.name] == {"status": "attached", "via": "tracepoint"}
    for probe in (MemmapProbe.name, CopyProbe.name):
        assert st[probe]["status"] == "attached", st[probe]
        if mode == "kprobe" or not r["caps"]["fentry"]["available"]:
            assert st[probe]["via"] == "kprobe"
        else:
            assert st[probe]["via"] == "fentry"
    assert r[mode]["detached_clean"]


def test_migrate_pages_fentry_falls_back_to_kprobe_and_agrees_with_the_tracepoints(lab):
    r = lab.json("attach_modes")
    for mode in ("fentry", "kprobe"):
        fn = r[mode][MigrateFunctionProbe.name]
        assert fn["status"] == "attached", fn
        if mode == "fentry" and r["caps"]["fentry"]["available"]:
            # x86's BPF trampoline took at most six arguments before 6.6 (then
            # twelve): whether fentry takes migrate_pages() is the guest
            # kernel's fact, its release and the function's arity in its BTF
            major, minor = (int(x) for x in r["release"].split(".")[:2])
            takes = r["migrate_pages_params"] <= (12 if (major, minor) >= (6, 6) else 6)
            assert (fn["via"], bool(fn.get("fentry_fallback"))) == (("fentry", False) if takes else ("kprobe", True)), \
                (r["release"], r["migrate_pages_params"], fn)
        else:
            assert fn["via"] == "kprobe"
        # the triggered compaction (MIGRATE_SYNC; kcompactd's own runs use
        # SYNC_LIGHT) is seen the same number of times by both probes
        key = ("MIGRATE_SYNC", "MR_COMPACTION")
        tp = {(row["mode"], row["reason"]): row["calls"] for row in r[mode][MigrateProbe.name]["rows"]}
        fn_calls = {(row["mode"], row["reason"]): row["calls"] for row in fn["rows"]}
        assert fn_calls.get(key, 0) >= 1 and fn_calls.get(key) == tp.get(key), (fn_calls, tp)


def _memmap(lab, name, pgmap, shift):
    return lab_checks.memmap_matches_the_kernels_line(lab.json(name), pgmap, shift, runs=30)


def test_memmap_fsdax_rebinds_match_the_kernels_own_timing(lab):
    _memmap(lab, "memmap_fsdax", "FS_DAX", 0)


def test_memmap_devdax_rebinds_match_the_kernels_own_timing(lab):
    _memmap(lab, "memmap_devdax", "GENERIC", 9)


def test_demotion_to_the_cpuless_node(lab):
    r = lab.json("demotion")
    assert r["nodes_online"] in ("0-1", "0,1"), r
    c = checks(r["report"])["kernel.demotion_nt"]
    ev = c["evidence"]
    assert ev["probe_succeeded_pages"] == ev["pgdemote_delta"] > 0, ev
    assert c["status"] == "warn" and "cached" in c["summary"]  # Debian 6.1 has no NT mode
    copy = {row["routine"]: row for row in ev[CopyProbe.name]["rows"]}
    assert sum(copy[r]["calls"] for r in ("folio_mc_copy", "folio_copy") if r in copy) > 0, copy
    # THPs count at their size: the copied bytes are the demoted pages' bytes
    assert ev["copied_pages"] == ev["pgdemote_delta"], ev


def test_daemon_in_the_guest_scraped_from_the_host(lab):
    assert lab.scrape.get("status") == 200, lab.scrape
    body = lab.scrape["body"]
    assert 'nttrace_probe_up{probe="memmap"' in body and 'nttrace_probe_up{probe="copy"' in body
    assert "nttrace_migrate_calls_total{" in body
    d = lab.json("daemon")
    assert d["host_scraped"] and d["rc"] == 0 and d["stop_s"] < 2.0, d


@pytest.mark.parametrize("inject,message", [("hang", "did not finish"), ("panic", "guest kernel panicked")])
def test_a_failing_guest_fails_within_the_bound_and_leaves_no_qemu(inject, message):
    results, err = POOL.result(inject)
    assert isinstance(err, labmod.LabError), err
    assert re.search(message, str(err)) and "console" in str(err), err
    assert subprocess.run(["pgrep", "-f", str(results)], capture_output=True).returncode == 1


# -- the daemon as a systemd service, in a guest whose PID 1 is systemd ---------------
@pytest.fixture(scope="module")
def systemd_lab():
    return finished("systemd")


def test_systemd_starts_the_installed_unit_only_after_ready(systemd_lab):
    r = systemd_lab.json("systemd")
    assert r["pid1"] == "systemd", r["pid1"]
    assert r["unit_execstart"] == "/usr/bin/nttrace daemon --config /etc/nttrace/nttrace.toml", r["unit_execstart"]
    assert r["start_rc"] == 0, r["start_stderr"]
    # Type=notify: "activating" while bcc compiles, "active" once READY=1 came
    assert "activating" in r["states_while_starting"] and r["active_after_start"] == "active", r
    assert r["health_after_start"]["probes"][MigrateProbe.name]["status"] == "attached"
    assert r["programs_running"], "no nttrace BPF program while the service runs"


def test_under_perf_event_paranoid_3_the_service_fails_at_once_and_says_why(systemd_lab):
    r = systemd_lab.json("systemd")
    # the lab image's stock kernel is Debian's, whose default is 3 (upstream has no level 3)
    assert int(r["perf_event_paranoid"]) == 3, "the systemd lab no longer boots a Debian kernel: " + r["perf_event_paranoid"]
    assert r["paranoid_start_rc"] != 0
    assert r["paranoid_start_s"] < 90, r["paranoid_start_s"]   # not systemd's 120 s start timeout
    assert "perf_event_paranoid is 3" in r["paranoid_journal"] and "status=3" in r["paranoid_journal"], \
        r["paranoid_journal"]


def test_systemd_runs_it_with_only_cap_bpf_and_cap_perfmon(systemd_lab):
    caps = systemd_lab.json("systemd")["caps"]
    want = (1 << 38) | (1 << 39)   # CAP_PERFMON | CAP_BPF
    assert caps["CapEff"] == want and caps["CapBnd"] == want, {k: hex(v) for k, v in caps.items()}


def test_systemd_service_scraped_from_the_host(systemd_lab):
    assert systemd_lab.scrape.get("status") == 200, systemd_lab.scrape
    assert 'nttrace_probe_up{probe="migrate",via="tracepoint"} 1.0' in systemd_lab.scrape["body"]


def test_systemctl_reload_applies_a_probe_change_in_place(systemd_lab):
    r = systemd_lab.json("systemd")
    assert r["reload_rc"] == 0
    assert r["health_after_reload"] and set(r["health_after_reload"]["probes"]) == {MigrateProbe.name, CopyProbe.name}, r
    assert r["pid_after_reload"] == r["main_pid"]   # a reload, not a restart


def test_watchdog_restarts_a_hung_daemon(systemd_lab):
    r = systemd_lab.json("systemd")
    assert r["pid_after_watchdog"] and r["pid_after_watchdog"] != r["main_pid"], r
    assert r["restarts"] >= 1 and "watchdog" in r["result_after_watchdog"].lower()
    assert r["health_after_watchdog"]["probes"][MigrateProbe.name]["status"] == "attached"


def test_systemctl_stop_is_quick_and_leaves_no_program(systemd_lab):
    r = systemd_lab.json("systemd")
    assert r["stop_rc"] == 0 and r["stop_s"] < 2.0 and r["inactive_after_stop"] == "inactive", r
    assert r["programs_after_stop"] == []
