"""nttrace validate end to end on this host, and --baseline."""
import json

import pytest

from conftest import one_line_error, run_nttrace

CAP_KEYS = {"btf", "tracefs", "tracepoint:migrate:mm_migrate_pages_start", "tracepoint:migrate:mm_migrate_pages",
            "tracepoint:page_ref:page_ref_set", "kprobe", "fentry", "uprobe", "bcc", "ksym:memmap_init_zone_device",
            "ksym:migrate_pages", "ksym:folio_mc_copy", "ksym:folio_mc_copy_nt", "ksym:copy_mc_page_nt",
            "perf:software", "perf:hardware", "perf:uncore", "numa:tiers", "pmem", "cap:bpf", "cap:perfmon",
            "cap:sys_admin"}


@pytest.fixture(scope="module")
def quick_report():
    proc = run_nttrace("validate", "--quick", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.needs("root", "btf", "tracepoint", "bcc", "uprobe", "perf-software")
def test_quick_json_shape_and_host_facts(quick_report):
    r = quick_report
    assert {"version", "capabilities", "kernel", "checks", "summary"} <= set(r)
    assert CAP_KEYS <= set(r["capabilities"])
    for cap in r["capabilities"].values():
        assert set(cap) == {"available", "detail"} and isinstance(cap["available"], bool) and cap["detail"]
    for key in ("btf", "tracefs", "tracepoint:migrate:mm_migrate_pages_start", "uprobe", "bcc", "perf:software"):
        assert r["capabilities"][key]["available"], key
    assert r["kernel"]["migrate_mode"]["MIGRATE_SYNC"] == 2
    assert r["kernel"]["migrate_reason"]["MR_COMPACTION"] == 0
    assert r["kernel"]["nt_revision"] == "none"
    for c in r["checks"]:
        assert set(c) == {"id", "status", "summary", "evidence"}
        assert c["status"] in ("pass", "fail", "warn", "skip")
    assert r["summary"] == {s: sum(c["status"] == s for c in r["checks"]) for s in ("pass", "fail", "warn", "skip")}


@pytest.mark.needs("root", "btf", "tracepoint", "bcc", "uprobe", "perf-software")
def test_core_checks_pass_and_missing_capabilities_skip_with_reasons(quick_report):
    by_id = {c["id"]: c for c in quick_report["checks"]}
    for cid in ("native.correctness", "native.nt_benefit", "kernel.nt_support", "kernel.migrate_observed",
                "perf.software", "env.core", "env.kernel_metadata"):
        assert by_id[cid]["status"] in ("pass", "warn"), by_id[cid]
    assert by_id["native.correctness"]["status"] == "pass"
    assert by_id["kernel.migrate_observed"]["status"] == "pass"
    caps = quick_report["capabilities"]
    for cid, cap in (("env.kprobe", "kprobe"), ("env.fentry", "fentry"), ("env.perf_hardware", "perf:hardware"),
                     ("env.pmem", "pmem"), ("perf.llc", "perf:hardware")):
        if not caps[cap]["available"]:
            assert by_id[cid]["status"] == "skip"
            assert by_id[cid]["summary"]  # the reason


@pytest.mark.needs("root", "btf", "tracepoint", "bcc")
def test_state_changing_checks_skip_without_their_flag():
    proc = run_nttrace("validate", "--json", "--check", "kernel.demotion_nt", "--check", "kernel.memmap_latency")
    assert proc.returncode == 0, proc.stderr
    by_id = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert by_id["kernel.memmap_latency"]["status"] == "skip" and "--rebind" in by_id["kernel.memmap_latency"]["summary"]
    assert by_id["kernel.demotion_nt"]["status"] == "skip"


def _report(checks, version="0.1.0"):
    return {"version": version, "capabilities": {}, "kernel": {}, "summary": {},
            "checks": [{"id": i, "status": "pass", "summary": "", "evidence": e} for i, e in checks.items()]}


def test_baseline_prints_per_check_deltas(tmp_path):
    base, new = tmp_path / "base.json", tmp_path / "patched.json"
    base.write_text(json.dumps(_report({"kernel.memmap_latency": {"rebind_avg_ms": 244.28, "first_bind_ms": 1456},
                                        "native.nt_benefit": {"memmap_reduction_pct": 60.0}})))
    new.write_text(json.dumps(_report({"kernel.memmap_latency": {"rebind_avg_ms": 96.79, "first_bind_ms": 1272}})))
    proc = run_nttrace("validate", "--baseline", str(base), "--current", str(new))
    assert proc.returncode == 0, proc.stderr
    assert "rebind_avg_ms" in proc.stdout and "-60.4%" in proc.stdout
    assert "first_bind_ms" in proc.stdout and "-12.6%" in proc.stdout
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
