# SPDX-License-Identifier: Apache-2.0
"""The exporter toolkit's good and bad web configs (its web/testdata/),
ported by what each one tests into tests/fixtures/web_config/, written for
nttrace, with nttrace's own additions. Each file has its expected outcome
here: a good one loads (and what it sets is checked), a bad one is one
UsageError line naming the file and the key, and `nttrace daemon
--check-config` says that line alone and exits 2. A `list-` case lists
more than one curve: good where Python's ssl sets a group list
(SSLContext.set_groups), bad where it sets one curve.

Where nttrace's outcome differs from the toolkit's, the case says why
(DIFFERS): Python's ssl cannot take a client certificate unverified; it
verifies one it is given only against a CA it was told; nttrace has no
HTTP/2 for a cipher list to break."""
import ssl
from pathlib import Path

import pytest

import pki
from conftest import REPO, one_line_error, run_nttrace
from nttrace.exporters import web_config

pytestmark = pytest.mark.needs("openssl")   # the certificates the cases name (pki.py)
CASES = REPO / "tests" / "fixtures" / "web_config"

GOOD = {   # file: (toolkit case it ports or None, what the loaded config must hold)
    "good-empty.yml": ("web_config_empty", lambda c: c.tls is None and not c.users.hashes and c.empty),
    "good-tls-client-cert-required.yml": ("tls_config_noAuth.requireandverifyclientcert",
                                          lambda c: c.tls.verify_mode == ssl.CERT_REQUIRED),
    # DIFFERS: the toolkit takes VerifyClientCertIfGiven without a CA (Go then verifies against the
    # system's roots); nttrace asks for client_ca_file (bad-required-client-cert-without-ca.yml's line)
    "good-tls-client-cert-optional.yml": ("web_config_noAuth.good", lambda c: c.tls.verify_mode == ssl.CERT_OPTIONAL),
    "good-tls-inline.yml": ("web_config_noAuth_tlsInline.good", lambda c: c.tls is not None),
    "good-tls-inline-key.yml": ("tls_config_noAuth.requireanyclientcertkeyinline", lambda c: c.tls is not None),
    "good-client-sans.yml": ("web_config_auth_client_san.good",
                             lambda c: c.allowed_sans == ("scraper-a.example", "scraper-b.example")),
    "good-headers.yml": ("web_config_headers.good", lambda c: len(c.headers) == 5 and c.headers["X-XSS-Protection"] == "0"),
    "good-all-ciphers.yml": ("web_config_noAuth_allCiphers.good", lambda c: c.tls is not None),
    "good-two-ciphers-tls12-only.yml": ("web_config_noAuth_someCiphers.good",
                                        lambda c: c.tls.maximum_version == ssl.TLSVersion.TLSv1_2
                                        and {x["name"] for x in c.tls.get_ciphers() if x["protocol"] == "TLSv1.2"}
                                        == {"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256"}),
    "good-client-cipher-order.yml": ("web_config_noAuth_someCiphers_noOrder.good",
                                     lambda c: not c.tls.options & ssl.OP_CIPHER_SERVER_PREFERENCE),
    "good-one-curve-tls13.yml": ("web_config_noAuth_someCurves.good",
                                 lambda c: c.tls.minimum_version == ssl.TLSVersion.TLSv1_3),
    "good-no-http2.yml": ("web_config_noAuth_noHTTP2.good", lambda c: c.tls is not None),
    # DIFFERS: bad in the toolkit (HTTP/2 over TLS 1.2 needs an AES-128-GCM suite); no HTTP/2 here
    "good-http2-with-a-tls12-suite.yml": ("web_config_noAuth_noHTTP2Cipher.bad", lambda c: c.tls is not None),
    "good-users-over-tls.yml": ("web_config_users.good", lambda c: set(c.users.hashes) == {"scraper", "operator"}
                                and c.users.dummy.startswith("$2b$05$")),
    "good-users-plain-http.yml": ("web_config_users_noTLS.good", lambda c: c.tls is None and "scraper" in c.users.hashes),
    "good-rate-limit-off.yml": ("web_config_rate_limiter_nonblocking", lambda c: c.rate_limit is None),
    "good-rate-limit.yml": ("web_config_rate_limiter_one_second",
                            lambda c: (c.rate_limit.interval_s, c.rate_limit.burst) == (2.0, 3)),
}

# file: the toolkit case it ports; more than one curve, which only a Python whose ssl sets a group list takes
CURVE_LISTS = {"list-all-curves.yml": "web_config_noAuth_allCurves.good"}

