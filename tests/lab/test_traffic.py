# SPDX-License-Identifier: Apache-2.0
"""The traffic plugin's proof before its use (lab/traffic/): the stock lab
guest booted twice under it (one vCPU, icount: lab.ab's measuring guest),
running the native reference's copies on a devdax mapping of the NVDIMM,
each in a window of its own. The plugin models memory traffic, not time.

* the copies' pmem counts are the first-principles ones, exactly;
* a store at a known offset of the device lands at that offset of the
  NVDIMM's RAMBlock (QEMU 7.2's plugin address is a RAMBlock offset);
* the two boots (an A/A of one kernel) count the same device traffic (the
  DRAM counts hold the kernel's own work in the window too, and differ);
* base against nt-v3 (lab kernels, one boot each, memmap and demotion
  steps): the device reads per demoted page go from a page's worth to
  about none, the writes stay a page's worth (the NT demotion RFC's claim)."""
import pytest

from lab import lab as labmod
from lab.traffic import run as trun
from lab.traffic import ab as tab
from lab_boots import POOL, Boot
from conftest import SELECTED, lab_kernel

pytestmark = [pytest.mark.lab, pytest.mark.needs("root", "qemu")]

BOOTS = ("traffic-a", "traffic-b")


def _wanted() -> bool:
    return any("test_traffic.py" in n for n in SELECTED)


def _run(name: str):
    try:
        return trun.run(POOL.tmp.mktemp(name))
    except (trun.TrafficError, labmod.LabError) as exc:
        return exc


# Each boot's time here (stock kernel, under the plugin): about 2 minutes.
for _name in BOOTS:
    POOL.register(Boot(_name, _wanted, lambda _prepared, n=_name: _run(n), prepare=lambda: trun.tbuild.build(),
                       seconds=120))


def finished(name: str) -> trun.TrafficRun:
    r = POOL.result(name)
    if isinstance(r, Exception):
        raise r
    return r


@pytest.fixture(scope="module")
def a():
    return finished("traffic-a")


@pytest.fixture(scope="module")
def b():
    return finished("traffic-b")


def test_the_model_and_its_geometry_are_recorded_with_the_counts(a):
    m = a.output.model
    assert m["what"] == "memory traffic, not time"
    assert (m["llc_bytes"], m["ways"], m["line"]) == (32 << 20, 16, 64)
    assert a.output.end["unclosed"] == 0 and a.output.end["windows"] == len(a.guest["windows"])


def test_the_copies_give_the_first_principles_counts_exactly(a):
    assert trun.first_principles_mismatches(a.output) == []


def test_an_empty_window_and_the_page_copies(a):
    assert all(v == 0 for v in a.window("empty").counts["pmem"].values())
    lines = 256 * 4096 // 64
    cached = a.window("pages_memcpy").counts["pmem"]
    assert cached["fills_store"] == cached["writebacks"] == lines and cached["nt_line_writes"] == 0, cached
    nt = a.window("pages_movnti_prefetchnta").counts["pmem"]   # the NT demotion RFC's copy_mc_page_nt() shape
    assert nt["nt_line_writes"] == lines and nt["fills_store"] == nt["fills_load"] == nt["writebacks"] == 0, nt
    if any(w["label"] == "pages_avx2_stream" for w in a.guest["windows"]):   # VMOVNTDQ: the VEX form, decoded
        vex = a.window("pages_avx2_stream").counts["pmem"]
        assert vex["nt_line_writes"] == lines and vex["fills_store"] == vex["stores"] == 0, vex


def test_a_store_at_a_known_pmem_offset_lands_at_that_offset_of_the_nvdimms_ramblock(a):
    w = a.window("probe")
    pm = w.counts["pmem"]
    assert (pm["stores"], pm["fills_store"], pm["writebacks"]) == (1, 1, 1), pm
    assert w.pmem_offsets["first"] == trun.probe_offset(a.device, w.plan), (w.pmem_offsets, a.device)
    # and the RAMBlock offset is not the guest physical address
    assert a.pmem.offset != int(a.device["region_start"], 16)


