# SPDX-License-Identifier: Apache-2.0
"""nttrace as a Debian package, proven in the lab: `make deb` on this
checkout, lintian, then in the Debian 12 guest with systemd as PID 1 (the
image's stock kernel): apt install with the network down, start, scrape,
`nttrace validate --quick` from /usr/bin, an upgrade to a rebuilt package
with a changed version, purge, the package on a kernel without BTF, and
last the package's own tests (debian/tests) run by autopkgtest
(lab/guest_deb.py). The guest boots in tests/lab_boots.py's pool; the two
packages are built before it takes a slot."""
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lab import guest_debs
from lab import lab as labmod
from conftest import SELECTED
from lab_boots import POOL, Boot

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu")]

TREE = Path(__file__).resolve().parents[2]
TIMEOUT = float(os.environ.get("NTTRACE_LAB_TIMEOUT", "2400"))
# The packages are built with the build-time unit room off: it runs in
# `make deb` elsewhere (tests/unit are the same tests), and twice here would
# add minutes before the guest can start.
BUILD_ENV = {**os.environ, "DEB_BUILD_OPTIONS": "nocheck"}


def _version(tree: Path, *spelling: str) -> str:
    """The version `make deb` gives TREE's HEAD (tools/version.sh): the
    package's, or with "--python" nttrace.__version__ in it."""
    return subprocess.run([str(tree / "tools" / "version.sh"), *spelling, str(tree)], capture_output=True,
                          text=True, check=True).stdout.strip()


def build_deb(tree: Path, out: Path) -> tuple[Path, float]:
    """`make deb` in TREE; the .deb and its source package copied to OUT."""
    t0 = time.monotonic()
    p = subprocess.run(["make", "-C", str(tree), "deb"], capture_output=True, text=True, timeout=1200, env=BUILD_ENV)
    seconds = time.monotonic() - t0
    if p.returncode != 0:
        raise labmod.LabError(f"make deb failed ({p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    version = _version(tree)
    out.mkdir(parents=True, exist_ok=True)
    for f in (f"nttrace_{version}.dsc", f"nttrace_{version}.tar.xz", f"nttrace_{version}_amd64.changes",
              f"nttrace_{version}_amd64.buildinfo", f"nttrace-dbgsym_{version}_amd64.deb"):
        shutil.copy2(tree / "dist" / f, out / f)
    (out / "python-version").write_text(_version(tree, "--python") + "\n")
    return Path(shutil.copy2(tree / "dist" / f"nttrace_{version}_amd64.deb", out)), seconds


def upgrade_tree(dest: Path) -> Path:
    """This checkout's history (a clone sharing its objects) with one more
    commit on its HEAD, made in the same second as HEAD: the next commit's
    build, which must upgrade HEAD's although their commit times are equal
    (tools/version.sh's count orders them, not the time or the hash)."""
    subprocess.run(["git", "clone", "-q", "--shared", str(TREE), str(dest)], check=True)
    head_time = subprocess.run(["git", "-C", str(TREE), "log", "-1", "--format=%ct"], capture_output=True,
                               text=True, check=True).stdout.strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "lab", "GIT_AUTHOR_EMAIL": "lab@localhost", "GIT_COMMITTER_NAME": "lab",
           "GIT_COMMITTER_EMAIL": "lab@localhost", "GIT_COMMITTER_DATE": f"@{head_time} +0000",
           "GIT_AUTHOR_DATE": f"@{head_time} +0000"}
    (dest / "README.md").write_text((dest / "README.md").read_text() + "\n")
    subprocess.run(["git", "-C", str(dest), "commit", "-q", "-am", "the next commit"], check=True, env=env)
    return dest


