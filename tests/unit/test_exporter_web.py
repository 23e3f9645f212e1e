# SPDX-License-Identifier: Apache-2.0
"""The exporter toolkit's web configuration in the daemon: its schema and
errors, bcrypt users, TLS and the endpoint's limits (a real Prometheus
scraping through a rotation: tests/live/test_exporter_web_prometheus.py)."""
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest

import pki
from conftest import one_line_error, run_nttrace
from nttrace.bench.daemon_process import free_port
from nttrace.exporters import web_auth, web_config, web_tls
from nttrace.exporters.web_config_collector import WebConfigCollector
from nttrace.exporters.web_config_reload import WebConfigSource
from web_client import basic, bhash, fetch as _fetch

pytestmark = pytest.mark.needs("openssl")   # the test certificates (pki.py)


# -- the file and its errors ------------------------------------------------------
@pytest.mark.parametrize("prefix", ["$2y$", "$2a$", "$2b$"])
def test_bcrypt_hashes_of_each_prefix_check_their_password(tmp_path, prefix):
    f = tmp_path / "web.yml"
    f.write_text(f"basic_auth_users:\n  alice: '{bhash('right', prefix)}'\n")
    users = web_config.load(str(f)).users
    assert users.authorized(basic("alice", "right")["Authorization"])
    assert not users.authorized(basic("alice", "wrong")["Authorization"])
    assert not users.authorized(basic("bob", "right")["Authorization"])


def test_a_password_over_72_bytes_is_refused_not_truncated(tmp_path):
    f = tmp_path / "web.yml"
    f.write_text(f"basic_auth_users:\n  alice: '{bhash('a' * 72)}'\n")
    users = web_config.load(str(f)).users
    assert users.check("alice", "a" * 72)
    # bcrypt itself reads 72 bytes and would take this as the same password
    assert bcrypt.checkpw(b"a" * 73, users.hashes["alice"].encode())
    assert not users.check("alice", "a" * 73)
    assert not users.check("alice", "é" * 37)     # 74 bytes in UTF-8


@pytest.mark.parametrize("costs", [(10,), (5, 9)])
def test_an_unknown_user_runs_the_same_compare_at_the_users_cost(tmp_path, monkeypatch, costs):
    """Held by structure, not by timing: a wrong password for a known user
    and any password for an unknown one go through the one compare
    (_Users._compare), each with a bcrypt hash whose cost is a configured
    user's (the highest, never above it), and both reach bcrypt.checkpw."""
    f = tmp_path / "web.yml"
    f.write_text("basic_auth_users:\n" + "".join(f"  u{i}: '{bhash('right', cost=c)}'\n" for i, c in enumerate(costs)))
    users = web_config.load(str(f)).users
    compared, checked = [], []
    real_compare, real_checkpw = web_auth.Users._compare, bcrypt.checkpw
    monkeypatch.setattr(web_auth.Users, "_compare",
                        staticmethod(lambda pw, target: compared.append(target) or real_compare(pw, target)))
    monkeypatch.setattr(bcrypt, "checkpw", lambda pw, h: checked.append(h) or real_checkpw(pw, h))
    top = len(costs) - 1
    assert not users.check(f"u{top}", "wrong") and not users.check("mallory", "wrong")
    assert len(compared) == 2 and len(checked) == 2
    cost = [int(web_auth.BCRYPT_HASH.match(h).group(1)) for h in compared]
    assert cost == [max(costs), max(costs)], cost
    assert compared[1] == users.dummy and compared[1] not in users.hashes.values()


def test_compares_are_cached_by_a_keyed_digest_and_bounded(tmp_path, monkeypatch):
    f = tmp_path / "web.yml"
    f.write_text(f"basic_auth_users:\n  alice: '{bhash('right')}'\n")
    users = web_config.load(str(f)).users
    calls = []
    real = web_auth.Users._compare
    monkeypatch.setattr(web_auth.Users, "_compare", staticmethod(lambda pw, t: calls.append(t) or real(pw, t)))
    assert users.check("alice", "right") and users.check("alice", "right")
    assert not users.check("alice", "wrong") and not users.check("alice", "wrong")
    assert len(calls) == 2                                    # one compare each, then the cache
    stored = b"".join(users._ok) + b"".join(users._failed)
    assert b"right" not in stored and b"wrong" not in stored and len(next(iter(users._ok))) == 32
    for i in range(web_auth.FAILED_CACHE_SIZE + 50):       # a flood of wrong passwords ...
        users._failed[users._key("alice", "x", str(i).encode())] = None
        while len(users._failed) > web_auth.FAILED_CACHE_SIZE:
            users._failed.popitem(last=False)
    assert users.check("alice", "right") and len(calls) == 2  # ... does not evict the success


