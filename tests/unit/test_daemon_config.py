# SPDX-License-Identifier: Apache-2.0
"""The daemon without a daemon: its config file checked and refused (one
line, exit 2), sd_notify against a socket nobody reads, and the shipped
unit and alert rules under systemd-analyze and promtool (the daemon for
real: tests/live/test_daemon.py)."""
import subprocess
import time
from pathlib import Path

import pytest

import nttrace
from conftest import one_line_error, run_nttrace
from nttrace.bench.daemon_process import NTTRACE

DATA = Path(nttrace.__file__).parent / "data"


# -- configuration ------------------------------------------------------------
def test_shipped_config_checks():
    proc = run_nttrace("daemon", "--check-config", str(DATA / "nttrace.toml"))
    assert proc.returncode == 0, proc.stderr
    assert "listen 127.0.0.1:9435" in proc.stdout


@pytest.mark.parametrize("text,message", [
    ('listen = "127.0.0.1:9435"\nprobes = ["migrate"\n', "TOML syntax error"),
    ('listen = "127.0.0.1:9435"\nfrobnicate = 1\n', "unknown key 'frobnicate'"),
    ('listen = "127.0.0.1:70000"\n', "not a port number"),
    ('listen = "127.0.0.1:http"\n', "not a port number"),
    ('listen = "9435"\n', "ADDR:PORT"),
    ('probes = ["migrate", "nope"]\n', "unknown probes nope"),
    ('log_level = "loud"\n', "log_level must be one of"),
    # one way to configure the web endpoint (the web config file): a table here is an unknown key like any other
    ('[tls]\ncert_file = "/etc/nttrace/tls.crt"\nkey_file = "/etc/nttrace/tls.key"\n', "unknown key 'tls'"),
    ('web_config_file = "w.yml"\n[basic_auth]\nusername = "p"\n', "unknown key 'basic_auth'"),
])
def test_bad_config_is_one_line_exit_2(tmp_path, text, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    for args in (["daemon", "--check-config", str(cfg)], ["daemon", "--config", str(cfg)]):
        proc = run_nttrace(*args)
        assert proc.returncode == 2
        assert message in one_line_error(proc)


def test_missing_config_file_is_exit_2(tmp_path):
    proc = run_nttrace("daemon", "--config", str(tmp_path / "absent.toml"))
    assert proc.returncode == 2 and "No such file" in one_line_error(proc)


def test_notify_never_hangs_on_a_socket_nobody_reads(tmp_path, monkeypatch):
    # A blocking send to a full notify socket would hang the daemon's main
    # loop, and with it SIGTERM.
    import socket
    from nttrace.daemon import sd_notify
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        qlen = int(Path("/proc/sys/net/unix/max_dgram_qlen").read_text())
        t0 = time.monotonic()
        sent = [sd_notify.notify("WATCHDOG=1") for _ in range(qlen + 5)]
        took = time.monotonic() - t0
        assert sent[0] and not sent[-1]          # the queue filled: dropped, not waited for
        assert took < 6 * sd_notify.SEND_TIMEOUT_S + 1, took
        assert s.recv(100) == b"WATCHDOG=1"


# -- shipped files ----------------------------------------------------------------
@pytest.mark.needs("promtool")
def test_alert_rules_pass_promtool():
    proc = subprocess.run(["promtool", "check", "rules", str(DATA / "nttrace-alerts.yml")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 8 rules found" in proc.stdout


@pytest.mark.needs("systemd-analyze")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    # The one change: ExecStart points at this installation's entry point,
    # since verify checks that the binary exists.
    unit = (DATA / "nttrace.service").read_text().replace("/usr/bin/nttrace", NTTRACE)
    path = tmp_path / "nttrace.service"
    path.write_text(unit)
    proc = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Type=notify" in unit and "NoNewPrivileges=yes" in unit and "ProtectSystem=strict" in unit