def _prepare():
    """Both packages, built before the guest takes a slot: (results, build seconds)."""
    results = POOL.tmp.mktemp("deb")
    _deb, seconds = build_deb(TREE, results / "deb" / "install")
    _deb, upgrade_seconds = build_deb(upgrade_tree(POOL.tmp.mktemp("deb-upgrade-tree")), results / "deb" / "upgrade")
    (results / "deb" / "autopkgtest-skips.json").write_text(json.dumps(guest_debs.LAB_SKIPS))
    # for benchmarks/deb_package.py: each `make deb`'s wall time
    (results / "deb" / "build.json").write_text(json.dumps({"make_deb_s": [seconds, upgrade_seconds]}))
    # the package read here too, not in the test: the pool's measuring boots wait for every boot's work,
    # never for a test's, and lintian (or anything else of ours) beside them is load in their timings
    _deb = next((results / "deb" / "install").glob("nttrace_*.deb"))
    inspect = {"contents": subprocess.run(["dpkg-deb", "-c", str(_deb)], capture_output=True, text=True,
                                          check=True).stdout,
               "version": subprocess.run(["dpkg-deb", "-f", str(_deb), "Version"], capture_output=True,
                                         text=True).stdout,
               "lintian": subprocess.run(["lintian", "--pedantic", "-I", "-E", "--tag-display-limit", "0",
                                          *map(str, (results / "deb" / "install").glob("*.changes"))],
                                         capture_output=True, text=True, timeout=600).stdout}
    (results / "deb" / "inspect.json").write_text(json.dumps(inspect))
    return results, seconds


def runner_debs(results: Path) -> None:
    """autopkgtest, for the guest to run the package's own tests with, and
    what it needs beyond the image: fetched into the lab's cache
    (lab/guest_debs.py; resolved against the image, so built first when
    missing, in the boot's slot as labmod.run would) and copied to
    RESULTS/deb/guest-debs for the guest to install. When they cannot be
    fetched (no mirror), the boot goes on without them and
    deb/guest-debs-error.txt says why: only the autopkgtest test fails."""
    runner = results / "deb" / "guest-debs"
    runner.mkdir(exist_ok=True)
    try:
        for deb in guest_debs.fetch(guest_debs.autopkgtest_packages(), labmod.image()):
            shutil.copy2(deb, runner)
    except (labmod.LabError, guest_debs.ControlError) as exc:
        (results / "deb" / "guest-debs-error.txt").write_text(f"{exc}\n")


def _run(prepared):
    results, seconds = prepared
    try:
        runner_debs(results)
        return results, seconds, labmod.run(results, systemd=True, append="nttrace.deb", timeout=TIMEOUT)
    except labmod.LabError as exc:
        return results, seconds, exc


# The guest's time in its run of 2026-12-06 (its console's last uptime stamp: 388 s).
POOL.register(Boot("deb", lambda: any("test_deb.py" in n for n in SELECTED), _run, prepare=_prepare, seconds=520))


@pytest.fixture(scope="module")
def deb_lab():
    try:
        results, seconds, run = POOL.result("deb")
    except labmod.LabError as exc:   # the build, in prepare
        pytest.fail(str(exc))
    if isinstance(run, labmod.LabError):
        raise run
    return results, seconds, run


def test_make_deb_builds_the_package_lintian_passes(deb_lab):
    results, seconds, _run = deb_lab
    deb = next((results / "deb" / "install").glob("nttrace_*.deb"))
    assert deb.name == f"nttrace_{_version(TREE)}_amd64.deb"
    inspect = json.loads((results / "deb" / "inspect.json").read_text())     # read in the boot's prepare
    files = inspect["contents"]
    for path in ("./usr/bin/nttrace", "./lib/systemd/system/nttrace.service",
                 "./lib/systemd/system/nttrace-validate.timer", "./lib/systemd/system/nttrace-validate.service",
                 "./lib/systemd/system/nttrace-ab@.service", "./lib/systemd/system/nttrace-ab-deadline@.timer",
                 "./lib/systemd/system/nttrace-ab-deadline@.service",
                 "./etc/nttrace/nttrace.toml", "./etc/nttrace/web-config.yml",
                 "./usr/share/nttrace/grafana-dashboard.json", "./usr/share/nttrace/nttrace-alerts.yml",
                 "./usr/lib/nttrace/nttrace/bpf/migrate.bpf.c",
                 "./usr/lib/nttrace/nttrace/exporters/http_server.py"):
        assert path in files, path
    assert re.search(r"\./usr/lib/nttrace/nttrace/_native\.cpython-\d+-x86_64-linux-gnu\.so", files)
    # the program's modules are private: no public module (Debian's Python policy)
    assert "-packages/" not in files, [f for f in files.splitlines() if "-packages/" in f][:5]
    # each file once: the units and configs at their system paths, not again as Python package data
    assert "nttrace/nttrace/data/" not in files
    assert inspect["version"].strip() == _version(TREE)   # tools/version.sh's, the snapshot entry's
    assert "./usr/share/man/man1/nttrace.1.gz" in files
    # lintian --pedantic on the binary and source packages: every tag it has is overridden, with its reason
    assert [line for line in inspect["lintian"].splitlines() if re.match(r"^[EWIPX]: ", line)] == [], \
        inspect["lintian"]


