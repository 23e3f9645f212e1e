# SPDX-License-Identifier: Apache-2.0
"""validate --baseline/--current through the installed command: the A/B of
two reports written here (per-check deltas, lab-shaped reports as markdown,
the mitigations note) and its bad inputs, one line and exit 2."""
import json

import pytest

from conftest import one_line_error, run_nttrace
from nttrace.probes.copy import CopyProbe


def _report(checks, version="0.1.0"):
    return {"version": version, "capabilities": {}, "kernel": {}, "summary": {},
            "checks": [{"id": i, "status": "pass", "summary": "", "evidence": e} for i, e in checks.items()]}


def test_baseline_prints_per_check_deltas(tmp_path):
    base, new = tmp_path / "base.json", tmp_path / "patched.json"
    base.write_text(json.dumps(_report({"kernel.memmap_latency": {"rebind_avg_ms": 244.28, "first_bind_ms": 1456}})))
    new.write_text(json.dumps(_report({"kernel.memmap_latency": {"rebind_avg_ms": 96.79, "first_bind_ms": 1272}})))
    proc = run_nttrace("validate", "--baseline", str(base), "--current", str(new))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # one run a side and no samples: the change, untested (no mark, no p), n 1/1
    assert any("rebinds, mean ms" in line and "-60.4%" in line and line.endswith("-  1/1") for line in lines), \
        proc.stdout
    assert any("first bind, ms" in line and "-12.6%" in line for line in lines), proc.stdout
    js = run_nttrace("validate", "--baseline", str(base), "--current", str(new), "--json")
    rows = json.loads(js.stdout)["baseline_comparison"]
    assert {r["metric"] for r in rows} == {"rebind_avg_ms", "first_bind_ms"}


@pytest.mark.parametrize("content,message", [
    ('{"version": "0.1.0", "checks": [', "not valid JSON"),
    ('{"hello": "world"}', "not an `nttrace validate --json` report"),
    ("", "not valid JSON"),
])
def test_bad_baseline_is_one_line_exit_2(tmp_path, content, message):
    f = tmp_path / "bad.json"
    f.write_text(content)
    proc = run_nttrace("validate", "--baseline", str(f), "--current", str(f))
    assert proc.returncode == 2
    assert message in one_line_error(proc)