def test_a_compare_with_every_bcrypt_slot_taken_is_refused_at_once(tmp_path):
    f = tmp_path / "web.yml"
    f.write_text(f"basic_auth_users:\n  alice: '{bhash('right')}'\n")
    users = web_config.load(str(f)).users
    assert users.check("alice", "right")                      # cached
    taken = 0
    while web_auth._bcrypt_slots.acquire(blocking=False):
        taken += 1
    try:
        assert taken == web_auth.BCRYPT_SLOTS
        with pytest.raises(web_auth.AuthBusy):
            users.check("alice", "wrong")
        with pytest.raises(web_auth.AuthBusy):
            users.check("mallory", "any")
        assert users.check("alice", "right")                  # a cached scrape needs no slot
    finally:
        for _ in range(taken):
            web_auth._bcrypt_slots.release()


@pytest.mark.parametrize("text,message", [
    ("frobnicate: 1\n", "unknown key frobnicate"),
    ("tls_server_config:\n  cert_fil: x\n", "unknown key tls_server_config.cert_fil"),
    ("basic_auth_users:\n  alice: 5f4dcc3b5aa765d61d8327deb882cf99\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users:\n  alice: $1$abc$def\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
     "tls_server_config.cert_file: /nonexistent.crt: not found"),
    ("tls_server_config:\n  cert_file: x.crt\n", "tls_server_config.key_file is missing"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS9\n", "tls_server_config.min_version"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequestClientCert\n",
     "RequestClientCert is not supported"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
     "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_FAKE]\n", "unknown suite 'TLS_FAKE'"),
    ("http_server_config:\n  headers:\n    Server: x\n", "headers.Server: this header can not be configured"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "headers.X-Frame-Options"),
    ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
    ("tls_server_config: [\n", "YAML syntax error"),
    ("rate_limit:\n  interval: soon\n  burst: 1\n", "rate_limit.interval"),
    ("rate_limit:\n  interval: 5\n  burst: 1\n", "rate_limit.interval 5 has no unit"),
    ("basic_auth_users:\n  alice: '$2b$04$abcdefghijklmnopqrstuuWc0FS0d1I0ftn.3rqWMNpGddSLcC9yy'\n"
     "  alice: '$2b$04$abcdefghijklmnopqrstuuWc0FS0d1I0ftn.3rqWMNpGddSLcC9yy'\n", "duplicate key 'alice'"),
    ("basic_auth_users:\n  alice: '$2b$31$abcdefghijklmnopqrstuuWc0FS0d1I0ftn.3rqWMNpGddSLcC9yy'\n",
     "hash for alice has cost 31, above the limit 14"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_RSA_WITH_AES_128_GCM_SHA256]\n",
     "unknown suite 'TLS_RSA_WITH_AES_128_GCM_SHA256'"),
])
def test_bad_web_config_is_one_line_exit_2_naming_file_and_key(tmp_path, text, message):
    web = tmp_path / "web.yml"
    web.write_text(text)
    cfg = tmp_path / "n.toml"
    cfg.write_text('probes = ["migrate"]\n')
    proc = run_nttrace("daemon", "--check-config", str(cfg), "--web.config.file", str(web))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line_error(proc)
    assert str(web) in line and message in line, line


def test_an_unreadable_certificate_is_exit_2_at_start(tmp_path):
    ca = pki.ca(tmp_path, "ca")
    srv = pki.signed(tmp_path, "srv", ca, server=True)
    srv.key.write_text("not a key\n")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {srv.cert}\n  key_file: {srv.key}\n")
    cfg = tmp_path / "n.toml"
    cfg.write_text(f'listen = "127.0.0.1:{free_port()}"\nprobes = ["migrate"]\nweb_config_file = "{web}"\n')
    proc = run_nttrace("daemon", "--config", str(cfg), timeout=60)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert str(web) in line and "tls_server_config.cert_file" in line


