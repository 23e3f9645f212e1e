# SPDX-License-Identifier: Apache-2.0
"""The Debian package's scenario, run inside the lab guest booted with
systemd as PID 1 and `nttrace.deb` on the kernel command line
(guest-systemd.sh). Run by Debian's python3 with no nttrace installed: the
package is what it installs. The host built two packages into RESULTS/deb/
(`make deb` into deb/install/, and with a changed version into deb/upgrade/:
tests/lab/test_deb.py).

1. `apt-get install ./nttrace_A.deb` with the guest's network down: every
   dependency must already be on the image.
2. The config edited as an operator would (the tracepoint probe, listening
   where the host's forwarded port reaches), under Debian's
   perf_event_paranoid=3: `systemctl enable --now nttrace` fails once,
   saying why, and is not restarted.
3. perf_event_paranoid 2 (README.Debian), started: READY time, RSS,
   /metrics scraped in the guest and from the host, `nttrace validate
   --quick` from /usr/bin.
4. `apt-get install ./nttrace_B.deb` (network down): the edited config
   kept, the daemon restarted on the new version.
5. `apt-get purge`: no unit, nothing under /etc/nttrace or the Python
   package's directory, no BPF program.
6. A kernel without BTF (a tmpfs over /sys/kernel/btf, which systemd and
   nttrace both read): installed, enabled, the unit's start fails on its
   AssertPathExists, in the journal and in a status that names it; purged.
7. A machine without the kernel headers bcc compiles against (what apt's
   --no-install-recommends gives: linux-headers-amd64 is a Recommends; a
   tmpfs over /usr/src hides them, and this kernel has no kheaders): bcc
   works nowhere, so the daemon's start fails once, in one line that names
   the headers package, and is not restarted; purged.

Writes RESULTS/deb.json. Then, last, so that nothing it installs is on the
machine the steps above measure and a run of it that outlasts the guest's
bound costs only its own result:

8. The package's own tests (debian/tests) run by autopkgtest, Debian's
   runner, with the null server (this guest is the testbed), the network
   down: the runner and what it needs beyond the image come as .debs the
   host fetched (RESULTS/deb/guest-debs), installed with apt from those
   files; autopkgtest installs nttrace from the .deb itself and unpacks the
   tests from the source package (.dsc). Writes RESULTS/deb-autopkgtest.json
   and copies autopkgtest's output directory to RESULTS/deb/autopkgtest."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_checks import wait_until, write_result  # noqa: E402  (stdlib only: no nttrace in this interpreter)

RESULTS = Path(sys.argv[1])
STARTED = time.monotonic()
CONFIG = Path("/etc/nttrace/nttrace.toml")
# the operator's edit: listen where the host's forwarded port reaches, the
# tracepoint probe alone (TCG compiles every probe slowly), no perf counters
EDITED = 'listen = "0.0.0.0:9435"\nprobes = ["migrate"]\nperf = []\n'
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
UNITS = ("nttrace.service", "nttrace-validate.service", "nttrace-validate.timer")
PACKAGE_PATHS = ("/lib/systemd/system/nttrace.service", "/lib/systemd/system/nttrace-validate.timer",
                 "/etc/nttrace", "/usr/lib/nttrace", "/usr/bin/nttrace")


def sh(*cmd, timeout=600, check=True, env=None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {(p.stdout + p.stderr).strip()[-3000:]}")
    return p


def prop(name: str) -> str:
    return sh("systemctl", "show", "-p", name, "--value", "nttrace").stdout.strip()


def nic() -> str:
    return next(n.name for n in sorted(Path("/sys/class/net").iterdir()) if n.name != "lo")


@contextmanager
def network_down():
    """The guest's only NIC down for the block (and back up after, with its default route)."""
    sh("ip", "link", "set", nic(), "down")
    try:
        yield
    finally:
        sh("ip", "link", "set", nic(), "up")
        sh("ip", "route", "replace", "default", "via", "10.0.2.2", check=False)