def test_the_next_commits_build_upgrades_this_ones(deb_lab):
    """The next commit, made in the same second as HEAD, builds a version
    dpkg sorts above HEAD's (the guest's apt installs it as an upgrade:
    test_upgrade_keeps_the_edited_config_and_restarts_the_daemon)."""
    results = deb_lab[0]
    first, second = (next((results / "deb" / side).glob("nttrace_*_amd64.deb")).name.split("_")[1]
                     for side in ("install", "upgrade"))
    assert subprocess.run(["dpkg", "--compare-versions", first, "lt", second]).returncode == 0, (first, second)


def test_apt_installs_it_offline_enabling_nothing(deb_lab):
    r = deb_lab[2].json("deb")
    assert r["pid1"] == "systemd"
    assert r["install"]["rc"] == 0, r["install"]["output"]
    assert r["status_after_install"] == f"install ok installed {_version(TREE)}"
    assert r["which_nttrace"] == "/usr/bin/nttrace"
    assert sorted(c for c in r["conffiles"] if c.startswith("/")) == ["/etc/nttrace/nttrace.toml",
                                                                       "/etc/nttrace/web-config.yml"]
    assert (r["enabled_after_install"], r["active_after_install"]) == ("disabled", "inactive")


def summary_results(summary: str) -> dict[str, str]:
    """autopkgtest's summary file: each test's name -> its result ("PASS",
    "PASS (superficial)", "FAIL non-zero exit status 1", "SKIP ...")."""
    results = {}
    for line in summary.splitlines():
        name, _, result = line.partition(" ")
        results[name] = result.strip()
    return results


def test_autopkgtest_runs_the_packages_own_tests_in_the_guest_and_they_pass(deb_lab):
    """autopkgtest, Debian's runner, with the guest as its own testbed (the
    null server, as root; lab/guest_deb.py's last step, after nttrace was
    purged) against the source package and the .deb the host built: it
    installs nttrace from the .deb itself, with its shipped configuration.
    Its summary has smoke PASS (superficial: the command answers, its config
    checks, its manual is there) and daemon PASS (needs-root,
    isolation-machine: validate --quick, the unit started with the shipped
    /etc/nttrace/nttrace.toml, all its probes, under the unit's sandbox;
    /metrics scraped; stopped; no BPF program left), and no other line:
    unit-room is left out with --skip-test, for the reason lab/guest_debs.py's
    LAB_SKIPS gives. Exit 0: no test failed and none was skipped (the null
    server run as root offers the root-on-testbed and isolation-machine the
    tests' restrictions ask for; exit 2 would be a skip, which none here has
    a reason for)."""
    results, _seconds, run = deb_lab
    error = results / "deb" / "guest-debs-error.txt"
    assert not error.exists(), f"the runner's packages were not fetched: {error.read_text()}"
    tests = run.json("deb-autopkgtest")
    assert tests["runner_install"]["rc"] == 0, tests["runner_install"]["output"]
    assert tests["runner_version"], tests
    at = tests["autopkgtest"]
    out = results / "deb" / "autopkgtest"
    summary = (out / "summary").read_text() if (out / "summary").exists() else ""
    assert [a for a in at["command"] if a.startswith("--skip-test=")] == \
        [f"--skip-test={name}" for name in sorted(guest_debs.LAB_SKIPS)], at["command"]
    assert summary_results(summary) == {"smoke": "PASS (superficial)", "daemon": "PASS"}, \
        (summary, at["rc"], at["bound_s"], at["stdout"], at["stderr"])
    assert at["rc"] == 0, (at["rc"], summary, at["stderr"])
    # what it tested: the source package and the .deb this checkout's `make deb` made, the .deb installed
    # by autopkgtest for its tests (a package beyond the testbed's at its start) on the shipped config
    version = _version(TREE)
    assert (out / "testpkg-version").read_text().split() == ["nttrace", version]
    assert tests["nttrace_before"] in ("", "unknown ok not-installed"), tests["nttrace_before"]
    for name in ("smoke", "daemon"):
        assert f"nttrace\t{version}" in (out / f"{name}-packages").read_text().splitlines(), name
    assert tests["nttrace_after"] == f"install ok installed {version}" and tests["config_as_shipped"], tests
    assert (out / "smoke-stdout").read_text().rstrip().endswith("smoke: ok")
    # the needs-root test ran to its last line: the probes it scraped up, validate --quick's report in its artifacts
    daemon = (out / "daemon-stdout").read_text()
    assert daemon.rstrip().endswith("daemon: ok") and "nttrace_probe_up{" in daemon, daemon
    assert "kernel.nt_support" in (out / "artifacts" / "validate.txt").read_text()


