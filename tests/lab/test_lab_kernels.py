# SPDX-License-Identifier: Apache-2.0
"""nttrace on the kernels it exists for: Debian's 7.2 source built three
ways by lab/kernel_build.py (base; nt-v3 = zone-device template v8 +
NT demotion RFC v3; nt-v2 = v8 + RFC v2), each booted once in the lab guest.
The tests read what nttrace saw there, against the kernel's own accounts
(pgdemote_*, the memmap pr_debug line, the live BTF and tracepoint formats).

Select with -m lab; NTTRACE_LAB_VARIANTS=base,nt-v3 narrows the variants.
Results (and the base vs nt-v3 A/B table) are kept in $NTTRACE_LAB_KEEP
(default kernels-last-run in the lab cache, $NTTRACE_LAB_CACHE)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import kernel_build, lab_checks
from nttrace.probes.migrate import compaction_rows
from lab import lab as labmod
from lab.ab import lab_exercises, save_reports
from conftest import SELECTED, has, lab_kernel, lab_variants, prebuild_running
from lab_boots import POOL, Boot
from lab.lab_checks import checks
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.migrate_fn import MigrateFunctionProbe
from nttrace.probes.page_ref import PageRefProbe
from nttrace.probes.reclaim import ReclaimProbe

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu", "kernel-build", "seeds")]

MEMMAP = ["memmap_fsdax", "memmap_devdax"]
SCENARIOS = {
    "base": ["capabilities", "compaction", "memcg_reclaim", "demotion", "daemon", "kernel_facts_tests"],
    "nt-v3": ["capabilities", "compaction", "memcg_reclaim", *MEMMAP, "trace_start", "demotion", "trace_stop",
              "overhead_demotion", "daemon", "kernel_facts_tests"],
    "nt-v2": ["capabilities", "compaction", "memcg_reclaim", "demotion", "daemon", "kernel_facts_tests"],
}
# What each variant was built to carry (kernel_build.VARIANTS): the NT mode
# the series adds, and the revision nttrace must decode from the live BTF.
NT = {"base": (None, "none"), "nt-v3": ("MIGRATE_ASYNC_NONTEMPORAL", "v3"),
      "nt-v2": ("MIGRATE_ASYNC_NON_TEMPORAL_STORES", "v2")}
VARIANTS = lab_variants()
KEEP = Path(os.environ.get("NTTRACE_LAB_KEEP", labmod.CACHE / "kernels-last-run"))
BOOT_TIMEOUT = float(os.environ.get("NTTRACE_LAB_TIMEOUT", "2400"))


def _boot(variant: str, kernel):
    """(kernel, LabRun), or (the error that stopped the build or the boot, None)."""
    if isinstance(kernel, Exception):
        return kernel, None
    try:
        results = KEEP / variant
        shutil.rmtree(results, ignore_errors=True)
        return kernel, labmod.run(results, timeout=BOOT_TIMEOUT, kernel=kernel, scenarios=SCENARIOS[variant])
    except labmod.LabError as exc:
        return exc, None


def _wanted(variant: str) -> bool:
    """Whether a test of this session boots the variant (nothing boots ahead for nothing)."""
    here = [n for n in SELECTED if "test_lab_kernels.py" in n]
    return variant in VARIANTS and any(variant in n or variant.replace("-", "_") in n for n in here) \
        and has("kernel-build", "seeds")


# Each variant boots once, in tests/lab_boots.py's pool, the longest first:
# each guest's time in the cached CI run of 2026-12-02 (its console's last
# uptime stamp, seconds; nt-v3 runs the most scenarios).
SECONDS = {"base": 497, "nt-v3": 799, "nt-v2": 374}
for _variant in VARIANTS:
    POOL.register(Boot(_variant, lambda v=_variant: _wanted(v), lambda kernel, v=_variant: _boot(v, kernel),
                       prepare=lambda v=_variant: lab_kernel(v), seconds=SECONDS.get(_variant, 0)))

# The A/B's boots: base and nt-v3 once each, the A/B's scenarios on the A/B's
# guest CPU (lab.MEASURE_CPU: one vCPU, a guest clock that counts
# instructions), each alone: after every kernel build of the session has
# ended and every other guest has finished (lab_boots' exclusive boots), so
# that the CI's A/B is never taken beside a compiler or another guest; the
# reports record the host's conditions, and test_base_against_nt_v3_... holds
# them quiet. The memmap tests read these boots.
AB_SCENARIOS = [*MEMMAP, "demotion", *lab_exercises()]
AB = [v for v in ("base", "nt-v3") if v in VARIANTS]


def _wanted_ab() -> bool:
    here = [n for n in SELECTED if "test_lab_kernels.py" in n]
    names = ("memmap", "page_ref", "as_a_user")
    return bool(AB) and any(t in n for n in here for t in names) and has("kernel-build", "seeds")


def _build_after_every_build(variant: str):
    """The variant's kernel, once no kernel build of this session is running."""
    kernel = lab_kernel(variant)
    while prebuild_running():
        time.sleep(5)
    return kernel


