# SPDX-License-Identifier: Apache-2.0
"""The capability report's rules without the host: which kernel functions a
kallsyms file lists, whether the kernel has trampolines by bcc's rule, and
bcc and fentry told apart from one test compile's outcome (against this
host's kernel: tests/live/test_capabilities.py)."""
import pytest

from nttrace.capabilities import report as capabilities
from nttrace.capabilities.report import kallsyms_has


def test_whole_names_only_in_the_kernel_or_a_module(tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_text("ffffffff81000000 T copy_page\n"
                  "ffffffff81000010 T __copy_page_nt\n"
                  "ffffffffc0200000 t nd_pmem_probe\t[nd_pmem]\n"
                  "ffffffff81000020 T folio_mc_copy")          # a last line without its newline
    wanted = ["copy_page", "copy_page_nt", "nd_pmem_probe", "folio_mc_copy", "cop", "page"]
    assert kallsyms_has(ks, wanted) == {"copy_page", "nd_pmem_probe", "folio_mc_copy"}
    assert kallsyms_has(tmp_path / "missing", wanted) == set()


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
