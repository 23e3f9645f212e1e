# SPDX-License-Identifier: Apache-2.0
"""PMU discovery and alias parsing on fixtures of uncore and CXL PMUs
(tests/fixtures/sysfs/README.md says where each layout comes from; this
host's own sysfs: tests/live/test_pmu_sysfs_host.py)."""
import pytest

from conftest import FIXTURES
from nttrace.perf import sysfs_pmu
from nttrace.perf.memory_traffic import traffic_events
from nttrace.perf.sysfs_pmu import parse_format

SYSFS = FIXTURES / "sysfs"


@pytest.mark.parametrize("text,expected", [
    ("config:0-7", ("config", [(0, 7)])),
    ("config:0-7,32-35", ("config", [(0, 7), (32, 35)])),
    ("config1:16", ("config1", [(16, 16)])),
    ("config2:0-15\n", ("config2", [(0, 15)])),
])
def test_parse_format(text, expected):
    assert parse_format(text) == expected


def test_split_bitfields_scatter_in_order():
    pmus = sysfs_pmu.discover(SYSFS / "amd-zen4-umc")
    df = pmus["amd_df"]
    # event=0x1ff: low 8 bits -> config:0-7, next bit -> config:32
    assert df.encode("event=0x1ff")["config"] == 0xFF | (1 << 32)
    assert df.encode("umask=0xfff")["config"] == (0xFF << 8) | (0xF << 24)


def test_intel_imc_cas_counts_are_64_byte_lines():
    pmus = sysfs_pmu.discover(SYSFS / "intel-skx-imc")
    imc = pmus["uncore_imc_0"]
    spec = imc.spec("cas_count_read")
    assert (spec.type, spec.config) == (18, 0x0304)
    assert imc.spec("cas_count_write").config == 0x0C04
    events, notes = traffic_events(pmus)
    by_dir = {e.direction: e for e in events}
    assert by_dir["read"].bytes_per_count == pytest.approx(64.0)  # 6.103515625e-5 MiB
    assert by_dir["read"].node == 0 and not notes


def test_cxl_pmu_raw_config_events_and_device_node():
    pmus = sysfs_pmu.discover(SYSFS / "cxl-pmu")
    cxl = pmus["cxl_pmu_mem0.0"]
    assert cxl.spec("m2s_req_memrd").config == 0x1E98002000000002
    assert cxl.encode("vid=0x1e98,gid=0x20,mask=0x2")["config"] == 0x1E98002000000002
    events, _ = traffic_events(pmus)
    assert {(e.direction, e.event) for e in events} == {("read", "m2s_req_memrd"), ("write", "m2s_rwd_memwr")}
    assert all(e.node == 1 and e.bytes_per_count == 64 for e in events)


def test_pmus_without_named_byte_events_are_noted():
    events, notes = traffic_events(sysfs_pmu.discover(SYSFS / "amd-zen4-umc"))
    assert events == []
    assert any("amd_umc_0" in n for n in notes)


def test_unknown_term_is_an_error():
    imc = sysfs_pmu.discover(SYSFS / "intel-skx-imc")["uncore_imc_0"]
    with pytest.raises(ValueError, match="no format/bogus"):
        imc.encode("bogus=1")
