# SPDX-License-Identifier: Apache-2.0
"""Enum values and offsets from BTF, on --sysroot trees of the NT demotion
revisions (on this host: tests/live/test_kernel_metadata_live.py)."""
import json
import struct

import pytest

from conftest import run_nttrace
from nttrace.kernel import metadata as kernel_meta
from nttrace.errors import UsageError
from nttrace.kernel.sysroot import Sysroot
from sysroot_builder import MODES, build


@pytest.mark.parametrize("revision,nt_name,nt_value,sync_value", [
    ("none", None, None, 2),
    ("v2", "MIGRATE_ASYNC_NON_TEMPORAL_STORES", 1, 3),
    ("v3", "MIGRATE_ASYNC_NONTEMPORAL", 3, 2),
])
def test_revisions_decode_by_name_whatever_the_values(tmp_path, revision, nt_name, nt_value, sync_value):
    meta = kernel_meta.load(Sysroot(build(tmp_path, revision)))
    assert meta.nt_revision == revision
    assert meta.migrate_mode["MIGRATE_SYNC"] == sync_value
    assert meta.mode_name(sync_value) == "MIGRATE_SYNC"
    if nt_name:
        assert meta.mode_name(nt_value) == nt_name
        assert meta.nt_mode_values == {nt_value}
    assert meta.crosscheck == []
    assert meta.offsets == {"dev_pagemap.type": 104, "dev_pagemap.vmemmap_shift": 112}


def test_v2_value_1_is_not_sync_light(tmp_path):
    # The same number means different modes on different revisions.
    v2 = kernel_meta.load(Sysroot(build(tmp_path / "a", "v2")))
    base = kernel_meta.load(Sysroot(build(tmp_path / "b", "none")))
    assert v2.mode_name(1) == "MIGRATE_ASYNC_NON_TEMPORAL_STORES"
    assert base.mode_name(1) == "MIGRATE_SYNC_LIGHT"


@pytest.mark.parametrize("revision", ["v2", "v3"])
def test_validate_sysroot_json_reports_revision(tmp_path, revision):
    root = build(tmp_path, revision)
    proc = run_nttrace("validate", "--json", "--sysroot", str(root))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["kernel"]["nt_revision"] == revision
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["kernel.nt_support"]["status"] == "pass"
    assert revision in checks["kernel.nt_support"]["summary"]
    assert report["capabilities"]["ksym:folio_mc_copy_nt"]["available"] is True


def test_truncated_btf_is_a_usage_error(tmp_path):
    root = build(tmp_path, "v3")
    btf = root / "sys/kernel/btf/vmlinux"
    btf.write_bytes(btf.read_bytes()[:40])
    with pytest.raises(UsageError, match="truncated BTF"):
        kernel_meta.load(Sysroot(root))


def test_not_btf_is_a_usage_error(tmp_path):
    root = build(tmp_path, "none")
    (root / "sys/kernel/btf/vmlinux").write_bytes(struct.pack("<H", 0x1234) + b"\0" * 40)
    with pytest.raises(UsageError, match="bad magic"):
        kernel_meta.load(Sysroot(root))


def test_tracepoint_table_may_omit_enumerators(tmp_path):
    # Seen on Debian's 6.1: enum migrate_mode has MIGRATE_SYNC_NO_COPY = 3,
    # the tracepoint's mode table lists only the first three.
    root = build(tmp_path, "v3", tracepoint_modes=["MIGRATE_ASYNC", "MIGRATE_SYNC_LIGHT", "MIGRATE_SYNC"])
    assert kernel_meta.load(Sysroot(root)).crosscheck == []


def test_tracepoint_value_disagreeing_with_btf_is_reported(tmp_path):
    # v2 renumbers: a tracepoint table from a v3 kernel beside v2's BTF.
    root = build(tmp_path, "v2", tracepoint_modes=MODES["v3"])
    problems = kernel_meta.load(Sysroot(root)).crosscheck
    assert any("MIGRATE_SYNC_LIGHT=1, BTF says 2" in p for p in problems)


def test_parsed_btf_is_dropped_on_release_and_parsed_again_on_use(tmp_path):
    meta = kernel_meta.load(Sysroot(build(tmp_path, "v3")))
    first = meta.btf
    assert first is not None and first.enum("migrate_mode")["MIGRATE_ASYNC_NONTEMPORAL"] == 3
    meta.release_btf()
    assert not meta.btf_parsed
    again = meta.btf
    assert again is not first and again.enum("migrate_mode") == first.enum("migrate_mode")