def test_relative_paths_are_taken_beside_the_web_config(tmp_path):
    ca = pki.ca(tmp_path, "ca")
    pki.signed(tmp_path, "srv", ca, server=True)
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: srv.crt\n  key_file: srv.key\n")
    loaded = web_config.load(str(web))
    assert loaded.tls is not None and str(tmp_path / "srv.crt") in loaded.files


def test_a_broken_change_keeps_the_last_good_config_and_says_so(tmp_path):
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{bhash('one')}'\n")
    source = WebConfigSource(str(web))
    assert source.current().users.check("alice", "one")
    web.write_text("basic_auth_users:\n  alice: nope\n")
    assert source.current().users.check("alice", "one")       # the last good one
    assert not source.status.ok and source.status.failures == 1
    metrics = {m.name: m.samples[0].value for m in WebConfigCollector(lambda: source).collect()}
    assert metrics["nttrace_web_config_last_reload_successful"] == 0
    assert metrics["nttrace_web_config_reload_failures"] == 1
    web.write_text(f"basic_auth_users:\n  alice: '{bhash('two')}'\n")
    assert source.current().users.check("alice", "two") and not source.current().users.check("alice", "one")
    assert source.status.ok


def test_an_empty_file_does_not_switch_tls_off(tmp_path):
    """A half-written (empty) file must not turn the endpoint into plain HTTP."""
    ca = pki.ca(tmp_path, "ca")
    srv = pki.signed(tmp_path, "srv", ca, server=True)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {srv.cert}\n  key_file: {srv.key}\n")
    source = WebConfigSource(str(web))
    web.write_text("")
    assert source.current().tls is not None and not source.status.ok


def test_tls_is_switched_off_and_on_by_a_change(tmp_path):
    ca = pki.ca(tmp_path, "ca")
    srv = pki.signed(tmp_path, "srv", ca, server=True)
    web = tmp_path / "web.yml"
    on = f"tls_server_config:\n  cert_file: {srv.cert}\n  key_file: {srv.key}\n"
    web.write_text(on)
    source = WebConfigSource(str(web))
    web.write_text(f"basic_auth_users:\n  alice: '{bhash('one')}'\n")
    assert source.current().tls is None and source.status.ok
    web.write_text(on)
    assert source.current().tls is not None and source.status.ok


def test_after_a_failed_change_the_files_it_names_are_watched(tmp_path):
    """The new file names a key that is not there yet: when the key lands,
    with the web config itself untouched, the change loads."""
    ca = pki.ca(tmp_path, "ca")
    srv = pki.signed(tmp_path, "srv", ca, server=True)
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{bhash('one')}'\n")
    source = WebConfigSource(str(web))
    key = tmp_path / "later.key"
    web.write_text(f"tls_server_config:\n  cert_file: {srv.cert}\n  key_file: {key}\n")
    assert source.current().tls is None and not source.status.ok
    assert str(key) in source.watched
    key.write_bytes(Path(srv.key).read_bytes())
    assert source.current().tls is not None and source.status.ok


def _curves_config(tmp_path, curves: str) -> tuple[Path, object]:
    """A web config serving TLS with `curve_preferences: [curves]`, and its CA."""
    ca = pki.ca(tmp_path, "ca")
    srv = pki.signed(tmp_path, "srv", ca, server=True)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {srv.cert}\n  key_file: {srv.key}\n"
                   f"  curve_preferences: [{curves}]\n")
    return web, ca


def test_one_listed_curve_is_used(tmp_path):
    """curve_preferences [CurveP384]: a client offering P-384 completes a
    handshake, a client offering only P-256 does not."""
    web, ca = _curves_config(tmp_path, "CurveP384")
    ctx = web_config.load(str(web)).tls
    assert _handshake(ctx, ca, "P-384")
    assert not _handshake(ctx, ca, "P-256")