def apt_install_offline(*debs: Path, recommends: bool = True) -> dict:
    """apt-get install ./DEB... with the guest's network down."""
    with network_down():
        t0 = time.monotonic()
        p = sh("apt-get", "install", "-y", "-q", "-o", "Dpkg::Options::=--force-confold",
               *([] if recommends else ["--no-install-recommends"]), *map(str, debs), check=False, env=APT_ENV)
        s = time.monotonic() - t0
    return {"rc": p.returncode, "s": s, "output": (p.stdout + p.stderr)[-4000:]}


def apt_purge() -> subprocess.CompletedProcess:
    return sh("apt-get", "purge", "-y", "-q", "nttrace", check=False, env=APT_ENV)


def left_behind() -> list[str]:
    """What of the package's paths exists (after a purge: nothing should)."""
    return [path for path in PACKAGE_PATHS if Path(path).exists()]


def installed_capability(expr: str) -> str:
    """A capability (`expr` over nttrace.capabilities.report as c) as the
    installed package's nttrace finds it, as JSON; or its error's tail."""
    p = sh("/usr/bin/python3", "-c", "import json; from nttrace.capabilities import report as c; "
           f"print(json.dumps({expr}.as_json()))", check=False,
           env={**os.environ, "PYTHONPATH": "/usr/lib/nttrace"})     # the package's private modules
    return p.stdout.strip() or p.stderr[-1000:]


AUTOPKGTEST_OUT = Path("/var/tmp/nttrace-autopkgtest")
# guest-systemd.sh's bound on this whole script: autopkgtest gets what is left of it (less a minute
# for writing its result), so that a run too slow for the guest ends in a result that says so
GUEST_BOUND = 1200


def package_tests() -> dict:
    """Step 8: the package's own tests (debian/tests) run by autopkgtest
    with this guest as its own testbed (the null server: as root, on this
    whole machine, which needs-root and isolation-machine ask for) against
    the source package and the .deb the host built, with the network down.
    autopkgtest installs nttrace itself (it was purged by step 7): the
    tests see the shipped configuration. The tests the lab leaves out, each
    with its reason, are in RESULTS/deb/autopkgtest-skips.json."""
    out: dict = {}
    runner_debs = sorted((RESULTS / "deb" / "guest-debs").glob("*.deb"))
    out["runner_debs"] = [p.name for p in runner_debs]
    out["nttrace_before"] = dpkg_status()
    if not runner_debs:     # the host could not fetch them: deb/guest-debs-error.txt says why
        out["runner_install"] = {"rc": None, "s": 0.0, "output": f"no .debs in {RESULTS / 'deb' / 'guest-debs'}"}
        return out
    # apt reads local .debs as its unprivileged _apt user: a copy on the guest's own disk it can read,
    # not the share's files (whose owner and mode are the host's)
    local = Path("/var/tmp/nttrace-runner-debs")
    shutil.rmtree(local, ignore_errors=True)
    local.mkdir(mode=0o755, parents=True)
    for d in runner_debs:
        shutil.copyfile(d, local / d.name)
        (local / d.name).chmod(0o644)
    out["runner_install"] = apt_install_offline(*sorted(local.glob("*.deb")), recommends=False)
    out["runner_version"] = sh("dpkg-query", "-W", "-f=${Version}", "autopkgtest", check=False).stdout.strip()
    if out["runner_install"]["rc"] != 0:
        return out
    # steps 6 and 7 leave nttrace.service failed: the daemon test starts it afresh
    sh("systemctl", "reset-failed", check=False)
    skips = json.loads((RESULTS / "deb" / "autopkgtest-skips.json").read_text())
    built = RESULTS / "deb" / "install"
    dsc, deb = next(built.glob("nttrace_*.dsc")), next(built.glob("nttrace_*_amd64.deb"))
    # the output directory on the guest's own disk, copied to the share after: autopkgtest hard-links
    # the .deb it is given into it, which the 9p share need not allow
    cmd = ["autopkgtest", "--output-dir", str(AUTOPKGTEST_OUT), "--no-built-binaries",
           *(f"--skip-test={name}" for name in sorted(skips)), str(dsc), str(deb), "--", "null"]
    bound = max(60, int(GUEST_BOUND - 60 - (time.monotonic() - STARTED)))
    with network_down():
        t0 = time.monotonic()
        # timeout(1) ends the runner and the test it runs (its process group) at the bound: exit 124
        p = sh("timeout", "-k", "10", str(bound), *cmd, check=False, timeout=bound + 30,
               env={**APT_ENV, "HOME": "/root"})
        seconds = time.monotonic() - t0
    copied = RESULTS / "deb" / "autopkgtest"
    if AUTOPKGTEST_OUT.is_dir():
        shutil.copytree(AUTOPKGTEST_OUT, copied, dirs_exist_ok=True)
    out["autopkgtest"] = {"command": cmd, "bound_s": bound, "rc": p.returncode, "s": seconds,
                          "stdout": p.stdout[-3000:], "stderr": p.stderr[-6000:],
                          "output_dir": str(copied) if AUTOPKGTEST_OUT.is_dir() else None}
    # what the tests ran on: the package autopkgtest installed, its configuration as shipped (a conffile
    # whose md5sum is the one dpkg recorded)
    out["nttrace_after"] = dpkg_status()
    conffiles = sh("dpkg-query", "-W", "-f=${Conffiles}", "nttrace", check=False).stdout
    digest = sh("md5sum", str(CONFIG), check=False).stdout.split()[:1]
    out["config_as_shipped"] = bool(digest) and f"{CONFIG} {digest[0]}" in conffiles
    return out


