# SPDX-License-Identifier: Apache-2.0
"""validate's closing paragraph (nttrace.validate.paths): which of the two
paths nttrace is for a run observed, the one thing missing for each it did
not, and the host's contention where timings were judged on it; read from
the report alone, so recorded reports say it too (the goldens hold its
rendering of the lab's)."""
import io
import json

from conftest import FIXTURES
from nttrace.ab.compare import merge
from nttrace.validate import paths, runner

NO_PMEM = {"available": False, "detail": "libnvdimm present, no namespaces"}
ONE_TIER = {"available": False, "detail": "1 NUMA node online (0); 1 memory tier (memory_tier4): no lower tier to "
                                          "demote to; demotion_enabled=false"}
HAS = {"available": True, "detail": "present"}
NT_BENEFIT = {"id": "native.nt_benefit", "status": "pass", "summary": "", "evidence": {}}


def report(checks=(), pmem=NO_PMEM, tiers=ONE_TIER, sysroot="/", conditions=None) -> dict:
    return {"version": "0.1.0", "sysroot": sysroot, "capabilities": {"pmem": pmem, "numa:tiers": tiers},
            "kernel": {"source": "btf", "nt_revision": "none"}, "checks": list(checks),
            "summary": {"pass": 0, "fail": 0, "warn": 0, "skip": 0},
            **({"conditions": conditions} if conditions else {})}


def skipped(cid: str, why: str) -> dict:
    return {"id": cid, "status": "skip", "summary": why, "evidence": {}}


def missing(r: dict) -> dict:
    return {p["path"]: p.get("missing") for p in paths.observed(r)}


def test_a_host_without_pmem_or_a_lower_tier_is_told_so_whatever_ran():
    """This host's case (validate --quick on a VM): fails if the summary
    blames an option (--rebind, --demote) where the host lacks the hardware
    an option cannot give."""
    for checks in ([NT_BENEFIT], [skipped("kernel.memmap_latency", "run with --rebind NAMESPACE to time it"),
                                  skipped("kernel.demotion_nt", "run with --demote to exercise it")]):
        assert missing(report(checks)) == {"memmap_init": f"no pmem namespace ({NO_PMEM['detail']})",
                                           "demotion": f"no lower memory tier ({ONE_TIER['detail']})"}


def test_where_the_host_has_both_the_option_or_the_checks_own_reason_is_named():
    """Fails if a run that left the slow checks out (--quick) or skipped
    them for want of their option does not say which option runs them."""
    quick = missing(report([NT_BENEFIT], pmem=HAS, tiers=HAS))
    assert quick["memmap_init"].startswith("not run: --rebind NAMESPACE (kernel.memmap_latency")
    assert quick["demotion"].startswith("not run: --demote (kernel.demotion_nt")
    asked_not = missing(report([skipped("kernel.memmap_latency", "run with --rebind NAMESPACE to time it"),
                                skipped("probe.copy", "its workload changes state: run with --exercise copy"),
                                skipped("kernel.demotion_nt", "run with --demote to exercise it")],
                               pmem=HAS, tiers=HAS))
    assert asked_not == {"memmap_init": "run with --rebind NAMESPACE to time it",
                         "demotion": "run with --demote to exercise it"}


def test_either_demotion_check_observes_demotion_and_an_offline_copy_observes_nothing():
    """Fails if probe.copy's demotion does not count as observing it, or if
    a --sysroot run is said to lack hardware it never looked at."""
    r = report([skipped("kernel.demotion_nt", "run with --demote"),
                {"id": "probe.copy", "status": "pass", "summary": "", "evidence": {}}], pmem=HAS, tiers=HAS)
    assert [p for p in paths.observed(r) if p["path"] == "demotion"][0]["by"] == ["probe.copy"]
    offline = missing(report(sysroot="/srv/capture"))
    assert set(offline.values()) == {"an offline copy (--sysroot /srv/capture): only a live kernel runs it"}


def test_the_lab_recording_observed_both():
    """The lab's nt-v3 boot, recorded: both paths observed, by the checks
    that ran them. Fails if a check that ran is not counted."""
    r = merge([json.loads(p.read_text()) for p in sorted((FIXTURES / "recorded" / "nt-v3-7.2").glob("*.report.json"))])
    assert [(p["path"], p["observed"], p.get("by")) for p in paths.observed(r)] == [
        ("memmap_init", True, ["kernel.memmap_latency"]), ("demotion", True, ["kernel.demotion_nt"])]


CONTENDED = {"state": "contended", "why": "beside cc1, qemu-system-x86; other processes used 183% of a CPU"}


def test_contention_is_said_where_timings_were_judged_on_a_loaded_host():
    """Fails if the text is silent on a contended host while native.nt_benefit
    judged speed (also where its series were too noisy to call, which the
    load may explain), or speaks where nothing timed was judged or the host
    was quiet."""
    text = io.StringIO()
    runner.print_table(report([NT_BENEFIT], conditions=CONTENDED), text)
    out = text.getvalue().splitlines()
    assert out[-1] == ("The host was contended while the checks ran (beside cc1, qemu-system-x86; other processes "
                       "used 183% of a CPU): the timings behind native.nt_benefit were taken on a loaded machine; "
                       "run again on a quiet one before reading them as the kernel's or the CPU's.")
    noisy = dict(NT_BENEFIT, status="skip", series=[{"status": "noisy"}])
    assert paths.contention_line(report([noisy], conditions=CONTENDED)) is not None
    assert paths.contention_line(report([NT_BENEFIT], conditions={"state": "quiet", "why": "x"})) is None
    assert paths.contention_line(report([skipped("kernel.memmap_latency", "no --rebind")],
                                        conditions=CONTENDED)) is None


def test_the_text_ends_with_the_paths_paragraph():
    """Fails if the closing paragraph is not printed after the tally."""
    text = io.StringIO()
    runner.print_table(report([NT_BENEFIT]), text)
    assert text.getvalue().splitlines()[-4:] == [
        "",
        "Of the two paths nttrace is for, this run observed neither:",
        f"  memmap init (memmap_init_zone_device): not observed: no pmem namespace ({NO_PMEM['detail']})",
        f"  demotion (migrate_pages for MR_DEMOTION): not observed: no lower memory tier ({ONE_TIER['detail']})"]