def _boot_ab(variant: str, kernel):
    if isinstance(kernel, Exception):
        return kernel, None
    try:
        results = KEEP / f"ab-{variant}"
        shutil.rmtree(results, ignore_errors=True)
        return kernel, labmod.run(results, timeout=BOOT_TIMEOUT, kernel=kernel, scenarios=AB_SCENARIOS,
                                  cpu=labmod.MEASURE_CPU)
    except labmod.LabError as exc:
        return exc, None


for _variant in AB:
    POOL.register(Boot(f"ab-{_variant}", _wanted_ab, lambda kernel, v=_variant: _boot_ab(v, kernel),
                       prepare=lambda v=_variant: _build_after_every_build(v), seconds=150, exclusive=True))


def booted(variant: str, ab: bool = False):
    if variant not in VARIANTS:
        pytest.skip(f"NTTRACE_LAB_VARIANTS leaves out {variant}")
    kernel, lab = POOL.result(f"ab-{variant}" if ab else variant)
    if lab is None:
        raise kernel  # the build or boot error, with its step and log
    return kernel, lab


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_kernel_built_with_the_series_as_posted(variant):
    kernel, _lab = booted(variant)
    info = kernel.info
    assert info["release"].startswith("7.2.")
    expected = {"base": 0, "nt-v3": 12, "nt-v2": 12}[variant]
    assert len(info["series"]) == expected, info["series"]
    if variant == "nt-v2":
        assert any("v2 2/3 + v2-2of3-compaction.diff, v2-2of3-migrate.diff" in s for s in info["series"])
    config = (kernel.directory / "config").read_text()
    assert "CONFIG_DEBUG_PAGE_REF=y" in config and "CONFIG_DEBUG_INFO_BTF=y" in config


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_nt_revision_from_the_live_btf_agrees_with_the_tracepoint(variant):
    kernel, lab = booted(variant)
    rep = lab.json("capabilities")
    assert rep["_rc"] == 0, rep.get("_stderr")
    k = rep["kernel"]
    nt_name, revision = NT[variant]
    assert k["source"] == "btf" and k["nt_revision"] == revision
    assert k["crosscheck"] == {"done": True, "disagreements": []}
    assert rep["kernel_release"] == kernel.release
    if nt_name:
        assert nt_name in k["migrate_mode"]
    assert rep["machine"]["kind"] == "emulated", rep["machine"]   # QEMU TCG, detected in the guest


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_compaction_rows_decode_by_this_kernels_enum(variant):
    _kernel, lab = booted(variant)
    rep = lab.json("compaction")
    enum = rep["kernel"]["migrate_mode"]
    c = checks(rep)["probe.migrate"]
    assert c["status"] == "pass", c
    rows = compaction_rows(c["evidence"]["rows"])
    assert rows
    for r in rows:
        assert enum[r["mode"]] == r["mode_value"] and not r["nt"], r
    sync = [r for r in rows if r["mode"] == "MIGRATE_SYNC"]
    assert sync, rows   # the trigger writes compact_memory: MIGRATE_SYNC
    # RFC v2 inserted its mode at 1, so MIGRATE_SYNC moved from 2 to 3
    assert sync[0]["mode_value"] == (3 if variant == "nt-v2" else 2)


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_demotion_mode_pages_and_copy_routine(variant):
    _kernel, lab = booted(variant)
    r = lab.json("demotion")
    assert r["nodes_online"] in ("0-1", "0,1"), r
    c = checks(r["report"])["kernel.demotion_nt"]
    ev = c["evidence"]
    assert ev["probe_succeeded_pages"] == ev["pgdemote_delta"] > 0, ev
    # demotion ran inside memory.reclaim's episodes: the reclaim probe holds every page
    memcg = next(row for row in ev[ReclaimProbe.name]["rows"] if row["kind"] == "memcg")
    assert ev["demoted_inside_reclaim"] == memcg["demoted"] == ev["pgdemote_delta"], ev[ReclaimProbe.name]
    assert memcg["episodes"] >= 1 and memcg["reclaimed"] >= memcg["demoted"], memcg
    rows = ev["rows"]
    nt_name, _revision = NT[variant]
    modes = {row["mode"] for row in rows}
    copy = {row["routine"]: row for row in ev[CopyProbe.name]["rows"]}
    failed = sum(row["failed"] for row in rows)
    if nt_name is None:
        assert c["status"] == "warn" and "cached" in c["summary"], c
        assert modes == {"MIGRATE_ASYNC"} and not any(row["nt"] for row in rows)
        assert "folio_mc_copy_nt" not in copy
        assert copy["folio_mc_copy"]["calls"] > 0
        return
    assert c["status"] == "pass", c
    assert modes == {nt_name} and all(row["nt"] for row in rows), rows
    enum = r["report"]["kernel"]["migrate_mode"]
    assert enum[nt_name] == (1 if variant == "nt-v2" else 3)
    # every demoted page was copied by the NT routine (a copy whose migration
    # then failed is copied too: at most the failed pages more)
    nt_pages = copy["folio_mc_copy_nt"]["bytes"] // 4096
    assert ev["pgdemote_delta"] <= nt_pages <= ev["pgdemote_delta"] + failed, (copy, ev["pgdemote_delta"], failed)
    if variant == "nt-v3":
        # copy_mc_page_nt is assembly: BTF describes it (from its C
        # declaration) but ftrace has no site in it, and it refuses kprobes.
        # It is accounted for either way, and it does not cost the other
        # routines their fentry programs.
        assert "copy_mc_page_nt" in copy or "copy_mc_page_nt" in ev[CopyProbe.name].get("untraceable", {}), ev[CopyProbe.name]
        assert ev[CopyProbe.name]["via"] == "fentry" and "fentry_fallback" not in ev[CopyProbe.name], ev[CopyProbe.name]
        assert copy["folio_mc_copy_nt"]["via"] == "fentry"