def test_under_debians_perf_event_paranoid_the_daemon_fails_once_in_one_line(deb_lab):
    r = deb_lab[2].json("deb")
    assert r["perf_event_paranoid"] == "3", "the guest no longer boots a Debian kernel"
    # the daemon's one line of why (its other lines are its start's routine ones)
    said = [e["message"] for e in r["paranoid_journal"] if "perf_event_paranoid is 3" in e["message"]]
    assert len(said) == 1 and said[0].startswith("nttrace: no probe could attach"), r["paranoid_journal"]
    assert r["paranoid_enable_rc"] != 0 and r["paranoid_start_s"] < 90, r   # not systemd's 120 s start timeout
    assert r["paranoid_state"] == "failed" and r["paranoid_restarts"] == 0, r["paranoid_status"]
    assert "status=3" in r["paranoid_status"], r["paranoid_status"]


def test_the_package_daemon_starts_and_is_scraped(deb_lab):
    _results, _seconds, run = deb_lab
    r = run.json("deb")
    assert r["start_rc"] == 0 and r["programs_running"], r
    assert r["guest_scrape_ok"] and r["host_scraped"], r
    assert run.scrape.get("status") == 200, run.scrape
    assert 'nttrace_probe_up{probe="migrate",via="tracepoint"} 1.0' in run.scrape["body"]


def test_validate_quick_runs_from_usr_bin(deb_lab):
    v = deb_lab[2].json("deb")["validate"]
    # 0: every check passed, 1: a check failed (Debian 6.1 has no NT path): both are a run that ran
    assert v["rc"] in (0, 1), v
    assert "kernel.nt_support" in v["stdout"], v


def test_the_validate_unit_runs_the_checks_its_sandbox_allows_as_root_does(deb_lab):
    """nttrace-validate.service (bounded capabilities, read-only system but
    its ReadWritePaths, the system-call filter) gives every quick check the
    status the same run gets as unconfined root, and writes the textfile
    into the directory the package's tmpfiles.d entry made."""
    r = deb_lab[2].json("deb")
    unit = r["validate_unit"]
    assert unit["dir_before"], "no /var/lib/prometheus/node-exporter: tmpfiles.d made none"
    assert unit["start_rc"] == 0 and unit["Result"] == "success" and unit["ExecMainStatus"] in ("0", "1"), unit
    statuses = r["validate_statuses"]
    assert statuses["unconfined"] and "probe.migrate" in statuses["unconfined"], statuses
    # A timing verdict too noisy to call in either run (native.nt_benefit on a busy host) is a measured
    # outcome, not the sandbox's doing: only those checks may differ between the two runs.
    noisy = set(re.findall(r"^NOISY\s+(\S+)", unit["journal"] + "\n" + r["validate"]["stdout"], re.M))
    differ = {c for c in set(statuses["unit"]) | set(statuses["unconfined"])
              if statuses["unit"].get(c) != statuses["unconfined"].get(c)}
    assert statuses["unit"].keys() == statuses["unconfined"].keys() and differ <= noisy, \
        (differ - noisy, statuses, unit["journal"])