BAD = {    # file: (toolkit case it ports or None, what the one line says)
    "bad-junk.yml": ("web_config_junk", "the file must be a mapping"),
    "bad-misspelt-key.yml": ("web_config_junk_key", "unknown key tls_server_config.cert_flie"),
    "bad-client-ca-without-auth-type.yml": ("web_config_auth_clientCAs_invalid", "client_auth_type is NoClientCert"),
    "bad-client-ca-dev-null.yml": ("web_config_noAuth.bad", "client_auth_type is NoClientCert"),
    "bad-required-client-cert-without-ca.yml": ("web_config_auth_clientCAs_missing", "needs client_ca_file"),
    "bad-user-not-a-hash.yml": ("web_config_auth_user_list_invalid", "basic_auth_users.scraper: not a bcrypt hash"),
    "bad-empty-cert-path.yml": ("web_config_noAuth_certPath_empty", "tls_server_config.cert_file must be a non-empty"),
    "bad-empty-key-path.yml": ("web_config_noAuth_keyPath_empty", "tls_server_config.key_file must be a non-empty"),
    "bad-empty-paths-and-auth-type.yml": ("web_config_noAuth_certPath_keyPath_empty", "must be a non-empty string"),
    "bad-missing-cert-file.yml": ("web_config_noAuth_certPath_invalid", "not-there.crt: not found"),
    "bad-missing-key-file.yml": ("web_config_noAuth_keyPath_invalid", "not-there.key: not found"),
    "bad-missing-both-files.yml": ("web_config_noAuth_certPath_keyPath_invalid", "not-there.crt: not found"),
    "bad-empty-inline-cert.yml": ("web_config_noAuth_cert_empty", "tls_server_config.cert must be a non-empty"),
    "bad-empty-inline-key.yml": ("web_config_noAuth_key_empty", "tls_server_config.key must be a non-empty"),
    "bad-invented-cipher.yml": ("web_config_noAuth_inventedCiphers", "unknown suite 'TLS_ECDHE_ECDSA_WITH_AES_512"),
    "bad-invented-curve.yml": ("web_config_noAuth_inventedCurves", "curve_preferences: each must be one of"),
    "bad-tls-version.yml": ("web_config_noAuth_wrongTLSVersion", "tls_server_config.min_version 'TLS14'"),
    "bad-header-not-settable.yml": ("web_config_headers_extra_header", "headers.Server: this header can not be"),
    "bad-content-type-options.yml": ("web_config_headers_content_type_options", "headers.X-Content-Type-Options"),
    "bad-frame-options.yml": ("web_config_headers_frame_options", "headers.X-Frame-Options"),
    # DIFFERS: good in the toolkit; Python's ssl verifies every client certificate it asks for
    "bad-require-any-client-cert.yml": ("tls_config_noAuth.requireanyclientcert", "RequireAnyClientCert is not supported"),
    # nttrace's own
    "bad-rsa-key-exchange-cipher.yml": (None, "unknown suite 'TLS_RSA_WITH_AES_256_GCM_SHA384'"),
    "bad-duplicate-user.yml": (None, "duplicate key 'scraper' (first on line 2)"),
    "bad-cost-31.yml": (None, "basic_auth_users: hash for scraper has cost 31, above the limit 14"),
    "bad-rate-limit-bare-number.yml": (None, "rate_limit.interval 1 has no unit"),
}


def test_every_fixture_has_an_expected_outcome_and_every_outcome_a_fixture():
    assert {p.name for p in CASES.glob("*.yml")} == set(GOOD) | set(BAD) | set(CURVE_LISTS)
    assert all(n.startswith("good-") for n in GOOD) and all(n.startswith("bad-") for n in BAD)
    assert all(n.startswith("list-") for n in CURVE_LISTS)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    server_ca = pki.ca(d, "server-ca")
    server = pki.signed(d, "server", server_ca, server=True)
    clients = pki.ca(d, "clients")
    return server, clients


def placed(tmp_path: Path, name: str, certs) -> Path:
    """The case in a directory of its own beside the files it names."""
    server, clients = certs
    (tmp_path / "server.crt").write_bytes(server.cert.read_bytes())
    (tmp_path / "server.key").write_bytes(server.key.read_bytes())
    (tmp_path / "clients.crt").write_bytes(clients.cert.read_bytes())

    def indented(p: Path) -> str:
        return "\n".join("    " + line for line in p.read_text().strip().splitlines())
    text = (CASES / name).read_text().replace("@SERVER_CERT@", indented(server.cert)).replace(
        "@SERVER_KEY@", indented(server.key))
    (tmp_path / name).write_text(text)
    return tmp_path / name


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_good_case_loads(tmp_path, certs, name):
    loaded = web_config.load(str(placed(tmp_path, name, certs)))
    assert GOOD[name][1](loaded), name


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_case_is_one_line_naming_the_file_and_exit_2(tmp_path, certs, name):
    refused_in_one_line(tmp_path, placed(tmp_path, name, certs), BAD[name][1])


@pytest.mark.parametrize("name", sorted(CURVE_LISTS))
def test_a_curve_list_loads_where_ssl_sets_a_list_and_is_one_line_elsewhere(tmp_path, certs, name):
    path = placed(tmp_path, name, certs)
    if hasattr(ssl.SSLContext, "set_groups"):
        assert web_config.load(str(path)).tls is not None
    else:
        refused_in_one_line(tmp_path, path, "curve_preferences: this Python's ssl sets one curve, not a list of")


def refused_in_one_line(tmp_path: Path, path: Path, message: str) -> None:
    """Loading `path` is one UsageError line naming it and saying `message`,
    and `nttrace daemon --check-config` says that line alone, exit 2."""
    with pytest.raises(web_config.UsageError) as err:
        web_config.load(str(path))
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(path)) and message in line, line
    cfg = tmp_path / "n.toml"
    cfg.write_text('probes = ["migrate"]\n')
    proc = run_nttrace("daemon", "--check-config", str(cfg), "--web.config.file", str(path))
    assert proc.returncode == 2 and one_line_error(proc) == f"nttrace: {line}"
