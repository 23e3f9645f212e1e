# SPDX-License-Identifier: Apache-2.0
"""The traffic plugin's proof before its use (lab/traffic/): the stock lab
guest booted twice under it (one vCPU, icount: lab.ab's measuring guest),
running the native reference's copies on a devdax mapping of the NVDIMM,
each in a window of its own. The plugin models memory traffic, not time.

* the copies', fast strings', partial NT lines' and warm windows' pmem
  counts are the first-principles ones, exactly, under both fast-string
  rules (evictions within their bounds);
* a store at a known offset of the device lands at that offset of the
  NVDIMM's RAMBlock (QEMU 7.2's plugin address is a RAMBlock offset);
* the two boots (an A/A of one kernel) count the same device traffic (the
  DRAM counts hold the kernel's own work in the window too, and differ);
* base against nt-v3 (lab kernels, one boot each, memmap and demotion
  steps): the kernel's windows repeated in a boot count the same device
  lines, function by function (the A/A of the kernel's paths); the device
  reads per demoted page go from a page's worth to about none; and what
  nt-v3 leaves on the device is named by the kernel function that moves it."""
import pytest

from lab import lab as labmod
from lab.traffic import report
from lab.traffic import run as trun
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


def test_each_fast_string_method_under_both_rules(a):
    """rep movsb, movsq, stosb and stosq, each writing 1 MiB of whole lines:
    under the RFO rule every line is read first, under the no-RFO rule none;
    8 bytes off a line, the first and last lines are not whole and are read
    under both. Fails if the plugin takes a string store for an ordinary one
    (no line would be spared under the no-RFO rule), or spares a partial line."""
    lines = (1 << 20) // 64
    for label in ("string_movsb_dram_pmem", "string_movsq_dram_pmem", "string_stosb_pmem", "string_stosq_pmem"):
        w = a.window(label)
        rfo, no = w.counts["pmem"], w.counts_fast_string_no_rfo["pmem"]
        assert (rfo["fills_store"], no["fills_store"], no["string_full_lines"]) == (lines, 0, lines), (label, rfo, no)
        assert rfo["writebacks"] == no["writebacks"] == lines and rfo["stores"] == 0, (label, rfo)
    off = a.window("string_movsb_dram_pmem_misaligned").counts_fast_string_no_rfo["pmem"]
    assert (off["fills_store"], off["string_full_lines"]) == (2, lines - 2), off


def test_partial_nt_lines_write_only_their_bytes(a):
    """8 bytes by MOVNTI into each of 256 lines: 256 partial writes of 8
    bytes, nothing read. Fails if a partial write-combining buffer were
    counted as a whole line."""
    pm = a.window("nt_partial_pmem").counts["pmem"]
    assert (pm["nt_partial_writes"], pm["nt_partial_bytes"], pm["nt_line_writes"]) == (256, 2048, 0), pm
    assert pm["fills_load"] == pm["fills_store"] == 0, pm


def test_a_warm_cache_the_ordinary_copy_evicts_the_resident_set_the_nt_copy_does_not(a):
    """The pollution the NT series claims to avoid, measured: 16 MiB of the
    device resident (8 lines a set), then a 16 MiB copy. The ordinary copy
    evicts every resident line (262,144), the NT copy none but what the
    kernel's own DRAM lines in the window push out. Fails if NT stores
    allocated in the LLC (the NT copy would evict as the ordinary one does)."""
    resident = (16 << 20) // 64
    cached, nt = (a.window(w).counts for w in ("warm_cached_pmem_pmem", "warm_nt_pmem_pmem"))
    dram = lambda c: c["dram"]["fills_load"] + c["dram"]["fills_store"]     # noqa: E731
    assert resident <= cached["pmem"]["evictions"] <= resident + dram(cached), cached
    assert nt["pmem"]["evictions"] <= dram(nt) < resident // 100, nt


# -- base against nt-v3: the device's reads per page -------------------------------------
def _wanted_ab() -> bool:
    return any("test_traffic.py" in n and "nt_v3" in n for n in SELECTED)