UNCONFINED = Path("/run/nttrace-validate-unconfined")
TEXTFILE = Path("/var/lib/prometheus/node-exporter/nttrace_validate.prom")


def check_statuses(textfile: str) -> dict[str, str]:
    """check -> status, from a validate textfile's nttrace_validate_check_status lines."""
    return dict(re.findall(r'^nttrace_validate_check_status\{check="([^"]+)",status="([^"]+)"\} 1', textfile, re.M))


def validate_unit() -> dict:
    """`systemctl start nttrace-validate.service` (a oneshot: returns when the
    run ends): its result, exit status, journal and the textfile it wrote."""
    mark = cursor()
    out = {"dir_before": TEXTFILE.parent.is_dir()}
    t0 = time.monotonic()
    out["start_rc"] = sh("systemctl", "start", "nttrace-validate.service", check=False, timeout=1200).returncode
    out["s"] = time.monotonic() - t0
    show = sh("systemctl", "show", "-p", "Result", "-p", "ExecMainStatus", "nttrace-validate.service").stdout
    out.update(dict(line.split("=", 1) for line in show.split()))
    p = sh("journalctl", "-u", "nttrace-validate", "--no-pager", "-o", "cat", f"--after-cursor={mark}", check=False)
    out["journal"] = p.stdout[-4000:]
    out["textfile"] = TEXTFILE.read_text() if TEXTFILE.exists() else ""
    return out


def dpkg_status() -> str:
    return sh("dpkg-query", "-W", "-f=${Status} ${Version}", "nttrace", check=False).stdout.strip()


def nttrace_programs() -> list[str]:
    progs = json.loads(sh("bpftool", "-j", "prog", "show").stdout or "[]")
    return sorted(p.get("name", "") for p in progs if p.get("name", "").startswith("nttrace"))


