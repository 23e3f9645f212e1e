"""Program generation for every probe: the C text with this kernel's
offsets, compiled by bcc and loaded through the verifier even where the
attach point (kprobe, fentry, page_ref tracepoint) is missing."""
import pytest
from pathlib import Path

from conftest import one_line_error, run_nttrace
from nttrace.probes import capabilities
from nttrace.kernel import metadata as kernel_meta
from nttrace.probes.capabilities import Capability
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe, infer_template_path
from nttrace.probes.migrate import MigrateProbe
from nttrace.probes.page_ref import PageRefProbe
from nttrace.kernel.sysroot import Sysroot
from nttrace.kernel.tracefs import read_format


@pytest.fixture(scope="module")
def meta():
    return kernel_meta.load(Sysroot("/"))


def with_kprobes(caps):
    """A capability report that claims kprobes, to generate kprobe programs."""
    out = dict(caps)
    out["kprobe"] = Capability(True, "assumed for program generation")
    out["fentry"] = Capability(False, "not used")
    for sym in ("memmap_init_zone_device", "folio_copy", "folio_mc_copy"):
        out[f"ksym:{sym}"] = Capability(True, "assumed")
    return out


@pytest.mark.needs("btf", "tracepoint")
def test_migrate_offsets_come_from_the_format_files(meta):
    caps = capabilities.report(live_probes=False)
    p = MigrateProbe(meta, caps)
    d = p.defines()
    fmt = read_format(Sysroot("/").tracefs(), "migrate", "mm_migrate_pages")   # not a probe: a tracepoint system
    assert d["NTTRACE_DONE_SUCCEEDED"] == fmt.fields["succeeded"].offset
    assert d["NTTRACE_DONE_MODE"] == fmt.fields["mode"].offset
    assert "#define NTTRACE_DONE_REASON" in p.program_text()


@pytest.mark.needs("root", "btf", "bcc")
@pytest.mark.parametrize("via", ["kprobe", "fentry_text"])
def test_memmap_program_uses_btf_offsets_and_loads(meta, via):
    caps = with_kprobes(capabilities.report())
    p = MemmapProbe(meta, caps, {"page_ref_sets": False})
    assert p.availability().ok and p.availability().attach_via == "kprobe"
    p.via = "kprobe" if via == "kprobe" else "fentry"
    d = p.defines()
    assert d["NTTRACE_PGMAP_TYPE"] == meta.offsets["dev_pagemap.type"]
    assert d["NTTRACE_PGMAP_VMEMMAP_SHIFT"] == meta.offsets["dev_pagemap.vmemmap_shift"]
    assert d["NTTRACE_ZONE_NODE"] == meta.offsets.get("zone.node", -1)
    text = p.program_text()
    if via == "kprobe":
        # Load (compile + verify) without attaching: kprobe programs load on
        # kernels without kprobe events.
        p.load()
        assert p.bpf.load_func("nttrace_memmap_entry", p.bpf.KPROBE).fd > 0
        p.detach()
    else:
        assert "KFUNC_PROBE(memmap_init_zone_device" in text and "NTTRACE_VIA_FENTRY 1" in text


@pytest.mark.needs("root", "btf", "bcc")
def test_copy_program_reads_folio_order_from_btf(meta):
    import re
    from nttrace.probes import copy
    caps = with_kprobes(capabilities.report())
    p = CopyProbe(meta, caps)
    # the routines this kernel has, by its own symbol table (an NT kernel adds folio_mc_copy_nt)
    kallsyms = Path("/proc/kallsyms").read_text()
    expected = [r for r in copy.ROUTINES if re.search(rf" {r[0]}$", kallsyms, re.M)]
    assert p.present == expected and expected
    p.via = "kprobe"
    d = p.defines()
    assert d["NTTRACE_PG_HEAD"] >= 0 and d["NTTRACE_FOLIO_FLAGS"] == 0
    assert d["NTTRACE_COPY_ROUTINES"] == " ".join(
        f"COPY_{kind}_KPROBE({i}, {sym})" for i, (sym, kind, _nt) in enumerate(expected))
    p.load()
    for sym, _kind, _nt in expected:
        assert p.bpf.load_func(f"nttrace_copy_{sym}", p.bpf.KPROBE).fd > 0
    p.detach()


