# SPDX-License-Identifier: Apache-2.0
"""Host capabilities for the tests (a pytest plugin, loaded by conftest).

A test that needs something of the host says so with
`@pytest.mark.needs("bcc", ...)`. Where the host lacks it the test is skipped
and the skip names the capability, unless the capability is listed in
NTTRACE_REQUIRE (comma-separated; CI lists what its hosts have), in which
case the test fails: a capability CI relies on cannot silently disappear.
"""
from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path

import pytest


@lru_cache(maxsize=1)
def _report():
    from nttrace.capabilities import report as capabilities
    return capabilities.report()


def _cap(key):
    c = _report()[key]
    return c.available, c.detail


def _tracepoint():
    a, d = _cap("tracepoint:migrate:mm_migrate_pages_start")
    return a, d


def _root():
    return os.geteuid() == 0, f"euid {os.geteuid()}"


def _binary(name):
    def probe():
        path = shutil.which(name)
        return path is not None, path or f"{name} not on PATH"
    return probe


def _qemu():
    missing = [b for b in ("qemu-system-x86_64", "qemu-img", "debootstrap", "mkfs.ext2", "mkfs.ext4")
               if not shutil.which(b)]
    return not missing, ("missing " + ", ".join(missing)) if missing else "qemu-system-x86_64, debootstrap"


def _kernel_build():
    # dpkg-buildpackage (dpkg-dev), dh_builddeb (debhelper) and rsync (its headers_install): `make
    # bindeb-pkg`, each kernel's packages
    missing = [b for b in ("gcc", "make", "flex", "bison", "bc", "pahole", "patch", "apt-get", "dpkg-deb",
                           "dpkg-buildpackage", "dh_builddeb", "rsync") if not shutil.which(b)]
    if not Path("/usr/include/libelf.h").exists():
        missing.append("libelf-dev")
    return not missing, ("missing " + ", ".join(missing)) if missing else "kernel build tools present"


def _seeds():
    from lab import kernel_build
    want = sorted({s.file for v in kernel_build.VARIANTS.values() for s in v.series})
    missing = [f for f in want if not (kernel_build.SEEDS / f).exists()]
    return not missing, (f"{kernel_build.SEEDS} lacks {', '.join(missing)}" if missing
                         else f"seed series in {kernel_build.SEEDS}")


def _memcg():
    from nttrace.workloads.scratch_cgroup import NoMemoryCgroup, memory_hierarchy
    try:
        root, version = memory_hierarchy()
    except NoMemoryCgroup as exc:
        return False, str(exc)
    return True, f"memory controller on cgroup v{version} at {root}"



CAPABILITIES = {
    "root": _root,
    "btf": lambda: _cap("btf"),
    "tracefs": lambda: _cap("tracefs"),
    "tracepoint": _tracepoint,
    "uprobe": lambda: _cap("uprobe"),
    "kprobe": lambda: _cap("kprobe"),
    "fentry": lambda: _cap("fentry"),
    "bcc": lambda: _cap("bcc"),
    "page-ref": lambda: _cap("tracepoint:page_ref:page_ref_set"),
    "perf-software": lambda: _cap("perf:software"),
    "perf-hardware": lambda: _cap("perf:hardware"),
    "perf-uncore": lambda: _cap("perf:uncore"),
    "numa-tiers": lambda: _cap("numa:tiers"),
    "pmem": lambda: _cap("pmem"),
    "memcg": _memcg,
    "bpftool": _binary("bpftool"),
    "prometheus": _binary("prometheus"),
    "node-exporter": _binary("prometheus-node-exporter"),
    "openssl": _binary("openssl"),
    # absences some tests are about (what a probe does where the kernel lacks its path)
    "no-page-ref": lambda: (not _cap("tracepoint:page_ref:page_ref_set")[0],
                            "page_ref_set " + ("present" if _cap("tracepoint:page_ref:page_ref_set")[0] else "absent")),
    "no-kprobe-fentry": lambda: (not (_cap("kprobe")[0] or _cap("fentry")[0]),
                                 f"kprobe: {_cap('kprobe')[1]}; fentry: {_cap('fentry')[1]}"),
    "browser": lambda: (bool(shutil.which("chromium-headless-shell") or shutil.which("chromium")),
                        shutil.which("chromium-headless-shell") or shutil.which("chromium") or "no chromium"),
    "promtool": _binary("promtool"),
    "systemd-analyze": _binary("systemd-analyze"),
    "setpriv": _binary("setpriv"),
    "dpkg-dev": _binary("dpkg-parsechangelog"),
    "apt": _binary("apt-get"),
    "qemu": _qemu,
    "kernel-build": _kernel_build,
    "seeds": _seeds,
    # systemd not this host's init: where `nttrace ab start` must refuse (a host
    # that has it would be rebooted by a start that passes)
    "no-systemd-init": lambda: (not Path("/run/systemd/system").is_dir(),
                                "systemd is " + ("init" if Path("/run/systemd/system").is_dir() else "not init")),
}


def required() -> set[str]:
    return {c.strip() for c in os.environ.get("NTTRACE_REQUIRE", "").split(",") if c.strip()}


def pytest_configure(config):
    unknown = required() - set(CAPABILITIES)
    if unknown:
        raise pytest.UsageError(f"NTTRACE_REQUIRE names unknown capabilities: {', '.join(sorted(unknown))}")



def has(*caps: str) -> bool:
    """Whether the host has every one of the capabilities (what `needs` checks)."""
    return all(CAPABILITIES[c]()[0] for c in caps)



def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="needs"):
        for cap in mark.args:
            if cap not in CAPABILITIES:
                pytest.fail(f"test asks for unknown capability {cap!r}")
            ok, detail = CAPABILITIES[cap]()
            if ok:
                continue
            if cap in required():
                pytest.fail(f"capability {cap} is in NTTRACE_REQUIRE but missing on this host: {detail}")
            pytest.skip(f"host lacks capability {cap}: {detail}")