def test_an_a_a_of_one_kernel_counts_the_same(a, b):
    assert [w.label for w in a.output.windows] == [w.label for w in b.output.windows]
    assert trun.aa_differences(a.output, b.output) == []


# -- base against nt-v3: the device's reads per page -------------------------------------
def _wanted_ab() -> bool:
    return any("test_traffic.py" in n and "nt_v3" in n for n in SELECTED)


def _run_kernel(name: str, kernel):
    if isinstance(kernel, Exception):
        return kernel
    try:
        return trun.summary(trun.run(POOL.tmp.mktemp(f"traffic-{name}"), kernel=kernel, steps=trun.STEPS))
    except (trun.TrafficError, labmod.LabError) as exc:
        return exc


# a lab kernel's traffic boot with both steps: under a minute here
for _variant in ("base", "nt-v3"):
    POOL.register(Boot(f"traffic-{_variant}", _wanted_ab, lambda kernel, v=_variant: _run_kernel(v, kernel),
                       prepare=lambda v=_variant: lab_kernel(v), seconds=60))


def test_base_against_nt_v3_device_reads_per_demoted_page_go_to_about_none():
    base, nt = (tab.per_page(finished(f"traffic-{v}")) for v in ("base", "nt-v3"))
    page = 4096
    # base demotes with cached stores: each destination line is read from the device before it is written
    assert abs(base["demotion"]["device_read_per_page"] - page) <= 0.01 * page, base["demotion"]
    assert nt["demotion"]["device_read_per_page"] <= 0.01 * page, nt["demotion"]
    for side in (base, nt):
        assert abs(side["demotion"]["device_written_per_page"] - page) <= 0.01 * page, side["demotion"]
    # the template series' memmap init on the device (fsdax -M dev): a struct page's line read, then none
    assert base["rebind_fsdax"]["device_read_per_page"] >= 64 > 4 >= nt["rebind_fsdax"]["device_read_per_page"]


def test_lab_ab_reports_carry_base_against_nt_v3_traffic(tmp_path):
    """What lab.ab adds to its reports (lab/traffic/report.py), from these
    two boots (the traffic boot lab.ab makes a kernel: the memmap and
    demotion steps, one vCPU, icount), set beside the recorded A/B of the
    instruction figures: every report carries the device bytes per page,
    the memmap init counts the same device bytes in both of a boot's
    rebinds (spread zero), and demotion's repeat is within 1% of a page."""
    import json
    from conftest import REPO
    from lab import ab as lab_ab
    from lab.traffic import report
    runs = {v: finished(f"traffic-{v}") for v in ("base", "nt-v3")}
    t = report.figures(runs, report.windows_for(["memmap_fsdax", "memmap_devdax", "demotion"]))
    assert report.failed(t) == {} and t["model"] == runs["base"]["model"]
    recorded = REPO / "tests" / "fixtures" / "recorded" / "ab" / "ab-base-nt-v3"
    written = lab_ab.write_ab(sorted(recorded.glob("A/boot-*/*.report.json")),
                              sorted(recorded.glob("B/boot-*/*.report.json")), tmp_path, 10.0)
    report.add_to_ab(written, t, ["base", "nt-v3"])
    doc = json.loads(written["json"].read_text())
    for v in ("base", "nt-v3"):
        k = doc["traffic"]["kernels"][v]
        assert k["per_page"] == tab.per_page(runs[v]), v
        assert k["repeat_spread_bytes_per_page"]["rebind_fsdax"] == 0, k
        assert k["repeat_spread_bytes_per_page"]["rebind_devdax"] == 0, k
        assert k["repeat_spread_bytes_per_page"]["demotion"] <= 0.01 * 4096, k
    md, page = written["markdown"].read_text(), written["html"].read_text()
    for text in (md, page):
        assert "Modelled memory traffic (not time)" in text and "no statistics are run" in text
    base, nt = (tab.per_page(runs[v])["demotion"]["device_read_per_page"] for v in ("base", "nt-v3"))
    assert f"| demotion by memory.reclaim | device bytes read / demoted page | {base} | {nt} |" in md
    assert base > 4000 > 40 > nt