@pytest.mark.needs("btf")
def test_copy_routines_without_btf_go_by_kprobe_beside_fentry(meta):
    # A routine BTF has no FUNC for would fail the fentry program's load and
    # take the others with it. It gets a kprobe program of its own instead.
    # copy_mc_page_nt where the running kernel lacks it (an RFC v3 kernel's
    # BTF describes it), else a name no kernel has.
    caps = with_kprobes(capabilities.report())
    p = CopyProbe(meta, caps)
    absent = next(s for s in ("copy_mc_page_nt", "nttrace_no_such_routine") if not meta.btf.has_func(s))
    p.present = [("folio_mc_copy", "FOLIO", False), (absent, "PAGE", True)]
    p.via = "fentry"
    assert meta.btf.has_func("folio_mc_copy")
    assert p.defines()["NTTRACE_COPY_ROUTINES"] == \
        f"COPY_FOLIO_FENTRY(0, folio_mc_copy) COPY_PAGE_KPROBE(1, {absent})"
    assert p.no_fentry == {absent: "no BTF"}


@pytest.mark.needs("btf")
def test_copy_routines_ftrace_cannot_hook_go_by_kprobe_beside_fentry(meta, tmp_path):
    # RFC v3's copy_mc_page_nt is assembly declared in C: BTF describes it,
    # but it has no __fentry__ call, so the trampoline cannot attach (seen on
    # the lab's nt-v3 kernel: "Failed to attach BPF to entry kernel func",
    # the whole fentry program lost). ftrace's list of the functions it can
    # hook decides; a module's entries carry " [module]".
    tracing = tmp_path / "sys/kernel/tracing"
    (tracing / "events").mkdir(parents=True)
    (tracing / "available_filter_functions").write_text("folio_copy\nfolio_mc_copy [some_module]\n")
    p = CopyProbe(meta, with_kprobes(capabilities.report()), sysroot=Sysroot(str(tmp_path)))
    p.present = [("folio_copy", "FOLIO", False), ("folio_mc_copy", "FOLIO", False), ("vfs_read", "PAGE", True)]
    p.via = "fentry"
    assert meta.btf.has_func("vfs_read")
    assert p.defines()["NTTRACE_COPY_ROUTINES"] == \
        "COPY_FOLIO_FENTRY(0, folio_copy) COPY_FOLIO_FENTRY(1, folio_mc_copy) COPY_PAGE_KPROBE(2, vfs_read)"
    assert p.no_fentry == {"vfs_read": "no ftrace site (not in available_filter_functions)"}
    # an unreadable list (this host refuses it even to root) leaves BTF to decide
    (tracing / "available_filter_functions").unlink()
    assert p.defines()["NTTRACE_COPY_ROUTINES"].endswith("COPY_PAGE_FENTRY(2, vfs_read)") and p.no_fentry == {}


@pytest.mark.needs("root", "bcc")
def test_page_ref_program_loads(meta):
    caps = capabilities.report()
    p = PageRefProbe(meta, caps)
    p.load()
    assert p.bpf.load_func("nttrace_page_ref_set", p.bpf.TRACEPOINT).fd > 0
    p.detach()
    if not caps["tracepoint:page_ref:page_ref_set"].available:
        av = p.availability()
        assert not av.ok and "CONFIG_DEBUG_PAGE_REF" in av.reason


@pytest.mark.needs("root", "btf", "bcc")
def test_memmap_with_page_ref_inference_loads(meta):
    caps = with_kprobes(capabilities.report())
    caps["tracepoint:page_ref:page_ref_set"] = Capability(True, "assumed")
    p = MemmapProbe(meta, caps, {"page_ref_sets": True})
    p.via = "kprobe"
    assert "NTTRACE_PAGE_REF 1" in p.program_text()
    p.load()
    assert p.bpf.load_func("nttrace_memmap_page_ref_set", p.bpf.TRACEPOINT).fd > 0
    p.detach()


@pytest.mark.parametrize("sets,pages,expected", [(2048, 1024, "slow"), (1024, 1024, "slow"), (2, 262144, "template"),
                                                 (4, 512, "template"), (300, 1024, "mixed"), (0, 0, "unknown")])
def test_template_path_inference(sets, pages, expected):
    assert infer_template_path(sets, pages) == expected


@pytest.mark.needs("root", "bcc")
def test_ebpf_flag_prints_programs():
    proc = run_nttrace("trace", "--ebpf", "--probes", ",".join((MigrateProbe.name, MemmapProbe.name, CopyProbe.name, PageRefProbe.name)))
    assert proc.returncode == 0, proc.stderr
    assert "nttrace_migrate_start" in proc.stdout
    assert "/* ===== memmap ===== */" in proc.stdout