def test_bench_overhead_on_demotion_on_nt_v3():
    """`nttrace bench overhead --work demotion` and its A/A run in the guest
    (a short run: the figure in BENCHMARKS.md comes from a longer one): every
    timed memory.reclaim demoted pages, the probes validate --demote uses
    were attached in the probe rounds and none in the A/A run, and nothing
    stayed attached. The ratio is reported, not held to a bound."""
    _kernel, lab = booted("nt-v3")
    r = lab.json("overhead_demotion")
    for run in (r["probes"], r["aa"]):
        assert run["_rc"] == 0 and run["work"] == "demotion", run.get("_stderr")
        assert run["warmup"] == 1 and all(len(row[c]["runs"]) >= 1 for row in run["rounds"] for c in ("probes", "none"))
        assert run["rounds"] and [row["order"] for row in run["rounds"]][:2] == [["probes", "none"], ["none", "probes"]]
        for row in run["rounds"]:
            for cond in ("probes", "none"):
                assert row[cond]["pages"] > 0 and row[cond]["seconds"] > 0, row
            assert row["ratio"] == pytest.approx(row["probes"]["pages_per_s"] / row["none"]["pages_per_s"])
        assert run["median_ratio"] > 0
    assert r["probes"]["attached"] == {MigrateProbe.name: "tracepoint", ReclaimProbe.name: "tracepoint", CopyProbe.name: "fentry"}
    assert r["aa"]["aa"] and r["aa"]["probes"] == [] and r["aa"]["attached"] == {}
    assert r["programs_left"] == []


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_reclaim_probe_against_memory_reclaim(variant):
    _kernel, lab = booted(variant)
    lab_checks.reclaim_matches_the_cgroups_count(lab.json("memcg_reclaim"))


def test_every_probe_in_one_trace_on_nt_v3():
    """One `nttrace trace` with every probe through a rebind, a compaction, a
    memcg reclaim and the demotion scenario: each probe attached and saw its
    path (the snapshot the golden tests replay was recorded this way)."""
    _kernel, lab = booted("nt-v3")
    started, stopped = lab.json("trace_start"), lab.json("trace_stop")
    assert stopped["rc"] == 0, stopped
    probes = stopped["trace"]["probes"]
    assert set(probes) == set(started["probes"]) and all(p["status"] == "attached" for p in probes.values()), probes
    rows = {name: p.get("rows", []) for name, p in probes.items()}
    reasons = {(r["reason"], r["nt"]) for r in rows[MigrateProbe.name]}
    assert ("MR_COMPACTION", False) in reasons and ("MR_DEMOTION", True) in reasons, reasons
    assert {r["reason"] for r in rows[MigrateFunctionProbe.name]} >= {"MR_COMPACTION", "MR_DEMOTION"}
    assert sum(r["calls"] for r in rows[MemmapProbe.name]) >= 1 and rows[PageRefProbe.name][0]["events"] > 0
    assert any(r["routine"] == "folio_mc_copy_nt" and r["calls"] > 0 for r in rows[CopyProbe.name]), rows[CopyProbe.name]
    memcg = next(r for r in rows[ReclaimProbe.name] if r["kind"] == "memcg")
    demoted = sum(r["succeeded"] for r in rows[MigrateProbe.name] if r["reason"] == "MR_DEMOTION")
    assert memcg["episodes"] >= 2 and sum(r["demoted"] for r in rows[ReclaimProbe.name]) == demoted > 0, (rows[ReclaimProbe.name], demoted)