def rss_kib(pid: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def metrics() -> str | None:
    try:
        with urllib.request.urlopen("http://127.0.0.1:9435/metrics", timeout=10) as r:
            return r.read().decode()
    except OSError:
        return None


def journal_since(cursor: str) -> list[dict]:
    """The unit's journal entries after `cursor`: (identifier, message)."""
    p = sh("journalctl", "-u", "nttrace", "--no-pager", "-o", "json", f"--after-cursor={cursor}", check=False)
    entries = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    return [{"who": e.get("SYSLOG_IDENTIFIER", ""), "message": e.get("MESSAGE", "")} for e in entries]


def cursor() -> str:
    p = sh("journalctl", "-n", "1", "--no-pager", "-o", "json", check=False)
    lines = p.stdout.strip().splitlines()
    return json.loads(lines[-1])["__CURSOR"] if lines else ""


def status_text() -> str:
    return sh("systemctl", "status", "--no-pager", "nttrace", check=False).stdout


def failed_start(key: str) -> dict:
    """`systemctl enable --now nttrace` where the start must fail: its exit
    code and time, then (past two RestartSec: a restart would have come by
    then) the unit's state, its restarts, its journal and its status, each
    under KEY_."""
    mark = cursor()
    t0 = time.monotonic()
    rc = sh("systemctl", "enable", "--now", "nttrace", check=False, timeout=300).returncode
    seconds = time.monotonic() - t0
    time.sleep(12)
    return {f"{key}_enable_rc": rc, f"{key}_start_s": seconds, f"{key}_state": prop("ActiveState"),
            f"{key}_restarts": int(prop("NRestarts") or 0), f"{key}_journal": journal_since(mark),
            f"{key}_status": status_text()}


def main() -> dict:
    first = next((RESULTS / "deb" / "install").glob("nttrace_*.deb"))
    second = next((RESULTS / "deb" / "upgrade").glob("nttrace_*.deb"))
    out: dict = {"pid1": Path("/proc/1/comm").read_text().strip(), "debs": [first.name, second.name],
                 "kernel": sh("uname", "-r").stdout.strip()}

    # 1. install, offline
    out["install"] = apt_install_offline(first)
    out["status_after_install"] = dpkg_status()
    out["installed_size_kib"] = int(sh("dpkg-query", "-W", "-f=${Installed-Size}", "nttrace").stdout)
    out["enabled_after_install"] = sh("systemctl", "is-enabled", "nttrace", check=False).stdout.strip()
    out["active_after_install"] = prop("ActiveState")
    out["conffiles"] = sh("dpkg-query", "-W", "-f=${Conffiles}", "nttrace").stdout.split()
    out["which_nttrace"] = sh("sh", "-c", "command -v nttrace").stdout.strip()

    # 2. the operator's edit, then Debian's perf_event_paranoid=3: one
    # failure, said once, no restart loop
    CONFIG.write_text(EDITED)
    out["perf_event_paranoid"] = PARANOID.read_text().strip()
    out.update(failed_start("paranoid"))
    sh("systemctl", "reset-failed", "nttrace", check=False)

    # 3. the sysctl README.Debian asks for, then start
    PARANOID.write_text("2\n")
    t0 = time.monotonic()
    out["start_rc"] = sh("systemctl", "start", "nttrace", check=False, timeout=300).returncode
    out["ready_s"] = time.monotonic() - t0     # Type=notify: start returns at READY=1
    pid = prop("MainPID")
    out["main_pid"] = pid
    if out["start_rc"] != 0 or pid == "0":
        raise RuntimeError(f"nttrace.service did not start (rc {out['start_rc']}):\n{status_text()}")
    out["rss_kib_at_ready"] = rss_kib(pid)
    out["programs_running"] = nttrace_programs()
    body = wait_until(metrics, 60)
    out["guest_scrape_ok"] = bool(body) and 'nttrace_probe_up{probe="migrate"' in body
    (RESULTS / "daemon-ready").write_text(f"{out['ready_s']}\n")    # the host scrapes now
    out["host_scraped"] = bool(wait_until(lambda: (RESULTS / "host-scraped").exists(), 300))
    out["rss_kib_after_scrapes"] = rss_kib(pid)
    t0 = time.monotonic()
    UNCONFINED.mkdir(parents=True, exist_ok=True)
    v = sh("/usr/bin/nttrace", "validate", "--quick", "--textfile-dir", str(UNCONFINED), check=False, timeout=900)
    out["validate"] = {"rc": v.returncode, "s": time.monotonic() - t0, "stdout": v.stdout[-3000:],
                       "stderr": v.stderr[-2000:]}
    # 3b. the same checks under nttrace-validate.service's sandbox (its
    # capability set, read-only system, system-call filter), writing where
    # node_exporter reads: the directory the package's tmpfiles.d entry made
    # (no prometheus-node-exporter on the image)
    out["validate_unit"] = validate_unit()
    out["validate_statuses"] = {"unconfined": check_statuses((UNCONFINED / TEXTFILE.name).read_text()),
                                "unit": check_statuses(out["validate_unit"]["textfile"])}

    # 4. upgrade: the edit kept, the daemon restarted on the new version
    out["upgrade"] = apt_install_offline(second)
    out["status_after_upgrade"] = dpkg_status()
    out["config_after_upgrade"] = CONFIG.read_text()
    out["config_dpkg_files"] = sorted(str(p) for p in CONFIG.parent.glob("*.dpkg-*"))
    wait_until(lambda: prop("ActiveState") == "active", 300)
    out["active_after_upgrade"] = prop("ActiveState")
    out["pid_after_upgrade"] = prop("MainPID")
    out["version_running"] = sh("/usr/bin/nttrace", "--version").stdout.strip()
    body = wait_until(metrics, 120)
    out["scrape_after_upgrade_ok"] = bool(body) and 'nttrace_probe_up{probe="migrate"' in body

    # 5. purge
    p = apt_purge()
    out["purge"] = {"rc": p.returncode, "output": (p.stdout + p.stderr)[-3000:]}
    out["status_after_purge"] = dpkg_status()
    out["left_after_purge"] = left_behind()
    out["unit_after_purge"] = sh("systemctl", "list-unit-files", "--no-legend", *UNITS, check=False).stdout.strip()
    out["enable_links_after_purge"] = sorted(str(p) for p in Path("/etc/systemd/system").rglob("*") if p.name in UNITS)
    wait_until(lambda: not nttrace_programs(), 5)
    out["programs_after_purge"] = nttrace_programs()

    # 6. a kernel without BTF: systemd's condition and nttrace's own check
    # read /sys/kernel/btf/vmlinux; a tmpfs over /sys/kernel/btf hides it
    sh("mount", "-t", "tmpfs", "-o", "size=1m", "nttrace-no-btf", "/sys/kernel/btf")
    try:
        out["nobtf_install"] = apt_install_offline(first)
        out["nobtf_status_after_install"] = dpkg_status()
        mark = cursor()
        p = sh("systemctl", "enable", "--now", "nttrace", check=False)
        out["nobtf_enable"] = {"rc": p.returncode, "output": (p.stdout + p.stderr)[-2000:]}
        time.sleep(2)
        out["nobtf_state"] = prop("ActiveState")
        out["nobtf_assert"] = prop("AssertResult")
        out["nobtf_journal"] = journal_since(mark)
        out["nobtf_status"] = status_text()
        out["nobtf_nttrace_btf"] = installed_capability("c.report(live_probes=False)['btf']")
        out["nobtf_purge_rc"] = apt_purge().returncode
        out["nobtf_left_after_purge"] = left_behind()
    finally:
        sh("umount", "/sys/kernel/btf", check=False)

    # 7. no kernel headers: /lib/modules/R/build points into /usr/src
    sh("mount", "-t", "tmpfs", "-o", "size=1m", "nttrace-no-headers", "/usr/src")
    try:
        out["noheaders_install"] = apt_install_offline(first)
        out["noheaders_status_after_install"] = dpkg_status()
        out["noheaders_nttrace_bcc"] = installed_capability("c.bcc_compiles()")
        CONFIG.write_text(EDITED)
        out["noheaders_perf_event_paranoid"] = PARANOID.read_text().strip()    # 2 since step 3: only bcc lacks
        out.update(failed_start("noheaders"))
        out["noheaders_purge_rc"] = apt_purge().returncode
        out["noheaders_left_after_purge"] = left_behind()
        out["noheaders_programs_after_purge"] = nttrace_programs()
    finally:
        sh("umount", "/usr/src", check=False)
    return out


if __name__ == "__main__":
    write_result(RESULTS / "deb.json", main)
    write_result(RESULTS / "deb-autopkgtest.json", package_tests)
