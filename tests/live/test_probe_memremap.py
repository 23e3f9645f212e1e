# SPDX-License-Identifier: Apache-2.0
"""The memremap probe (memremap_pages(), tracer/probes/memremap.py). On this
host: its program generated from the running kernel's BTF and loaded
through the verifier (kprobes and fentry cannot attach here), its workload's
refusals (its declarations and the ground truth read from test_hmm's own
lines: tests/unit/test_probe_readings.py). In the lab
(tests/test_lab_kernels.py boots base and nt-v3 with CONFIG_TEST_HMM=m): the
probe exercised for real, its pages against the driver's count."""
import pytest

from nttrace.kernel import metadata as kernel_meta
from nttrace.kernel.btf import Btf
from nttrace.kernel.sysroot import Sysroot
from nttrace.capabilities import report as capabilities
from nttrace.capabilities.report import Capability
from nttrace.probes.memremap import MemremapProbe, hmm_loads


@pytest.fixture(scope="module")
def meta():
    return kernel_meta.load(Sysroot("/"))


@pytest.mark.needs("btf")
def test_the_dev_pagemap_offsets_are_the_running_kernels():
    btf = Btf.from_file("/sys/kernel/btf/vmlinux")
    p = MemremapProbe(kernel_meta.load(Sysroot("/")), capabilities.report(live_probes=False))
    off = p.offsets()
    assert off["NTTRACE_PGMAP_TYPE"] == btf.member_offset("dev_pagemap", "type")
    # ranges[] shares its start with the single `range` of the anonymous union
    assert off["NTTRACE_PGMAP_RANGES"] == btf.member_offset("dev_pagemap", "range.start")
    assert off["NTTRACE_PGMAP_NR_RANGE"] == btf.member_offset("dev_pagemap", "nr_range")


@pytest.mark.needs("root", "btf", "bcc")
@pytest.mark.parametrize("via", ["kprobe", "fentry"])
def test_the_program_loads_through_the_verifier(meta, via):
    caps = dict(capabilities.report())
    caps["kprobe"] = Capability(True, "assumed for program generation")
    caps["fentry"] = Capability(False, "not used")
    caps["ksym:memremap_pages"] = Capability(True, "assumed")
    p = MemremapProbe(meta, caps)
    assert p.availability().ok
    p.via = via
    text = p.program_text()
    if via == "fentry":
        assert "KFUNC_PROBE(memremap_pages" in text and "NTTRACE_VIA_FENTRY 1" in text
        return
    p.load()
    try:
        assert p.bpf.load_func("nttrace_memremap_entry", p.bpf.KPROBE).fd > 0
        assert p.bpf.load_func("nttrace_memremap_return", p.bpf.KPROBE).fd > 0
    finally:
        p.detach()


@pytest.mark.needs("root")
def test_the_workload_refuses_where_there_is_no_test_hmm(monkeypatch):
    """This host's kernel has no test_hmm: one clear refusal, nothing loaded."""
    import subprocess
    from nttrace.errors import UsageError
    if subprocess.run(["modprobe", "-n", "test_hmm"], capture_output=True).returncode == 0:
        pytest.skip("this kernel has test_hmm: the refusal is for kernels without it")
    with pytest.raises(UsageError, match="no test_hmm module for this kernel"):
        hmm_loads(1)
