"""Parts of the capability report: which kernel functions kallsyms lists,
and bcc and fentry told apart from one test compile."""
from pathlib import Path

import pytest

from nttrace.probes import capabilities
from nttrace.probes.capabilities import kallsyms_has


def test_whole_names_only_in_the_kernel_or_a_module(tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_text("ffffffff81000000 T copy_page\n"
                  "ffffffff81000010 T __copy_page_nt\n"
                  "ffffffffc0200000 t nd_pmem_probe\t[nd_pmem]\n"
                  "ffffffff81000020 T folio_mc_copy")          # a last line without its newline
    wanted = ["copy_page", "copy_page_nt", "nd_pmem_probe", "folio_mc_copy", "cop", "page"]
    assert kallsyms_has(ks, wanted) == {"copy_page", "nd_pmem_probe", "folio_mc_copy"}
    assert kallsyms_has(tmp_path / "missing", wanted) == set()


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


@pytest.mark.parametrize("combined,plain,bcc_ok,fentry_says", [
    # the one program compiled and its fentry function loaded
    (None, None, True, "loaded"),
    # compiled, the fentry function refused: bcc works
    ("Failed to load BPF program b'kfunc__vmlinux__vfs_read': Invalid argument", None, True, "Invalid argument"),
    # did not compile, the plain test does: the fentry text is what failed
    ("Failed to compile BPF module <text>", None, True, "Failed to compile"),
    # neither compiles: bcc is broken, and so no fentry test
    ("Failed to compile BPF module <text>", "Failed to compile BPF module <text>", False, "no fentry test"),
])
def test_which_of_bcc_and_fentry_failed(monkeypatch, combined, plain, bcc_ok, fentry_says):
    tried = []

    def try_bpf(text):
        tried.append(text)
        return combined if text != capabilities.COMPILE_TEST else plain
    monkeypatch.setattr(capabilities, "_try_bpf", try_bpf)
    bcc, fentry = capabilities.bcc_and_fentry(None)
    assert bcc.available is bcc_ok and fentry.available is (combined is None)
    assert fentry_says in fentry.detail
    assert len(tried) == (1 if combined is None or not combined.startswith("Failed to compile") else 2)


def test_no_trampolines_by_bccs_rule_from_kallsyms_and_btf(monkeypatch):
    monkeypatch.setattr(capabilities.platform, "machine", lambda: "x86_64")
    assert capabilities.no_trampolines(True, True) is None
    assert "bpf_trampoline_link_prog not in kallsyms" in capabilities.no_trampolines(False, True)
    assert "no kernel BTF" in capabilities.no_trampolines(True, False)
    monkeypatch.setattr(capabilities.platform, "machine", lambda: "aarch64")
    assert "aarch64" in capabilities.no_trampolines(True, True)


@pytest.mark.needs("root", "bcc")
def test_trampolines_as_bcc_itself_finds_them():
    from bcc import BPF
    have = capabilities.TRAMPOLINE in kallsyms_has("/proc/kallsyms", [capabilities.TRAMPOLINE])
    assert (capabilities.no_trampolines(have, Path("/sys/kernel/btf/vmlinux").exists()) is None) == BPF.support_kfunc()
