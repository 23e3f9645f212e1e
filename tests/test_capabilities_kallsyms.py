"""kallsyms_has: which kernel functions /proc/kallsyms lists, by whole name,
built-in or in a module; on this host's kallsyms and on written ones."""
from pathlib import Path

import pytest

from nttrace.probes.capabilities import kallsyms_has


def test_whole_names_only_in_the_kernel_or_a_module(tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_text("ffffffff81000000 T copy_page\n"
                  "ffffffff81000010 T __copy_page_nt\n"
                  "ffffffffc0200000 t nd_pmem_probe\t[nd_pmem]\n"
                  "ffffffff81000020 T folio_mc_copy")          # a last line without its newline
    wanted = ["copy_page", "copy_page_nt", "nd_pmem_probe", "folio_mc_copy", "copy", "page"]
    assert kallsyms_has(ks, wanted) == {"copy_page", "nd_pmem_probe", "folio_mc_copy"}
    assert kallsyms_has(tmp_path / "missing", wanted) == set()


@pytest.mark.needs("root")
def test_agrees_with_every_line_split_on_this_host():
    lines = Path("/proc/kallsyms").read_text().splitlines()
    names = {line.split()[2] for line in lines if len(line.split()) >= 3}
    wanted = sorted(names)[::997] + ["nttrace_no_such_function", "vfs_read", "copy_page"]
    assert kallsyms_has("/proc/kallsyms", wanted) == set(wanted) & names
