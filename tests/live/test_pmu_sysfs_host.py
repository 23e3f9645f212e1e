# SPDX-License-Identifier: Apache-2.0
"""PMU discovery on this host's own sysfs (the fixtures of uncore and CXL
PMUs are in tests/unit/test_pmu_sysfs.py)."""
from pathlib import Path

import pytest

from nttrace.perf import sysfs_pmu


@pytest.mark.needs("perf-software")   # this host's PMUs in /sys/bus/event_source
def test_host_pmus_match_their_type_files():
    pmus = sysfs_pmu.discover(Path("/sys"))
    assert "software" in pmus and "tracepoint" in pmus
    for name, pmu in pmus.items():
        assert pmu.type == int(Path(f"/sys/bus/event_source/devices/{name}/type").read_text())
    assert pmus["software"].type == 1 and pmus["tracepoint"].type == 2


@pytest.mark.needs("uprobe")
def test_host_uprobe_format_encodes():
    pmus = sysfs_pmu.discover(Path("/sys"))
    # format/retprobe is "config:0" on every kernel with the uprobe PMU
    assert pmus["uprobe"].encode("retprobe")["config"] == 1


@pytest.mark.needs("perf-software")
def test_host_events_with_aliases_encode():
    pmus = sysfs_pmu.discover(Path("/sys"))
    encoded = 0
    for pmu in pmus.values():
        for ev in pmu.events.values():
            enc = pmu.encode(ev.encoding)
            assert set(enc) == {"config", "config1", "config2"}
            encoded += 1
    # msr (aperf/mperf/tsc...) or the CPU PMU's events exist on x86 hosts
    assert encoded > 0
