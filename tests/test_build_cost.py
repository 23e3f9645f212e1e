"""lab/build_cost.py's per-object timing: its compiler wrapper around a real
gcc, and how the compiles it logged are counted per subsystem."""
import subprocess
from pathlib import Path

import pytest

from lab.build_cost import CC_WRAPPER, per_object, subsystem


def test_subsystems_are_two_levels_deep_three_under_arch_and_deeper_where_listed():
    assert subsystem("mm/slub.o") == "mm"
    assert subsystem("fs/ext4/super.o") == "fs/ext4"
    assert subsystem("fs/ext4/sub/x.o") == "fs/ext4"
    assert subsystem("arch/x86/kernel/setup.o") == "arch/x86/kernel"
    assert subsystem("arch/x86/kernel/cpu/amd.o") == "arch/x86/kernel/cpu"
    assert subsystem("drivers/acpi/acpica/exfield.o") == "drivers/acpi/acpica"
    assert subsystem("drivers/acpi/nfit/core.o") == "drivers/acpi"
    assert subsystem(".vmlinux.export.o") == "."


def test_the_wrapper_logs_each_object_it_compiles_and_keeps_the_compilers_exit(tmp_path):
    wrapper = tmp_path / "cc-timed"
    wrapper.write_text(CC_WRAPPER)
    wrapper.chmod(0o755)
    log = tmp_path / "compiles.log"
    (tmp_path / "mm").mkdir()
    (tmp_path / "a.c").write_text("int a(int x) { return x * 3; }\n")
    (tmp_path / "b.c").write_text("int b(void) { return undeclared; }\n")
    ok = subprocess.run([wrapper, log, "gcc", "-O2", "-c", "a.c", "-o", "mm/a.o"], cwd=tmp_path)
    bad = subprocess.run([wrapper, log, "gcc", "-c", "b.c", "-o", "mm/b.o"], cwd=tmp_path, capture_output=True)
    version = subprocess.run([wrapper, log, "gcc", "--version"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0 and (tmp_path / "mm/a.o").exists()
    assert bad.returncode != 0 and b"undeclared" in bad.stderr        # the compiler's error, as make needs it
    assert version.returncode == 0 and "gcc" in version.stdout         # Kbuild reads the version through CC
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and [line.split()[2] for line in lines] == ["mm/a.o", "mm/b.o"]
    report = per_object(log)
    assert report["compiles"] == 2 and report["subsystems"][0]["path"] == "mm"
    spans = [float(end) - float(start) for start, end, _obj in map(str.split, lines)]
    assert all(0 < span < 30 for span in spans)         # each compile's own start and end
    assert report["subsystems"][0]["objects"] == 2
    assert report["compile_cpu_s"] == round(sum(spans), 1)     # rounded: two tiny compiles can sum under 0.05 s
    assert [o["object"] for o in report["costliest"]] == [o for _s, o in sorted(zip(spans, ["mm/a.o", "mm/b.o"]),
                                                                                reverse=True)]


def test_a_build_without_per_object_timing_reports_its_figures(tmp_path, monkeypatch):
    """measure() without --per-object (as `--configs A,B` runs it): the
    figures of a build, no per-object part and no compile log asked for.
    The kernel's configure and make are stood in for by a shell that writes
    what kbuild leaves (a session's 10-minute build was lost to this path)."""
    from dataclasses import replace

    from lab import build_cost, kernel_build as kb

    def configure(src, build, log, name, config):
        (build / ".config").write_text("CONFIG_DEBUG_INFO=y\nCONFIG_DEBUG_INFO_BTF=y\nCONFIG_X=y\n")
    monkeypatch.setattr(kb, "configure", configure)
    monkeypatch.setattr(build_cost, "btf_types_sha256", lambda vmlinux: f"types of {vmlinux.name}")
    monkeypatch.setattr(kb, "make_command", lambda build, config, jobs: [
        "sh", "-c", f"cd {build} && mkdir -p mm arch/x86/boot && : > mm/a.o && : > mm/b.o && echo '  CC      mm/a.o' "
                    f"&& echo '  LD      vmlinux.o' && echo '  BTF     .btf.vmlinux.bin.o' && : > vmlinux "
                    f"&& : > arch/x86/boot/bzImage"])
    r = build_cost.measure(replace(kb.LAB_CONFIG, name="stand-in"), tmp_path, tmp_path / "cost", 2)
    assert r["objects"] == 2 and r["options_y"] == 3 and r["btf_lines"] == 1 and r["debug_info"] and r["btf"]
    assert "per_object" not in r and not (tmp_path / "cost" / "stand-in" / "compiles.log").exists()
    assert r["btf_types_sha256"] == "types of vmlinux"


@pytest.mark.needs("kernel-build", "bpftool")
def test_the_btf_hash_ignores_type_ids_and_sees_a_changed_member(tmp_path):
    """btf_types_sha256 tells two builds' BTF apart by what it describes:
    the same types encoded in another order (other ids, as pahole's threads
    give) hash the same; one member's type changed hashes differently.
    Real BTF: gcc's DWARF turned into BTF by pahole, read by bpftool."""
    from lab import build_cost

    def btf_of(name: str, source: str) -> Path:
        c, o = tmp_path / f"{name}.c", tmp_path / f"{name}.o"
        c.write_text(source)
        subprocess.run(["gcc", "-g", "-c", "-o", str(o), str(c)], check=True)
        subprocess.run(["pahole", "-J", str(o)], check=True, capture_output=True)
        return o

    a = "struct a { int x; long y; };\n"
    b = "enum e { E0, E1 = 5 };\nstruct b { struct a *p; enum e k; };\n"
    use = "int f(struct a *a, struct b *b) { return a->x + b->k; }\n"
    first = btf_of("first", a + b + use)
    reordered = btf_of("reordered", "struct a;\n" + b + a + use)
    changed = btf_of("changed", a.replace("long y", "int y") + b + use)
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(first)], capture_output=True, text=True).stdout
    assert "STRUCT 'b'" in dump and "FUNC 'f'" in dump, dump    # the real thing was read
    assert dump != subprocess.run(["bpftool", "btf", "dump", "file", str(reordered)], capture_output=True,
                                  text=True).stdout               # the ids do differ
    assert build_cost.btf_types_sha256(first) == build_cost.btf_types_sha256(reordered)
    assert build_cost.btf_types_sha256(first) != build_cost.btf_types_sha256(changed)


def test_each_requirement_fragment_switches_off_only_what_lab_config_switches_on():
    """The requirement fragments measure what lab.config's needs cost: each
    line that switches an option off must name one lab.config switches on,
    so no fragment measures the removal of something the lab never built."""
    from lab import build_cost, kernel_build as kb
    lab_on = {name for name, value in kb.config_values(kb.CONFIG_FRAGMENT.read_text()).items() if value == "y"}
    for fragment in (*build_cost.REQUIREMENTS, *build_cost.PROBE_SUPPORT_PARTS):
        off = {name for name, value in kb.config_values(fragment.read_text()).items() if value == "n"}
        assert off and off <= lab_on, (fragment.name, sorted(off - lab_on))
    assert build_cost.configs()["lab-machine-only"].fragments == (kb.CONFIG_FRAGMENT, *build_cost.REQUIREMENTS)