def test_a_curve_list_is_used_whole_or_refused_in_one_line(tmp_path):
    """curve_preferences [CurveP384, CurveP521]: where Python's ssl sets a
    group list (SSLContext.set_groups), a client offering either completes a
    handshake and one offering only P-256 does not; where it sets one curve,
    the list is refused in one line, exit 2, never cut to its first."""
    web, ca = _curves_config(tmp_path, "CurveP384, CurveP521")
    if hasattr(ssl.SSLContext, "set_groups"):
        ctx = web_config.load(str(web)).tls
        assert _handshake(ctx, ca, "P-384") and _handshake(ctx, ca, "P-521")
        assert not _handshake(ctx, ca, "P-256")
        return
    with pytest.raises(web_config.UsageError) as err:
        web_config.load(str(web))
    line = str(err.value)
    assert line == (f"{web}: tls_server_config.curve_preferences: this Python's ssl sets one curve, "
                    "not a list of 2 (it has no SSLContext.set_groups); list one curve"), line
    cfg = tmp_path / "n.toml"
    cfg.write_text('probes = ["migrate"]\n')
    proc = run_nttrace("daemon", "--check-config", str(cfg), "--web.config.file", str(web))
    assert proc.returncode == 2 and one_line_error(proc) == f"nttrace: {line}"


def _handshake(ctx, ca, curve: str) -> bool:
    """Whether a client offering only `curve` completes a handshake with ctx."""
    import socket
    import threading
    a, b = socket.socketpair()
    client = ssl.create_default_context(cafile=str(ca.cert))
    client.check_hostname = False
    assert web_tls.set_groups(client, [curve]) is None     # the client offers this one group
    done = []
    t = threading.Thread(target=lambda: done.append(_server_side(ctx, b)))
    t.start()
    try:
        with client.wrap_socket(a) as c:
            c.do_handshake()
        ok = True
    except (ssl.SSLError, OSError):
        ok = False
    t.join(10)
    b.close()
    return ok and done == [True]


def _server_side(ctx, sock) -> bool:
    try:
        with ctx.wrap_socket(sock, server_side=True) as s:
            s.do_handshake()
        return True
    except (ssl.SSLError, OSError):
        return False


def test_the_shipped_example_web_config_loads_once_its_files_exist(tmp_path):
    import nttrace
    text = (Path(nttrace.__file__).parent / "data" / "web-config.yml").read_text()
    ca = pki.ca(tmp_path, "ca")
    srv = pki.signed(tmp_path, "srv", ca, server=True)
    text = (text.replace("/etc/nttrace/tls.crt", str(srv.cert)).replace("/etc/nttrace/tls.key", str(srv.key))
            .replace("/etc/nttrace/clients-ca.crt", str(ca.cert)))
    web = tmp_path / "web.yml"
    web.write_text(text)
    loaded = web_config.load(str(web))
    assert loaded.tls is not None and loaded.tls.verify_mode == ssl.CERT_REQUIRED
    assert loaded.tls.minimum_version == ssl.TLSVersion.TLSv1_2
    assert loaded.headers
    assert not loaded.users.hashes          # no credential shipped: the users' lines are a commented template
    import bcrypt
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(10)).decode()
    web.write_text(text.replace("# basic_auth_users:", "basic_auth_users:")
                   .replace("#   prometheus: <bcrypt hash>", f"  prometheus: {hashed}"))
    assert list(web_config.load(str(web)).users.hashes) == ["prometheus"]


def test_client_allowed_sans_admit_only_those_certificates(tmp_path):
    """The endpoint itself (no probes needed): RequireAndVerifyClientCert
    with client_allowed_sans serves a client whose certificate names an
    allowed SAN and drops one signed by the same CA that names another."""
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from nttrace.exporters.http_server import MetricsServer
    server_ca, client_ca = pki.ca(tmp_path, "sca"), pki.ca(tmp_path, "cca")
    srv = pki.signed(tmp_path, "srv", server_ca, server=True)
    good = pki.signed(tmp_path, "good", client_ca, server=False, san="URI:spiffe://nttrace/prometheus")
    other = pki.signed(tmp_path, "other", client_ca, server=False, san="URI:spiffe://elsewhere/scraper")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {srv.cert}\n  key_file: {srv.key}\n"
                   f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {client_ca.cert}\n"
                   "  client_allowed_sans: ['spiffe://nttrace/prometheus']\n")
    port = free_port()
    cfg = SimpleNamespace(host="127.0.0.1", port=port, listen=f"127.0.0.1:{port}")
    server = MetricsServer(cfg, CollectorRegistry(), lambda: {"status": "ok"}, WebConfigSource(str(web)))
    server.start()
    try:
        def ctx(client):
            c = ssl.create_default_context(cafile=str(server_ca.cert))
            c.load_cert_chain(str(client.cert), str(client.key))
            return c
        assert _fetch(port, ctx(good), {}) == 200
        assert str(_fetch(port, ctx(other), {})).startswith("refused")
    finally:
        server.stop()