def _run_kernel(name: str, kernel):
    if isinstance(kernel, Exception):
        return kernel
    try:
        return trun.run(POOL.tmp.mktemp(f"traffic-{name}"), kernel=kernel, steps=trun.STEPS)
    except (trun.TrafficError, labmod.LabError) as exc:
        return exc


# a lab kernel's traffic boot with both steps: under a minute here
for _variant in ("base", "nt-v3"):
    POOL.register(Boot(f"traffic-{_variant}", _wanted_ab, lambda kernel, v=_variant: _run_kernel(v, kernel),
                       prepare=lambda v=_variant: lab_kernel(v), seconds=60))


def test_the_kernels_windows_repeated_in_a_boot_count_the_same_device_lines():
    """The A/A of the kernel's paths: each traffic boot rebinds each
    namespace twice; both windows of each count the same device traffic, in
    total under both rules and function by function (callers together:
    an interrupt decides which caller a few lines go to). Demotion, run
    twice too, copies whole pages: its copy's device lines are 64 a page it
    copied, in both windows. Fails if a window opens with the LLC warm
    (seen: with tm_reset keeping the tags, the second fsdax rebind reads
    419,312 lines where the first read 524,285)."""
    for v in ("base", "nt-v3"):
        run = finished(f"traffic-{v}")
        assert trun.repeat_differences(run.output) == [], v
        for w in (w for w in run.output.windows if w.label == "demotion"):
            copied = {}
            for r in w.functions:
                if r["counts"]["pmem"].get("writebacks", 0) + r["counts"]["pmem"].get("nt_line_writes", 0) > 64:
                    copied[r["function"]] = copied.get(r["function"], 0) + r["counts"]["pmem"].get(
                        "writebacks", 0) + r["counts"]["pmem"].get("nt_line_writes", 0)
            assert len(copied) == 1, (v, copied)
            lines = next(iter(copied.values()))
            assert lines % 64 == 0 and abs(lines // 64 - w.plan["pages"]) <= 0.001 * w.plan["pages"], (v, copied)


def _device(run, label: str) -> dict[tuple[str, str, str], dict]:
    """(function, caller, class) -> its device counts in the step's first window."""
    w = next(w for w in run.output.windows if w.label == label)
    return {(r["function"], r["caller"], r["class"]): r["counts"]["pmem"] for r in w.functions
            if r["counts"]["pmem"].get("fills_load", 0) + r["counts"]["pmem"].get("fills_store", 0)
            + r["counts"]["pmem"].get("writebacks", 0) + r["counts"]["pmem"].get("nt_line_writes", 0)}


def _reads(rows: dict, pick) -> int:
    return sum(c.get("fills_load", 0) + c.get("fills_store", 0) for k, c in rows.items() if pick(*k))


def test_what_nt_v3_leaves_on_the_device_is_named_by_the_function_that_moves_it():
    """The residual the model finds, named. fsdax: nt-v3 still reads the
    struct pages of the altmap's own pfns, which memmap_init_range()
    initialises with ordinary stores through __init_single_page (the series
    leaves that path alone): the same lines as base reads there, one a pfn
    of the altmap; and the pfn info block's 64 lines read at enable. devdax:
    3 lines a 2 MiB folio read by the compound-head functions: the head's
    line, NT-written, read back by __SetPageHead and page[2]'s by
    prep_compound_head (both inlined in memmap_init_compound), and page[1],
    the tail template's source, written with ordinary stores by
    __zone_device_page_init (a read for ownership each). Fails if the plugin
    charged the lines to the wrong instruction or caller, or the symbolizer
    named them wrong (KASLR's slide not applied: no kernel function would
    match)."""
    base, nt = finished("traffic-base"), finished("traffic-nt-v3")
    fs_base, fs_nt = _device(base, "rebind_fsdax"), _device(nt, "rebind_fsdax")
    altmap = lambda f, c, k: f == "__init_single_page" and c == "memmap_init_range"       # noqa: E731
    lines = _reads(fs_nt, altmap)
    assert lines == _reads(fs_base, altmap) and 8000 < lines < 9000, (fs_nt, fs_base)
    total = _reads(fs_nt, lambda f, c, k: True)
    info_block = _reads(fs_nt, lambda f, c, k: c == "nsio_rw_bytes")
    assert info_block == 64 and total - lines - info_block <= 0.01 * total, fs_nt
    dev = _device(nt, "rebind_devdax")
    pages = next(w for w in nt.output.windows if w.label == "rebind_devdax").plan["pages"]
    folios = pages // 512
    head_and_page2 = _reads(dev, lambda f, c, k: f == "memmap_init_compound")
    page1 = _reads(dev, lambda f, c, k: f == "__zone_device_page_init")
    assert abs(head_and_page2 - 2 * folios) <= 2 and abs(page1 - folios) <= 2, (folios, dev)
    assert abs(head_and_page2 + page1 - 3 * folios) <= 2, (folios, dev)
    assert _reads(dev, altmap) == lines


def test_base_against_nt_v3_device_reads_per_demoted_page_go_to_about_none():
    base, nt = (report.per_page(trun.summary(finished(f"traffic-{v}"))) for v in ("base", "nt-v3"))
    page = 4096
    # base demotes with cached stores: each destination line is read from the device before it is written
    assert abs(base["demotion"]["device_read_per_page"] - page) <= 0.01 * page, base["demotion"]
    assert nt["demotion"]["device_read_per_page"] <= 0.01 * page, nt["demotion"]
    for side in (base, nt):
        assert abs(side["demotion"]["device_written_per_page"] - page) <= 0.01 * page, side["demotion"]
    # base's copy is a fast string: under the no-RFO rule it reads no line it writes whole
    assert base["demotion"]["fast_string_no_rfo"]["device_read_per_page"] <= 0.01 * page, base["demotion"]
    # the template series' memmap init on the device (fsdax -M dev): a struct page's line read, then none
    assert base["rebind_fsdax"]["device_read_per_page"] >= 64 > 4 >= nt["rebind_fsdax"]["device_read_per_page"]


def test_lab_ab_reports_carry_base_against_nt_v3_traffic(tmp_path):
    """What lab.ab adds to its reports (lab/traffic/report.py, rendered by
    nttrace.ab.formats), from these two boots (the traffic boot lab.ab makes
    a kernel: the memmap and demotion steps, one vCPU, icount), set beside
    the recorded A/B of the instruction figures: every report carries the
    device bytes per page and who moved them by function, the memmap init
    counts the same device bytes in both of a boot's rebinds (spread zero),
    and demotion's repeat is within 1% of a page."""
    import json
    from conftest import REPO
    from lab import ab as lab_ab
    runs = {v: trun.summary(finished(f"traffic-{v}")) for v in ("base", "nt-v3")}
    t = report.figures(runs, report.windows_for(["memmap_fsdax", "memmap_devdax", "demotion"]))
    assert report.failed(t) == {} and t["model"] == runs["base"]["model"]
    recorded = REPO / "tests" / "fixtures" / "recorded" / "ab" / "ab-base-nt-v3"
    written = lab_ab.write_ab(sorted(recorded.glob("A/boot-*/*.report.json")),
                              sorted(recorded.glob("B/boot-*/*.report.json")), tmp_path, 10.0,
                              [report.ab_section(t, ["base", "nt-v3"])])
    doc = json.loads(written["json"].read_text())
    for v in ("base", "nt-v3"):
        k = doc["traffic"]["kernels"][v]
        assert k["per_page"] == report.per_page(runs[v]), v
        assert k["repeat_spread_bytes_per_page"]["rebind_fsdax"] == 0, k
        assert k["repeat_spread_bytes_per_page"]["rebind_devdax"] == 0, k
        assert k["repeat_spread_bytes_per_page"]["demotion"] <= 0.01 * 4096, k
        assert k["functions"]["rebind_fsdax"], v
    md, page, text = (written[f].read_text() for f in ("markdown", "html", "text"))
    for out in (md, page, text):
        assert "Modelled memory traffic (not time)" in out and "no statistics are run" in out
        assert "Who moved the lines: memmap init, fsdax -M dev" in out and "memmap_init_range" in out
    base, nt = (report.per_page(runs[v])["demotion"]["device_read_per_page"] for v in ("base", "nt-v3"))
    assert f"| demotion by memory.reclaim | device bytes read / demoted page | {base} | {nt} |" in md
    assert base > 4000 > 40 > nt
