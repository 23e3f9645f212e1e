# SPDX-License-Identifier: Apache-2.0
"""`nttrace validate --textfile-dir`: the run's results for node_exporter's
textfile collector, read by a real node_exporter and scraped by a real
Prometheus (the alert rules on them, the timer and service units and bad
directories: tests/unit/test_validate_alerts.py)."""
import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import nttrace
import promserver
from conftest import run_nttrace
from unprivileged import DROP, staged_nttrace
from nttrace.validate import textfile
from nttrace.bench.daemon_process import free_port

DATA = Path(nttrace.__file__).parent / "data"
LIVE = ("root", "btf", "tracefs")


def families(path: Path) -> dict:
    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One `validate --quick --json --textfile-dir` run: its JSON report and its file."""
    d = tmp_path_factory.mktemp("textfile")
    t0 = time.time()
    proc = run_nttrace("validate", "--quick", "--json", "--textfile-dir", str(d), timeout=600)
    t1 = time.time()
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout), d / textfile.FILENAME, (t0, t1), proc.returncode, d


@pytest.mark.needs(*LIVE)
def test_one_series_per_check_with_the_reports_status(quick_run):
    report, path, _span, _rc, _d = quick_run
    fams = families(path)
    samples = fams["nttrace_validate_check_status"].samples
    assert {(s.labels["check"], s.labels["status"]) for s in samples} == \
        {(c["id"], c["status"]) for c in report["checks"]}
    assert len(samples) == len(report["checks"]) and all(s.value == 1 for s in samples)
    tally = {s.labels["status"]: s.value for s in fams["nttrace_validate_checks"].samples}
    assert tally == {k: float(report["summary"][k]) for k in textfile.STATUSES}


@pytest.mark.needs(*LIVE)
def test_one_series_per_patch_series_verdict_with_its_status(quick_run):
    """native.nt_benefit's verdicts, one per patch series, as the report has them."""
    report, path, _span, _rc, _d = quick_run
    want = {(c["id"], v["series"], v["status"]) for c in report["checks"] for v in c.get("series", ())}
    assert {s for _c, s, _st in want} == {"zone_device_template", "nt_demotion"}
    samples = families(path)["nttrace_validate_series_status"].samples
    assert {(s.labels["check"], s.labels["series"], s.labels["status"]) for s in samples} == want
    assert len(samples) == len(want) and all(s.value == 1 for s in samples)


@pytest.mark.needs(*LIVE)
def test_run_time_duration_exit_code_and_kernel_facts(quick_run):
    report, path, (t0, t1), rc, _d = quick_run
    fams = families(path)
    ts = fams["nttrace_validate_last_run_timestamp_seconds"].samples[0].value
    dur = fams["nttrace_validate_last_run_duration_seconds"].samples[0].value
    assert t0 <= ts <= t1 and 0 < dur <= t1 - t0
    assert fams["nttrace_validate_last_run_exit_code"].samples[0].value == rc
    info = fams["nttrace_validate_info"].samples[0].labels
    assert info["kernel_release"] == os.uname().release == report["kernel_release"]
    assert info["nt_revision"] == report["kernel"]["nt_revision"]
    assert info["machine"] == report["machine"]["kind"] and info["version"] == nttrace.__version__
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


@pytest.mark.needs(*LIVE)
def test_the_file_is_replaced_whole_never_seen_half_written(quick_run, tmp_path):
    """A reader polling the file while runs replace it always parses a
    complete file (its last line is there), and no temporary file is left."""
    _report, first, _span, _rc, _d = quick_run
    d = tmp_path
    path = d / textfile.FILENAME
    path.write_bytes(first.read_bytes())
    seen, bad, stop = [0], [], threading.Event()

    def reader():
        while not stop.is_set():
            text = path.read_text()
            fams = {f.name for f in text_string_to_metric_families(text)}
            if "nttrace_validate_last_run_exit_code" not in fams or "nttrace_validate_info" not in fams:
                bad.append(text)
            seen[0] += 1
    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(2):
            proc = run_nttrace("validate", "--check", "env.*", "--textfile-dir", str(d), timeout=300)
            assert proc.returncode in (0, 1), proc.stderr
    finally:
        stop.set()
        t.join()
    assert seen[0] > 10 and not bad
    assert sorted(p.name for p in d.iterdir()) == [textfile.FILENAME]


@pytest.mark.needs("root", "setpriv")
def test_a_run_without_privilege_writes_its_exit_code_and_no_checks():
    import shutil
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="nttrace-textfile-"))   # pytest's own tmp is root-only
    try:
        d.chmod(0o777)
        with staged_nttrace() as staged:     # run from where nobody can reach it, whatever the clone's path
            proc = subprocess.run([*DROP, *staged.argv, "validate", "--quick", "--textfile-dir", str(d)],
                                  env=staged.env, cwd=staged.cwd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 3, proc.stderr
        fams = families(d / textfile.FILENAME)
        assert fams["nttrace_validate_last_run_exit_code"].samples[0].value == 3
        assert "nttrace_validate_check_status" not in fams
    finally:
        shutil.rmtree(d)


def _wait_prom(prom_port: int, query: str, timeout: float = 60) -> list:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                result = json.loads(r.read())["data"]["result"]
            if result:
                return result
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never answered {query}")


@pytest.mark.needs(*LIVE, "node-exporter", "prometheus")
def test_node_exporter_carries_the_results_to_prometheus(quick_run, tmp_path):
    report, _path, _span, _rc, d = quick_run
    ne_port = free_port()
    ne = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{ne_port}",
                           "--collector.disable-defaults", "--collector.textfile",
                           f"--collector.textfile.directory={d}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prom, prom_port = promserver.start(tmp_path, promserver.job("node", ne_port))
    try:
        rows = _wait_prom(prom_port, 'nttrace_validate_check_status{job="node"}')
        got = {(r["metric"]["check"], r["metric"]["status"]) for r in rows}
        assert got == {(c["id"], c["status"]) for c in report["checks"]}
        rows = _wait_prom(prom_port, 'nttrace_validate_series_status{job="node"}')
        assert {(r["metric"]["check"], r["metric"]["series"], r["metric"]["status"]) for r in rows} == \
            {(c["id"], v["series"], v["status"]) for c in report["checks"] for v in c.get("series", ())}
        info = _wait_prom(prom_port, "nttrace_validate_info")[0]["metric"]
        assert info["kernel_release"] == report["kernel_release"]
        # node_exporter read the file without complaint
        err = _wait_prom(prom_port, "node_textfile_scrape_error")
        assert float(err[0]["value"][1]) == 0
    finally:
        for p in (prom, ne):
            p.terminate()
            p.wait(timeout=10)