def test_upgrade_keeps_the_edited_config_and_restarts_the_daemon(deb_lab):
    r = deb_lab[2].json("deb")
    assert r["upgrade"]["rc"] == 0, r["upgrade"]["output"]
    second = next((deb_lab[0] / "deb" / "upgrade").glob("nttrace_*_amd64.deb")).name.split("_")[1]
    assert r["status_after_upgrade"] == f"install ok installed {second}"
    assert r["config_after_upgrade"] == 'listen = "0.0.0.0:9435"\nprobes = ["migrate"]\nperf = []\n'
    assert r["config_dpkg_files"] == [], r["config_dpkg_files"]
    assert r["active_after_upgrade"] == "active" and r["pid_after_upgrade"] not in ("0", r["main_pid"]), r
    assert r["version_running"] == "nttrace " + (deb_lab[0] / "deb" / "upgrade" / "python-version").read_text().strip()
    assert r["scrape_after_upgrade_ok"]


def test_purge_leaves_no_unit_no_file_no_program(deb_lab):
    r = deb_lab[2].json("deb")
    assert r["purge"]["rc"] == 0, r["purge"]["output"]
    assert r["status_after_purge"] in ("", "unknown ok not-installed"), r["status_after_purge"]
    assert r["left_after_purge"] == [] and r["unit_after_purge"] == "" and r["enable_links_after_purge"] == [], r
    assert r["programs_after_purge"] == []


def test_on_a_kernel_without_btf_the_start_fails_visibly_and_the_package_stays_removable(deb_lab):
    r = deb_lab[2].json("deb")
    assert '"available": false' in r["nobtf_nttrace_btf"], r["nobtf_nttrace_btf"]   # nttrace sees it too
    assert r["nobtf_install"]["rc"] == 0 and r["nobtf_status_after_install"].startswith("install ok installed")
    assert r["nobtf_enable"]["rc"] != 0 and r["nobtf_assert"] == "no", r
    assert "AssertPathExists=/sys/kernel/btf/vmlinux was not met" in r["nobtf_status"], r["nobtf_status"]
    assert [e["message"] for e in r["nobtf_journal"]] == [
        "Assertion failed for nttrace.service - nttrace: eBPF/perf exporter for non-temporal-store memory paths."]
    assert r["nobtf_purge_rc"] == 0 and r["nobtf_left_after_purge"] == []


def test_without_the_kernel_headers_bcc_needs_the_start_fails_once_naming_them(deb_lab):
    """apt's --no-install-recommends leaves out linux-headers-amd64 (a
    Recommends): bcc compiles nothing, so no probe attaches. The start fails
    once, exit 3, in one journal line that names the headers package (the
    loader's line says it attached nothing); no restart; the package purges."""
    r = deb_lab[2].json("deb")
    release = r["kernel"]
    bcc = json.loads(r["noheaders_nttrace_bcc"])
    assert bcc["available"] is False and f"linux-headers-{release}" in bcc["detail"], bcc
    assert r["noheaders_install"]["rc"] == 0 and r["noheaders_status_after_install"].startswith("install ok installed")
    assert r["noheaders_perf_event_paranoid"] == "2"      # the only thing missing is bcc's headers
    said = [e["message"] for e in r["noheaders_journal"] if "no probe could attach" in e["message"]]
    assert len(said) == 1 and said[0].startswith("nttrace: no probe could attach (migrate: bcc cannot compile"), \
        r["noheaders_journal"]
    assert f"linux-headers-{release}" in said[0], said[0]
    assert any(e["message"].endswith("released): attached nothing") for e in r["noheaders_journal"]), \
        r["noheaders_journal"]
    assert r["noheaders_enable_rc"] != 0 and r["noheaders_start_s"] < 90, r
    assert r["noheaders_state"] == "failed" and r["noheaders_restarts"] == 0, r["noheaders_status"]
    assert "status=3" in r["noheaders_status"], r["noheaders_status"]
    assert r["noheaders_purge_rc"] == 0 and r["noheaders_left_after_purge"] == [] \
        and r["noheaders_programs_after_purge"] == []
