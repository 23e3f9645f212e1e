# SPDX-License-Identifier: Apache-2.0
"""Parts of the capability report on this host: which kernel functions
kallsyms lists, and bcc and fentry told apart from one test compile, as bcc
itself finds them (the rules alone: tests/unit/test_capability_rules.py)."""
from pathlib import Path

import pytest

from nttrace.capabilities import report as capabilities
from nttrace.capabilities.report import kallsyms_has


@pytest.mark.needs("root")
def test_agrees_with_every_line_split_on_this_host():
    lines = Path("/proc/kallsyms").read_text().splitlines()
    names = {line.split()[2] for line in lines if len(line.split()) >= 3}
    wanted = sorted(names)[::997] + ["nttrace_no_such_function", "vfs_read", "copy_page"]
    assert kallsyms_has("/proc/kallsyms", wanted) == set(wanted) & names


def _bcc_alone(text: str) -> str | None:
    """None when bcc itself (not through nttrace) compiles and loads `text`, else why not."""
    from bcc import BPF
    try:
        BPF(text=text).cleanup()
    except Exception as exc:    # bcc raises bare Exception
        return str(exc)
    return None


@pytest.mark.needs("root", "bcc")
def test_bcc_and_fentry_from_one_compile_on_this_host():
    """The one combined compile answers as bcc does with each test program
    alone: bcc works where a plain program loads, fentry where an fentry
    program on vfs_read loads, and a refusal is reported with its reason (an
    EPERM as one: bcc words it "need to be super-user", even for root).
    This host has trampolines but refuses fentry with EPERM."""
    trampolines = capabilities.TRAMPOLINE in kallsyms_has("/proc/kallsyms", [capabilities.TRAMPOLINE])
    no = capabilities.no_trampolines(trampolines, Path("/sys/kernel/btf/vmlinux").exists())
    bcc, fentry = capabilities.bcc_and_fentry(no)
    plain = _bcc_alone("int nttrace_test_plain(void *ctx) { return 0; }")
    assert bcc.available == (plain is None)
    assert ("compiled and loaded" in bcc.detail) if plain is None else (plain.splitlines()[0] in bcc.detail)
    if no is not None:
        assert not fentry.available and fentry.detail == no
        return
    refused = _bcc_alone("KFUNC_PROBE(vfs_read) { return 0; }")
    assert fentry.available == (refused is None), (fentry, refused)
    if refused is not None:
        eperm = "super-user" in refused or "Operation not permitted" in refused
        assert ("EPERM" if eperm else refused.splitlines()[0]) in fentry.detail, (fentry.detail, refused)


@pytest.mark.needs("root", "bcc")
def test_trampolines_as_bcc_itself_finds_them():
    from bcc import BPF
    have = capabilities.TRAMPOLINE in kallsyms_has("/proc/kallsyms", [capabilities.TRAMPOLINE])
    assert (capabilities.no_trampolines(have, Path("/sys/kernel/btf/vmlinux").exists()) is None) == BPF.support_kfunc()
