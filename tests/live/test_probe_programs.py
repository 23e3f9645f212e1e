# SPDX-License-Identifier: Apache-2.0
"""Program generation for every probe: the C text with this kernel's
offsets, compiled by bcc and loaded through the verifier even where the
attach point (kprobe, fentry, page_ref tracepoint) is missing."""
import pytest
from pathlib import Path

from conftest import one_line_error, run_nttrace
from nttrace.capabilities import report as capabilities
from nttrace.kernel import metadata as kernel_meta
from nttrace.capabilities.report import Capability
from nttrace.probes.copy import CopyProbe
from nttrace.probes.memmap import MemmapProbe
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
    fmt = read_format(Sysroot("/").tracefs(), "migrate", "mm_migrate_pages")
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


class KernelBtf:
    """The running kernel's BTF as bpftool dumps it (`format raw`): the
    kernel's own tool, not nttrace's reader, for the facts the programs'
    defines must agree with."""

    def __init__(self):
        import re
        import subprocess
        out = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "raw"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
        self.types: dict[int, tuple[str, str, str, list[tuple[str, str]]]] = {}
        self.by_name: dict[tuple[str, str], int] = {}
        for line in out.splitlines():
            m = re.match(r"\[(\d+)\] (\w+) '([^']*)'(.*)", line)
            if m:
                tid, kind, name, rest = int(m[1]), m[2], m[3], m[4]
                self.types[tid] = (kind, name, rest, [])
                self.by_name.setdefault((kind, name), tid)
            elif line.startswith("\t'"):
                name, rest = re.match(r"\t'([^']*)'(.*)", line).groups()
                self.types[tid][3].append((name, rest))

    @staticmethod
    def _attr(rest: str, key: str) -> int:
        import re
        return int(re.search(rf"\b{key}=(-?\d+)", rest)[1])

    def enum_value(self, enum: str, member: str) -> int:
        return next(self._attr(r, "val") for n, r in self.types[self.by_name[("ENUM", enum)]][3] if n == member)

    def member_offset(self, struct: str, member: str) -> int:
        """Byte offset of `member` in `struct`, through its anonymous unions and structs."""
        todo = [(self.by_name[("STRUCT", struct)], 0)]
        while todo:
            tid, base = todo.pop()
            for name, rest in self.types[tid][3]:
                bits = base + self._attr(rest, "bits_offset")
                if name == member:
                    return bits // 8
                if name == "(anon)":
                    todo.append((self._attr(rest, "type_id"), bits))
        raise KeyError(member)

    def params(self, func: str) -> list[tuple[str, str]]:
        """(name, the struct its pointer points at, or its kind) of each parameter."""
        proto = self._attr(self.types[self.by_name[("FUNC", func)]][2], "type_id")
        out = []
        for name, rest in self.types[proto][3]:
            tid, pointer = self._attr(rest, "type_id"), False
            while self.types[tid][0] in ("PTR", "CONST", "VOLATILE", "TYPEDEF", "RESTRICT"):
                pointer |= self.types[tid][0] == "PTR"
                tid = self._attr(self.types[tid][2], "type_id")
            kind, tname = self.types[tid][:2]
            out.append((name, f"struct {tname} *" if pointer and kind == "STRUCT" else kind))
        return out


@pytest.mark.needs("root", "btf", "bcc", "bpftool")
def test_copy_program_reads_folio_order_from_btf(meta):
    import re
    from nttrace.probes import copy
    btf = KernelBtf()
    caps = with_kprobes(capabilities.report())
    p = CopyProbe(meta, caps)
    # the routines this kernel has, by its own symbol table (an NT kernel adds folio_mc_copy_nt)
    kallsyms = Path("/proc/kallsyms").read_text()
    expected = [r[0] for r in copy.ROUTINES if re.search(rf" {r[0]}$", kallsyms, re.M)]
    assert [sym for sym, _kind, _nt in p.present] == expected and expected
    p.via = "kprobe"
    d = p.defines()
    assert d["NTTRACE_PG_HEAD"] == btf.enum_value("pageflags", "PG_head")
    assert d["NTTRACE_FOLIO_FLAGS"] == btf.member_offset("folio", "flags")
    # one kprobe program a routine, in order, copying what the kernel's own declaration passes it
    routines = re.findall(r"COPY_(FOLIO|PAGE)_KPROBE\((\d+), (\w+)\)", d["NTTRACE_COPY_ROUTINES"])
    assert [(int(i), sym) for _kind, i, sym in routines] == list(enumerate(expected))
    for kind, _i, sym in routines:
        assert btf.params(sym)[0][1] == f"struct {kind.lower()} *", (sym, btf.params(sym))
    p.load()
    for sym in expected:
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


@pytest.mark.needs("root", "btf", "bcc", "bpftool")
def test_migrate_fn_program_takes_argument_positions_from_btf(meta):
    from nttrace.probes.migrate_fn import MigrateFunctionProbe
    caps = with_kprobes(capabilities.report())
    caps["ksym:migrate_pages"] = Capability(True, "assumed")
    p = MigrateFunctionProbe(meta, caps)
    # the kernel's declaration of migrate_pages() as bpftool reads it: where mode and reason are passed
    params = [name for name, _type in KernelBtf().params("migrate_pages")]
    assert "mode" in params and "reason" in params
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


def _fingerprint(probe) -> dict[str, str]:
    """Each attribute of a probe by value (JSON) where it has one, else by identity."""
    import json
    out = {}
    for k, v in vars(probe).items():
        try:
            out[k] = json.dumps(v, sort_keys=True)
        except (TypeError, ValueError):
            out[k] = f"object {id(v)}"
    return out


@pytest.mark.needs("btf", "tracepoint")
def test_each_probe_hands_over_what_its_loader_side_computed(meta):
    """The loader works a probe out (its availability, how it attaches, its
    program's defines) and hands it over; the daemon's copy never does. So
    every attribute that working-out changes must be declared in `handover`,
    and a copy restored from the state as the socket carries it (JSON) must
    answer as the loader's probe does: its notes, its fallback note, and how
    it reaches each kernel function. Every probe, traced all together."""
    import json
    from nttrace.probes import PROBES
    caps = with_kprobes(capabilities.report(live_probes=False))
    names = list(PROBES)
    for name, cls in PROBES.items():
        probe = cls(meta, caps, cls.options_for(names, False))
        before = _fingerprint(probe)
        av = probe.availability()
        probe.via = av.attach_via
        probe.defines()
        after = _fingerprint(probe)
        computed = {k for k in after if before.get(k) != after[k]}
        assert computed <= set(cls.handover), f"{name} computes {sorted(computed - set(cls.handover))} on the " \
                                             "loader's side but does not hand it over"
        twin = cls(meta, caps, cls.options_for(names, False))
        twin.restore(json.loads(json.dumps(probe.state())))
        assert {k: after[k] for k in computed} == {k: _fingerprint(twin)[k] for k in computed}, name
        assert twin.notes() == probe.notes() and twin.fallback_note() == probe.fallback_note(), name
        assert [twin.by_kprobe(f) for f in cls.functions] == [probe.by_kprobe(f) for f in cls.functions], name
        with pytest.raises(ValueError, match="undeclared"):
            twin.restore({"bpf": None})
    # a declared attribute JSON cannot carry is said at once
    probe = PROBES[MigrateProbe.name](meta, caps)
    probe.via = object()
    with pytest.raises(TypeError, match="handover attribute 'via'"):
        probe.state()