def test_a_file_replaced_while_it_is_read_is_read_again(tmp_path, monkeypatch):
    """The race CI found: a rotation renames its files one by one, and a
    connection reads the web config between two renames. The file replaced
    after the read must be read on the next connection, not recorded as seen
    (the users stayed the old ones: every scrape with the new password 401)."""
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{bhash('one')}'\n")
    source = WebConfigSource(str(web))
    assert source.current().users.check("prometheus", "one")
    real_parse = web_config._parse_yaml

    def parse_then_rotate(text):
        parsed = real_parse(text)                # generation 2 was read ...
        tmp = tmp_path / "web.yml.new"           # ... and generation 3 lands while it is being loaded
        tmp.write_text(f"basic_auth_users:\n  prometheus: '{bhash('three')}'\n")
        tmp.rename(web)
        monkeypatch.setattr(web_config, "_parse_yaml", real_parse)
        return parsed
    tmp = tmp_path / "web.yml.new"
    tmp.write_text(f"basic_auth_users:\n  prometheus: '{bhash('two')}'\n")
    tmp.rename(web)
    monkeypatch.setattr(web_config, "_parse_yaml", parse_then_rotate)
    assert source.current().users.check("prometheus", "three")   # the read that raced was read again
    assert not source.current().users.check("prometheus", "two")


def _plain_server(web: WebConfigSource):
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from nttrace.exporters.http_server import MetricsServer
    port = free_port()
    cfg = SimpleNamespace(host="127.0.0.1", port=port, listen=f"127.0.0.1:{port}")
    server = MetricsServer(cfg, CollectorRegistry(), lambda: {"status": "ok"}, web)
    server.start()
    return server, port


def _get(port: int, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def _server_metrics(server) -> dict:
    from nttrace.exporters.http_server import ServerCollector
    return {m.name: m.samples[0].value for m in ServerCollector(server).collect()}


def test_connections_over_the_limit_are_closed_at_accept_and_counted(monkeypatch):
    import socket
    from nttrace.exporters import http_server
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 3)
    server, port = _plain_server(WebConfigSource())
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        t0 = time.monotonic()
        while _server_metrics(server)["nttrace_web_connections_in_flight"] < 3 and time.monotonic() - t0 < 30:
            time.sleep(0.01)
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(30)
        try:
            closed = extra.recv(1) == b""                   # closed at accept, nothing read from it
        except ConnectionResetError:
            closed = True
        assert closed
        extra.close()
        m = _server_metrics(server)
        assert m["nttrace_web_connections_rejected"] == 1 and m["nttrace_web_connections_in_flight"] == 3
        for s in idle:
            s.close()
        t0 = time.monotonic()
        while _server_metrics(server)["nttrace_web_connections_in_flight"] and time.monotonic() - t0 < 30:
            time.sleep(0.01)
        assert _get(port, {})[0] == 200
    finally:
        for s in idle:
            s.close()
        server.stop()


def test_with_every_bcrypt_slot_taken_a_wrong_password_is_429_and_a_cached_scrape_200(tmp_path):
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{bhash('right')}'\n")
    server, port = _plain_server(WebConfigSource(str(web)))
    taken = 0
    try:
        assert _get(port, basic("alice", "right"))[0] == 200           # the compare, then cached
        while web_auth._bcrypt_slots.acquire(blocking=False):
            taken += 1
        code, headers = _get(port, basic("alice", "wrong"))
        assert code == 429 and headers.get("Retry-After") == "1"
        assert _get(port, basic("alice", "right"))[0] == 200           # no slot needed
        assert _server_metrics(server)["nttrace_web_auth_busy"] >= 1
    finally:
        for _ in range(taken):
            web_auth._bcrypt_slots.release()
        server.stop()