def _tick_ms(kernel) -> int:
    return lab_checks.tick_ms_of_config((kernel.directory / "config").read_text())


@pytest.mark.parametrize("variant,mode", [(v, m) for v in ("base", "nt-v3") for m in MEMMAP])
def test_memmap_rebinds_against_the_kernels_own_line(variant, mode):
    kernel, lab = booted(variant, ab=True)
    pgmap, shift = ("FS_DAX", 0) if mode == "memmap_fsdax" else ("GENERIC", 9)
    ev = lab_checks.memmap_matches_the_kernels_line(lab.json(mode), pgmap, shift, runs=30,
                                                    tick_ms=_tick_ms(kernel))
    spread = ev["rebind_ms"]
    assert spread["n"] == 30 and spread["min"] <= spread["median"] <= spread["max"]


@pytest.mark.parametrize("variant,mode", [(v, m) for v in ("base", "nt-v3") for m in MEMMAP])
def test_page_ref_set_tells_which_memmap_path_ran(variant, mode):
    kernel, lab = booted(variant, ab=True)
    r = lab.json(mode)
    assert "page_ref_report" in r, "page_ref_set is missing on a CONFIG_DEBUG_PAGE_REF kernel"
    pgmap, shift = ("FS_DAX", 0) if mode == "memmap_fsdax" else ("GENERIC", 9)
    runs = len(checks(r["page_ref_report"])["kernel.memmap_latency"]["evidence"]["calls"]) - 1
    tick = _tick_ms(kernel)
    ev = lab_checks.memmap_matches_the_kernels_line(r, pgmap, shift, runs=runs, report_key="page_ref_report",
                                                    lines_key="page_ref_kernel_debug_lines", tick_ms=tick)
    per_page = [call["page_ref_sets_per_page"] for call in ev["calls"]]
    if variant == "base":
        # the per-page path sets every descriptor's refcount: one or more events a page
        assert all(p >= 1 for p in per_page), per_page
        assert ev["template_path"] == ["slow"]
        # half a million events a bind: nttrace says what that costs
        assert ev["warnings"] and "page_ref_set fired" in ev["warnings"][0]
    else:
        # v8 9/9: the template path runs whatever the tracepoint; only its seed pages fire
        assert all(p <= 1 / 64 for p in per_page), per_page
        assert ev["template_path"] == ["template"]
        assert "warnings" not in ev


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_daemon_scraped_from_the_host(variant):
    _kernel, lab = booted(variant)
    assert lab.scrape.get("status") == 200, lab.scrape
    body = lab.scrape["body"]
    nt_name, revision = NT[variant]
    assert 'nttrace_kernel_info{' in body and f'nt_revision="{revision}"' in body
    demotion = [line for line in body.splitlines()
                if line.startswith("nttrace_migrate_calls_total{") and 'reason="MR_DEMOTION"' in line]
    if nt_name:
        assert any(f'mode="{nt_name}"' in line and 'nt="true"' in line for line in demotion), demotion
    else:
        assert demotion and all('nt="false"' in line for line in demotion), demotion
    d = lab.json("daemon")
    # the probes' compile says nothing about the kernel's headers (compile_flags)
    assert "warning:" not in d["log"], d["log"]
    assert d["host_scraped"] and d["rc"] == 0 and d["stop_s"] < 2.0, d


@pytest.mark.parametrize("variant", ["base", "nt-v3", "nt-v2"])
def test_the_suites_kernel_fact_tests_pass_inside_the_guest(variant):
    _kernel, lab = booted(variant)
    r = lab.json("kernel_facts_tests")
    assert r["rc"] == 0 and " passed" in r["stdout"] and "failed" not in r["stdout"], r


