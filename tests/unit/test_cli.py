# SPDX-License-Identifier: Apache-2.0
"""The command line: help, version, exit codes and one-line errors."""
from conftest import one_line_error, run_nttrace


def test_version_and_help():
    v = run_nttrace("--version")
    assert v.returncode == 0 and v.stdout.startswith("nttrace 0.")
    for sub in ("validate", "trace", "bench", "daemon"):
        h = run_nttrace(sub, "--help")
        assert h.returncode == 0
        assert "examples:" in h.stdout and "exit codes:" in h.stdout


def test_unknown_subcommand_is_exit_2():
    proc = run_nttrace("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice: 'frobnicate'" in one_line_error(proc)


def test_unknown_flag_is_exit_2():
    proc = run_nttrace("validate", "--no-such-flag")
    assert proc.returncode == 2
    one_line_error(proc)


def test_missing_sysroot_is_exit_2(tmp_path):
    proc = run_nttrace("validate", "--sysroot", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "not a directory" in one_line_error(proc)


def test_unreadable_btf_is_exit_2(tmp_path):
    (tmp_path / "sys/kernel/btf").mkdir(parents=True)
    (tmp_path / "sys/kernel/btf/vmlinux").write_bytes(b"garbage, not BTF at all....")
    proc = run_nttrace("validate", "--sysroot", str(tmp_path))
    assert proc.returncode == 2
    assert "not a BTF file" in one_line_error(proc)


def test_check_pattern_matching_nothing_is_exit_2():
    proc = run_nttrace("validate", "--check", "no.such.check")
    assert proc.returncode == 2
    assert "matches no check" in one_line_error(proc)


def test_list_prints_the_catalog():
    """One line per registered check, in the catalog's order: its id, its
    title, quick or slow and what it changes on the system; every id is one
    that --check selects alone."""
    from nttrace.validate import checks
    proc = run_nttrace("validate", "--list")
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    catalog = checks.select(None, quick=False)      # every family's registrations
    assert len(catalog) >= 4 and len(lines) == len(catalog), (len(lines), [c.id for c in catalog])
    for line, c in zip(lines, catalog):
        cid, rest = line.split(None, 1)
        flags = ("quick" if c.quick else "slow") + (f", changes system state: {c.triggers}" if c.triggers else "")
        assert (cid, rest) == (c.id, f"{c.title} [{flags}]")
        assert [s.id for s in checks.select([cid], quick=False)] == [cid]
