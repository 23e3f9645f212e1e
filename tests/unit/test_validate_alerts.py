# SPDX-License-Identifier: Apache-2.0
"""validate's Prometheus side without a run: its alert rules under promtool,
its timer and service under systemd-analyze, and a textfile directory it
cannot use refused before any check (the textfile written by real runs:
tests/live/test_validate_textfile.py)."""
import subprocess
from pathlib import Path

import pytest

import nttrace
from conftest import one_line_error, run_nttrace
from nttrace.bench.daemon_process import NTTRACE

DATA = Path(nttrace.__file__).parent / "data"


def test_an_unusable_directory_is_exit_2_before_any_check(tmp_path):
    proc = run_nttrace("validate", "--quick", "--textfile-dir", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "not a directory" in one_line_error(proc)
    f = tmp_path / "file"
    f.write_text("x")
    proc = run_nttrace("validate", "--quick", "--textfile-dir", str(f))
    assert proc.returncode == 2 and "not a directory" in one_line_error(proc)
    proc = run_nttrace("validate", "--baseline", str(f), "--current", str(f), "--textfile-dir", str(tmp_path))
    assert proc.returncode == 2 and "--current" in one_line_error(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def _alert_test(tmp_path: Path, series: list[tuple[str, str]], checks: list[tuple[str, str, list]]) -> None:
    lines = [f"rule_files:\n  - {DATA / 'nttrace-alerts.yml'}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
             "    input_series:\n"]
    for s, values in series:
        lines.append(f"      - series: '{s}'\n        values: '{values}'\n")
    lines.append("    alert_rule_test:\n")
    for at, name, alerts in checks:
        lines.append(f"      - eval_time: {at}\n        alertname: {name}\n        exp_alerts:"
                     + (" []\n" if not alerts else "\n"))
        for labels, annotations in alerts:
            lines.append("          - exp_labels:\n" + "".join(f"              {k}: '{v}'\n" for k, v in labels.items())
                         + "            exp_annotations:\n"
                         + "".join(f"              {k}: \"{v}\"\n" for k, v in annotations.items()))
    f = tmp_path / "alerts-test.yml"
    f.write_text("".join(lines))
    proc = subprocess.run(["promtool", "test", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr + f.read_text()
    assert "SUCCESS" in proc.stdout


@pytest.mark.needs("promtool")
def test_alert_fires_on_a_failing_check_and_not_on_a_passing_one(tmp_path):
    inst = {"instance": "h1:9100", "job": "node"}
    lab = ",".join(f'{k}="{v}"' for k, v in inst.items())
    _alert_test(tmp_path, [
        (f'nttrace_validate_check_status{{{lab},check="kernel.nt_support",status="fail"}}', "1x30"),
        (f'nttrace_validate_check_status{{{lab},check="env.core",status="pass"}}', "1x30"),
        (f'nttrace_validate_last_run_timestamp_seconds{{{lab}}}', "0+60x30"),
    ], [
        ("5m", "NttraceValidationCheckFailed", [(
            {**inst, "severity": "warning", "check": "kernel.nt_support", "status": "fail"},
            {"summary": "nttrace check kernel.nt_support failed on h1:9100",
             "description": "The last `nttrace validate` run on this host reported kernel.nt_support as failed; "
                            "run `nttrace validate --check kernel.nt_support` there for the reason."})]),
        ("5m", "NttraceValidationStale", []),
    ])


@pytest.mark.needs("promtool")
def test_alert_fires_on_a_stale_run_and_on_a_run_that_could_not_run(tmp_path):
    inst = {"instance": "h2:9100", "job": "node"}
    lab = ",".join(f'{k}="{v}"' for k, v in inst.items())
    _alert_test(tmp_path, [
        # one run at t=0, never again: the file (and so the series) stays, with the old timestamp
        (f'nttrace_validate_last_run_timestamp_seconds{{{lab}}}', "0x300"),
        (f'nttrace_validate_last_run_exit_code{{{lab}}}', "3x300"),
    ], [
        ("2h", "NttraceValidationStale", []),
        ("3h5m", "NttraceValidationStale", [(
            {**inst, "severity": "warning"},
            {"summary": "nttrace validate has not run on h2:9100 for over 3 hours"})]),
        ("10m", "NttraceValidationRunFailed", [(
            {**inst, "severity": "warning"},
            {"summary": "nttrace validate could not run on h2:9100 (exit 3)"})]),
    ])


@pytest.mark.needs("systemd-analyze")
def test_the_timer_and_its_service_pass_systemd_analyze_verify(tmp_path):
    for name in ("nttrace-validate.service", "nttrace-validate.timer"):
        (tmp_path / name).write_text((DATA / name).read_text().replace("/usr/bin/nttrace", NTTRACE))
    proc = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "nttrace-validate.timer"),
                           str(tmp_path / "nttrace-validate.service")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    service = (DATA / "nttrace-validate.service").read_text()
    assert "--textfile-dir /var/lib/prometheus/node-exporter" in service and "Type=oneshot" in service