@pytest.mark.parametrize("variant", ["base", "nt-v3"])
def test_each_probe_the_lab_exercises_agrees_with_the_kernels_count(variant):
    """Every probe whose exercise the lab runs (Exercise.lab), exercised in
    the A/B boot: attached by fentry, its count equal to the kernel's own,
    each call recorded with its latency."""
    _kernel, lab = booted(variant, ab=True)
    assert lab_exercises(), "no probe declares a lab exercise"
    for scenario in lab_exercises():
        report = lab.json(scenario)["report"]
        name = scenario.removeprefix("exercise_")
        check = checks(report)[f"probe.{name}"]
        ev = check["evidence"]
        assert check["status"] == "pass", (scenario, check["summary"])
        assert ev["via"] == "fentry" and ev["agrees"] is True and ev["seen"] == ev["expected"] > 0, ev
        assert len(ev["calls"]) >= 2 and all(c["latency_ns"] > 0 for c in ev["calls"]), ev["calls"]


def test_base_against_nt_v3_as_a_user_gets_it():
    """The CI's own A/B, made as a user makes it, from boots taken alone on
    the host: one boot a side, so nothing is tested and nothing is marked;
    the host's conditions say it was quiet."""
    sides = {}
    for flag, variant in (("--baseline", "base"), ("--current", "nt-v3")):
        kernel, lab = booted(variant, ab=True)
        sides[flag] = save_reports(lab, AB_SCENARIOS, lab.results, kernel)
    args = [x for flag, paths in sides.items() for p in paths for x in (flag, str(p))]
    nttrace = Path(sys.executable).with_name("nttrace")
    md = subprocess.run([str(nttrace), "validate", *args, "--format", "markdown"], capture_output=True, text=True,
                        timeout=120)
    assert md.returncode == 0, md.stderr
    (KEEP / "ab-base-nt-v3.md").write_text(md.stdout)
    js = json.loads(subprocess.run([str(nttrace), "validate", *args, "--json"], capture_output=True, text=True,
                                   timeout=120).stdout)
    # taken alone: no compiler, no other guest; the guest clock counted instructions
    for flag, paths in sides.items():
        for p in paths:
            host = json.loads(p.read_text())["host_conditions"]
            assert host["state"] == "quiet", (flag, p.name, host["why"], host["beside"])
            assert "icount" in host["accelerator"]
    assert "warning" not in " ".join(js["baseline_header"]), js["baseline_header"]
    rows = {(r["check"], r["subject"], r["metric"]): r for r in js["baseline_comparison"]}
    for mode in ("fsdax", "devdax"):
        for metric in ("first_bind_ms", "rebind_ms.min", "rebind_ms.median", "rebind_ms.max"):
            row = rows[("kernel.memmap_latency", mode, metric)]
            assert row["baseline"] > 0 and row["current"] > 0 and row["delta_pct"] is not None, row
            assert row["stats"]["verdict"] == "boot-to-boot variation unknown: not tested", row["stats"]
            assert not row["stats"]["significant"] and row["stats"]["p"] is None
    assert rows[("kernel.demotion_nt", "", "mode")]["baseline"] == "MIGRATE_ASYNC"
    assert rows[("kernel.demotion_nt", "", "mode")]["current"] == "MIGRATE_ASYNC_NONTEMPORAL"
    assert rows[("kernel.demotion_nt", "", "nt_share_pct")]["baseline"] == 0
    assert rows[("kernel.demotion_nt", "", "nt_share_pct")]["current"] == 100
    assert "folio_mc_copy_nt" in rows[("kernel.demotion_nt", "", "copy_routines")]["current"]
    assert "measured on emulated (QEMU TCG)" in md.stdout and "relative changes" in md.stdout
    assert "| kernel.memmap_latency [fsdax] | rebinds (n=30), min ms | primary |" in md.stdout
    assert "not tested: 1 run a side" in md.stdout


def test_a_lab_kernel_that_panics_fails_within_the_bound_with_its_console(tmp_path):
    if "nt-v3" not in VARIANTS:
        pytest.skip("NTTRACE_LAB_VARIANTS leaves out nt-v3")
    kernel = kernel_build.build("nt-v3")
    t0 = time.monotonic()
    with pytest.raises(labmod.LabError, match="guest kernel panicked") as err:
        labmod.run(tmp_path / "panic", timeout=180, append="nttrace.inject=panic", kernel=kernel)
    assert time.monotonic() - t0 < 180
    assert "sysrq triggered crash" in str(err.value)          # the kernel's own words, from the console
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "panic")], capture_output=True).returncode == 1