def test_missing_baseline_file_is_exit_2(tmp_path):
    proc = run_nttrace("validate", "--baseline", str(tmp_path / "nope.json"), "--current", str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "No such file" in proc.stderr


def _lab_like(kind, nt, rebinds, modes, copy):
    """Reports shaped like the lab's: fsdax and devdax memmap runs, a demotion."""
    def spread(v):
        v = sorted(v)
        return {"n": len(v), "min": v[0], "median": v[len(v) // 2], "max": v[-1], "mean": sum(v) / len(v)}
    memmap = [{"id": "kernel.memmap_latency", "status": "pass", "summary": "",
               "evidence": {"mode": mode, "first_bind_ms": first, "first_bind_ns_per_page": first * 1e6 / 515584,
                            "rebind_ms": spread(r), "rebind_avg_ms": sum(r) / len(r),
                            "rebind_ns_per_page": spread([x * 1e6 / 515584 for x in r])}}
              for mode, first, r in rebinds]
    demotion = {"id": "kernel.demotion_nt", "status": "pass" if nt else "warn", "summary": "",
                "evidence": {"rows": [{"mode": m, "nt": m.startswith("MIGRATE_ASYNC_NON"), "succeeded": pages,
                                       "calls": 4, "reason": "MR_DEMOTION"} for m, pages in modes],
                             "probe_succeeded_pages": sum(p for _m, p in modes),
                             CopyProbe.name: {"rows": [{"routine": r, "calls": c, "bytes": c * 4096} for r, c in copy]}}}
    return {"version": "0.1.0", "capabilities": {}, "kernel": {"nt_revision": nt or "none"}, "summary": {},
            "kernel_release": "7.2.13", "machine": {"kind": kind, "hypervisor": "QEMU TCG" if kind == "emulated" else None},
            "checks": memmap + [demotion]}


def test_ab_of_a_base_and_a_patched_kernel_as_markdown(tmp_path):
    base = _lab_like("emulated", None, [("fsdax", 30.0, [20.0, 21.0, 24.0]), ("devdax", 40.0, [26.0, 27.0, 30.0])],
                     [("MIGRATE_ASYNC", 65000)], [("folio_mc_copy", 65000)])
    nt = _lab_like("emulated", "v3", [("fsdax", 25.0, [16.0, 17.0, 19.0]), ("devdax", 30.0, [15.0, 15.5, 18.0])],
                   [("MIGRATE_ASYNC_NONTEMPORAL", 64000), ("MIGRATE_ASYNC", 1000)], [("folio_mc_copy_nt", 64000)])
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "nt.json").write_text(json.dumps(nt))
    proc = run_nttrace("validate", "--baseline", str(tmp_path / "base.json"), "--current", str(tmp_path / "nt.json"),
                       "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "| check | figure | role | base | patched | change [interval] | verdict | p | detectable | n |" in out
    # per namespace mode, with min/median/max of the rebinds
    one = "not tested: 1 run a side"
    assert (f"| kernel.memmap_latency [fsdax] | rebinds (n=3), median ms | secondary | 21 | 17 | -19.0% | {one} "
            "| - | - | 1/1 |") in out, out
    assert (f"| kernel.memmap_latency [devdax] | rebinds (n=3), min ms | primary | 26 | 15 | -42.3% | {one} "
            "| - | - | 1/1 |") in out, out
    assert (f"| kernel.demotion_nt | NT share of demoted pages, % | descriptive | 0 | 98.46 | +98.5 pts | {one} "
            "| - | - | 1/1 |") in out, out
    assert ("| kernel.demotion_nt | copy routines (calls) |  | folio_mc_copy 65000 | folio_mc_copy_nt 64000 | changed "
            "|  | - | - | 1/1 |") in out
    # where it was measured, and what emulation means for the figures
    assert "measured on emulated (QEMU TCG)" in out and "relative changes" in out
    js = json.loads(run_nttrace("validate", "--baseline", str(tmp_path / "base.json"),
                                "--current", str(tmp_path / "nt.json"), "--json").stdout)
    rows = {(r["check"], r["subject"], r["metric"]): r for r in js["baseline_comparison"]}
    assert rows[("kernel.demotion_nt", "", "mode")]["current"] == "MIGRATE_ASYNC, MIGRATE_ASYNC_NONTEMPORAL"
    assert rows[("kernel.memmap_latency", "devdax", "rebind_ms.max")]["delta_pct"] == pytest.approx(-40.0)


def test_an_ab_says_when_its_sides_ran_with_different_mitigations():
    from nttrace.ab import text as ab_text

    def report(spectre_v2):
        return {"kernel_release": "7.2.13", "kernel": {"nt_revision": "v3"},
                "machine": {"kind": "emulated", "hypervisor": "QEMU TCG",
                            "mitigations": {"meltdown": "Not affected", "spectre_v2": spectre_v2}}}
    same = ab_text.header(report("Mitigation: Retpolines"), report("Mitigation: Retpolines"))
    assert not [line for line in same if "mitigations" in line]
    differ = ab_text.header(report("Mitigation: Retpolines"), report("Vulnerable"))
    assert ("note: the sides ran with different CPU mitigations (base | patched): "
            "spectre_v2: Mitigation: Retpolines | Vulnerable") in differ
    unrecorded = ab_text.header(report("Mitigation: Retpolines"), {"machine": {"kind": "emulated"}})
    assert not [line for line in unrecorded if "mitigations" in line]


def test_one_report_on_both_sides_is_refused(tmp_path):
    """The same report as --baseline and --current (a typo, a glob that
    caught one file twice) is no A/B: exit 2 naming both, no table. Fails
    where the two sides are compared (every change 0%, exit 0)."""
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_report({"kernel.memmap_latency": {"rebind_avg_ms": 244.28, "first_bind_ms": 1456}})))
    copy = tmp_path / "copy.json"
    copy.write_text(f.read_text())
    for cur in (f, copy):
        proc = run_nttrace("validate", "--baseline", str(f), "--current", str(cur))
        assert proc.returncode == 2 and proc.stdout == ""
        assert one_line_error(proc) == (f"nttrace: --baseline {f} and --current {cur} are the same report: an A/B "
                                        "compares different boots of the two kernels")


def test_a_boot_on_both_sides_is_refused(tmp_path):
    """Two reports with one boot_id are one run (one boot's checks), on
    whichever side they are: exit 2 naming the boot. Fails where a boot's
    two reports are compared as if base and patched."""
    boot = "0b4998a9-afbe-4f82-8a2f-7789af2e652f"
    base, cur = tmp_path / "fsdax.json", tmp_path / "devdax.json"
    base.write_text(json.dumps({**_report({"kernel.memmap_latency": {"rebind_avg_ms": 1.0}}), "boot_id": boot}))
    cur.write_text(json.dumps({**_report({"kernel.memmap_latency": {"rebind_avg_ms": 2.0}}), "boot_id": boot}))
    proc = run_nttrace("validate", "--baseline", str(base), "--current", str(cur))
    assert proc.returncode == 2 and f"are the same boot ({boot})" in one_line_error(proc)


def test_a_baseline_of_this_boot_is_refused_before_the_run(tmp_path):
    """`validate --baseline R.json` in the boot R.json was recorded in
    compares a run with its own boot (no reboot into the other kernel
    happened): refused before any check runs. Fails where the run goes on
    and compares."""
    from pathlib import Path
    here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    f = tmp_path / "base.json"
    f.write_text(json.dumps({**_report({"kernel.nt_support": {}}), "boot_id": here}))
    proc = run_nttrace("validate", "--baseline", str(f), "--check", "kernel.nt_support")
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line_error(proc) == (f"nttrace: --baseline {f} was recorded in this boot ({here}): an A/B compares "
                                    "different boots of the two kernels (boot the other one first)")
