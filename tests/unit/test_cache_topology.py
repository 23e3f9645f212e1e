# SPDX-License-Identifier: Apache-2.0
"""The last-level cache the native reference plans for: what /sys reports
(fake sysfs trees in tests/fixtures/sysfs, and this host's own), or what
NTTRACE_LLC_SIZE emulates; bad input is a usage error."""
from pathlib import Path

import pytest

from nttrace.errors import UsageError
from nttrace.kernel import cache_topology

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sysfs"


def _sysfs(tmp_path: Path, caches: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(caches):
        d = tmp_path / cache_topology.CACHE_DIR / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return tmp_path


@pytest.mark.parametrize("tree,mib", [("cache-xeon-480m", 480), ("cache-epyc-32m", 32)])
def test_the_highest_data_cache_level_of_a_sysfs_tree(tree, mib):
    llc = cache_topology.last_level_cache(FIXTURES / tree, environ={})
    assert (llc.bytes, llc.level, llc.emulated) == (mib << 20, 3, False)
    assert llc.source.endswith("index3") and llc.reported_bytes == mib << 20


def test_instruction_caches_never_count_and_the_largest_of_a_level_wins(tmp_path):
    root = _sysfs(tmp_path, [(1, "Data", "32K"), (2, "Instruction", "8192K"), (2, "Unified", "1024K"),
                             (2, "Data", "2048K")])
    assert cache_topology.last_level_cache(root, environ={}).bytes == 2048 << 10


def test_this_hosts_llc_is_what_its_sysfs_says():
    d = Path("/sys") / cache_topology.CACHE_DIR
    levels = {}
    for idx in d.glob("index*"):
        if (idx / "type").read_text().strip() != "Instruction":
            levels.setdefault(int((idx / "level").read_text()), []).append(
                cache_topology.parse_size((idx / "size").read_text()))
    if not levels:
        pytest.skip("this host's /sys lists no CPU caches")
    llc = cache_topology.last_level_cache(environ={})
    assert llc.bytes == max(levels[max(levels)]) and not llc.emulated


def test_nttrace_llc_size_emulates_the_size_and_says_so():
    llc = cache_topology.last_level_cache(FIXTURES / "cache-xeon-480m", environ={cache_topology.ENV: "32M"})
    assert llc.bytes == 32 << 20 and llc.emulated and llc.reported_bytes == 480 << 20
    assert "emulated" in llc.source and "480 MiB" in llc.source
    for text, value in (("33554432", 32 << 20), ("32MiB", 32 << 20), ("512K", 512 << 10), ("2G", 2 << 30)):
        assert cache_topology.last_level_cache(FIXTURES / "cache-epyc-32m", environ={cache_topology.ENV: text}).bytes == value


@pytest.mark.parametrize("value", ["lots", "-1M", "0", "32X", ""])
def test_a_bad_nttrace_llc_size_is_a_usage_error(value):
    with pytest.raises(UsageError, match=cache_topology.ENV):
        cache_topology.last_level_cache(FIXTURES / "cache-epyc-32m", environ={cache_topology.ENV: value})


def test_no_cache_in_sysfs_is_unknown_not_an_error(tmp_path):
    llc = cache_topology.last_level_cache(tmp_path, environ={})
    assert llc.bytes is None and "lists no cache" in llc.source