@pytest.mark.needs("root")
def test_unknown_probe_is_a_usage_error():
    proc = run_nttrace("trace", "--probes", "migrate,bogus")
    assert proc.returncode == 2
    assert "bogus" in one_line_error(proc)


@pytest.mark.needs("root", "btf", "bcc")
def test_migrate_fn_program_takes_argument_positions_from_btf(meta):
    from nttrace.kernel.btf import Btf
    from nttrace.probes.migrate_fn import MigrateFunctionProbe
    caps = with_kprobes(capabilities.report())
    caps["ksym:migrate_pages"] = Capability(True, "assumed")
    p = MigrateFunctionProbe(meta, caps)
    params = Btf.from_file("/sys/kernel/btf/vmlinux").func_params("migrate_pages")
    assert p.availability().ok
    p.via = "kprobe"
    d = p.defines()
    assert d["NTTRACE_FN_MODE_REG(ctx)"] == f"PT_REGS_PARM{params.index('mode') + 1}(ctx)"
    assert d["NTTRACE_FN_REASON_REG(ctx)"] == f"PT_REGS_PARM{params.index('reason') + 1}(ctx)"
    p.load()
    assert p.bpf.load_func("nttrace_migrate_fn_entry", p.bpf.KPROBE).fd > 0
    assert p.bpf.load_func("nttrace_migrate_fn_return", p.bpf.KPROBE).fd > 0
    p.detach()
    p.via = "fentry"
    text = p.program_text()
    assert "KFUNC_PROBE(migrate_pages, NTTRACE_FN_PARAMS)" in text
    assert "#define NTTRACE_FN_PARAMS " + ", ".join(f"u64 {x}" for x in params) in text


@pytest.mark.needs("btf", "tracepoint")
def test_each_probe_hands_over_exactly_the_state_it_declares(meta):
    """The loader sends each probe's declared handover attributes, nothing
    implicit: every declared name is carried (as JSON), an undeclared one is
    refused on the daemon's side."""
    import json
    from nttrace.probes import PROBES
    caps = with_kprobes(capabilities.report(live_probes=False))
    for name, cls in PROBES.items():
        probe = cls(meta, caps, cls.options_for([name], False))
        state = probe.state()
        assert list(state) == list(cls.handover), name
        json.dumps(state)
        twin = cls(meta, caps, cls.options_for([name], False))
        twin.restore(json.loads(json.dumps(state)))
        assert all(getattr(twin, k) == json.loads(json.dumps(v)) for k, v in state.items()), name
        with pytest.raises(ValueError, match="undeclared"):
            twin.restore({"bpf": None})
    # a declared attribute JSON cannot carry is said at once
    probe = PROBES[MigrateProbe.name](meta, caps)
    probe.via = object()
    with pytest.raises(TypeError, match="handover attribute 'via'"):
        probe.state()


# struct folio's head, as the two layouts put it (byte offsets on x86-64):
# 6.1 keeps the order in _folio_order beside a _flags_1 that is the first
# tail page's flags; 6.6 and later keep it in _flags_1's low byte.
FOLIO_6_1 = [("flags", 0), ("_flags_1", 64), ("_head_1", 72), ("_folio_dtor", 80), ("_folio_order", 81)]
FOLIO_6_18 = [("flags", 0), ("_flags_1", 64), ("_head_1", 72), ("_large_mapcount", 80)]


@pytest.mark.parametrize("members,order_at", [(FOLIO_6_1, 81), (FOLIO_6_18, 64)], ids=["6.1", "6.18"])
def test_folio_order_is_read_where_the_kernels_folio_keeps_it(members, order_at):
    from sysroot_builder import BtfWriter
    from nttrace.kernel.btf import Btf
    from nttrace.probes.copy import folio_layout
    w = BtfWriter()
    u64, u8 = w.int_type("long unsigned int", 8), w.int_type("unsigned char", 1)
    w.enum("pageflags", {"PG_locked": 0, "PG_head": 6})
    w.struct("folio", 128, [(n, u8 if n.startswith("_folio") else u64, off) for n, off in members])
    assert folio_layout(Btf(w.bytes())) == {"NTTRACE_FOLIO_FLAGS": 0, "NTTRACE_PG_HEAD": 6, "NTTRACE_FOLIO_ORDER": order_at}
