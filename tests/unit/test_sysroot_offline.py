# SPDX-License-Identifier: Apache-2.0
"""`validate --sysroot DIR` judges a copy on the files it holds: what the copy
lacks is said as the copy's lack (never the machine's, never with advice for
this host), and the machine's kind comes only from the copy's own
proc/cpuinfo (no CPUID is read of a copy). The copy docs/validate.md tells
how to make is held by tests/live/test_sysroot_copy.py."""
import json
import shutil

from conftest import run_nttrace
from sysroot_builder import build

LIVE_ONLY_WORDS = ("CPUID reports no hypervisor", "make tracefs", "in this kernel", "kernel built without",
                   "libnvdimm", "/sys/bus")


def test_a_btf_only_copy_is_judged_on_what_it_holds(tmp_path):
    """A copy of BTF and kallsyms only. Fails if the header or a line claims
    a machine kind no file of the copy shows (bare-metal, "CPUID reports no
    hypervisor"), advises this host's fix (`make tracefs`), words a missing
    file as something the kernel or host lacks, or fails env.core for files
    the copy was not given."""
    root = build(tmp_path / "copy", "v3")
    shutil.rmtree(root / "sys/kernel/tracing")
    proc = run_nttrace("validate", "--sysroot", str(root))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"(offline: a copy under {root} that does not say what machine)" in out.splitlines()[0]
    assert not [w for w in LIVE_ONLY_WORDS if w in out], [w for w in LIVE_ONLY_WORDS if w in out]
    core = next(line for line in out.splitlines() if " env.core " in line)
    assert core.startswith("SKIP  env.core") and "the copy holds neither sys/kernel/tracing/events" in core
    assert any(line.startswith("SKIP  env.pmem ") and "pmem unavailable: the copy holds no sys/bus/nd/devices" in line
               for line in out.splitlines())
    machine = json.loads(run_nttrace("validate", "--json", "--sysroot", str(root)).stdout)["machine"]
    assert machine["kind"] == "unknown" and "the copy holds no proc/cpuinfo" in machine["evidence"]


def test_the_machine_kind_of_a_copy_is_its_cpuinfo_flag_and_no_more(tmp_path):
    """The copy's proc/cpuinfo decides: no hypervisor flag is bare metal, the
    flag a guest ("vm", never "emulated": a copy has no CPUID signature to
    tell QEMU's TCG from KVM). Fails where a kind is claimed from no file,
    or TCG is claimed from DMI's "QEMU" alone."""
    kinds = {}
    for name, flags in (("metal", "fpu sse2"), ("guest", "fpu sse2 hypervisor")):
        root = build(tmp_path / name, "none")
        (root / "proc/cpuinfo").write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n")
        (root / "sys/class/dmi/id").mkdir(parents=True)
        (root / "sys/class/dmi/id/sys_vendor").write_text("QEMU\n")
        report = json.loads(run_nttrace("validate", "--json", "--sysroot", str(root), check=True).stdout)
        kinds[name] = report["machine"]
    assert kinds["metal"]["kind"] == "bare-metal"
    assert kinds["metal"]["evidence"] == "the copy's proc/cpuinfo has no hypervisor flag"
    assert kinds["guest"]["kind"] == "vm" and kinds["guest"]["hypervisor"] == "QEMU"
    assert "KVM and TCG look alike" in kinds["guest"]["evidence"]


def test_a_copy_without_btf_or_formats_is_an_input_error_pointing_at_the_files(tmp_path):
    """Fails if an empty copy's error does not say where the list of files
    a copy needs is."""
    (tmp_path / "empty").mkdir()
    proc = run_nttrace("validate", "--sysroot", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "which files a copy needs" in proc.stderr
