# SPDX-License-Identifier: Apache-2.0
"""The traffic report's symbolizer (lab/traffic/symbols.py): guest
instruction addresses named by the kernel function holding them, from the
guest's kallsyms or from the kernel build's System.map slid by KASLR's
offset, on listings in the kernel's own formats."""
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))
from lab.traffic import symbols  # noqa: E402

# A System.map as the kernel's link writes it (core kernel only), and a
# KASLR boot's /proc/kallsyms of the same kernel: every address slid by
# 0x2a00000, data symbols among the text, a module loaded.
SYSTEM_MAP = """\
0000000000000000 D __per_cpu_start
ffffffff81000000 T _text
ffffffff81000000 T startup_64
ffffffff81001000 T _stext
ffffffff81234500 t __init_single_page
ffffffff81234600 T memmap_init_range
ffffffff81234900 t memmap_init_compound.constprop.0
ffffffff81234a00 t prep_compound_head.isra.0
ffffffff81234b00 T memmap_init_zone_device
ffffffff81234c00 t memmap_init_zone_device.cold
ffffffff81300000 W memcpy
ffffffff81400000 T _etext
ffffffff82000000 D init_task
"""
SLIDE = 0x2a00000


def kallsyms(slide: int = SLIDE, hide: bool = False) -> str:
    out = []
    for line in SYSTEM_MAP.splitlines():
        addr, kind, name = line.split()
        a = int(addr, 16)
        out.append(f"{0 if hide else (a + slide if a else 0):016x} {kind} {name}")
    out += [f"{0 if hide else 0xffffffffc0101000:016x} t nd_pfn_validate\t[libnvdimm]",
            f"{0 if hide else 0xffffffffc0101400:016x} t nd_pfn_init\t[libnvdimm]",
            f"{0 if hide else 0xffffffffc0102000:016x} d nd_pfn_attributes\t[libnvdimm]",
            f"{0 if hide else 0xffffffffc0200000:016x} t dev_dax_probe\t[device_dax]"]
    return "\n".join(out) + "\n"


def slid(address: int) -> int:
    return address + SLIDE


def test_the_text_symbols_of_a_listing_sorted():
    syms = symbols.parse(kallsyms())
    assert {s.name for s in syms if not s.text} == {"init_task", "__per_cpu_start", "nd_pfn_attributes"}
    assert [s.address for s in syms] == sorted(s.address for s in syms)
    assert symbols.Symbol(0xffffffffc0101000, "nd_pfn_validate", "libnvdimm") in syms


@pytest.mark.parametrize("make", ["kallsyms", "system_map"])
def test_an_address_names_the_function_holding_it(make):
    """From the guest's kallsyms alone, and from the System.map slid to the
    guest's placing: the same names for the same boot addresses."""
    s = symbols.from_kallsyms(kallsyms()) if make == "kallsyms" else \
        symbols.from_system_map(SYSTEM_MAP, kallsyms())
    assert s.name(slid(0xffffffff81234600)) == "memmap_init_range"            # its first byte
    assert s.name(f"{slid(0xffffffff812348ff):x}") == "memmap_init_range"     # its last, as the plugin writes it
    assert s.name(slid(0xffffffff81234520)) == "__init_single_page"
    # the compiler's clones and cold parts name their C function
    assert s.name(slid(0xffffffff81234910)) == "memmap_init_compound"
    assert s.name(slid(0xffffffff81234a10)) == "prep_compound_head"
    assert s.name(slid(0xffffffff81234c10)) == "memmap_init_zone_device"
    assert s.name(slid(0xffffffff81300040)) == "memcpy"                       # a weak symbol is text too
    # past the core kernel's text, before it, and past a module's last function: no function's
    assert s.name(slid(0xffffffff81400010)) == f"? {slid(0xffffffff81400010):#x}"
    assert s.name(0xffffffff80000000) == "? 0xffffffff80000000"
    assert s.name(0xffffffffc0200040) == "? 0xffffffffc0200040"
    # a module's function, named with its module
    assert s.name(0xffffffffc0101010) == "nd_pfn_validate [libnvdimm]"
    assert s.name(0xffffffffc0101ff0) == "nd_pfn_init [libnvdimm]"      # a module's data bounds its last function
    assert s.name(0xffffffffc0102010) == "? 0xffffffffc0102010"
    assert s.name("user") == symbols.USER


def test_kaslrs_slide_is_the_guests_text_less_the_system_maps():
    s = symbols.from_system_map(SYSTEM_MAP, kallsyms())
    assert s.kaslr_slide == SLIDE and s.source == "the kernel build's System.map"
    assert symbols.slide(symbols.parse(SYSTEM_MAP), symbols.parse(kallsyms(0))) == 0      # nokaslr
    assert symbols.from_system_map(SYSTEM_MAP, kallsyms(0)).name(0xffffffff81234600) == "memmap_init_range"
    # a symbolizer that ignored the slide would name the link-time address
    assert symbols.from_system_map(SYSTEM_MAP, kallsyms()).name(0xffffffff81234600) != "memmap_init_range"


def test_a_system_map_of_another_kernel_is_refused():
    """One function moved (another build of the same tree): the slide that
    fits _text does not fit it, and the table is refused by name."""
    other = SYSTEM_MAP.replace("ffffffff81234600 T memmap_init_range", "ffffffff81234640 T memmap_init_range")
    with pytest.raises(symbols.SymbolError, match="not the booted kernel's: 1 symbols, e.g. memmap_init_range"):
        symbols.from_system_map(other, kallsyms())


def test_a_listing_that_hides_its_addresses_or_has_no_text_is_refused():
    with pytest.raises(symbols.SymbolError, match="kptr_restrict"):
        symbols.from_kallsyms(kallsyms(hide=True))
    with pytest.raises(symbols.SymbolError, match="no text symbol"):
        symbols.from_kallsyms("ffffffff82000000 D init_task\n")
    with pytest.raises(symbols.SymbolError, match="no _text"):
        symbols.from_system_map(SYSTEM_MAP.replace(" T _text", " T _not_text"), kallsyms())


def test_function_names_drop_only_the_compilers_suffixes():
    assert symbols.function_name("prep_compound_head.isra.0.cold") == "prep_compound_head"
    assert symbols.function_name("memmap_init_compound.constprop.12") == "memmap_init_compound"
    assert symbols.function_name("foo.part.3") == "foo"
    assert symbols.function_name("__memcpy") == "__memcpy" and symbols.function_name("a.b") == "a.b"


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg-deb")
def test_a_lab_kernels_system_map_is_read_from_its_image_package(tmp_path):
    """The kernel cache keeps a lab kernel's linux-image package: its
    System.map is read from it (a package built here with dpkg-deb, in the
    layout the kernel's bindeb-pkg gives it); a package without one is
    refused with the member's name, and the stock kernel (None) has none."""
    release = "7.2.13-nttrace-base"
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: linux-image-{release}\nVersion: 1\nArchitecture: amd64\n"
                                             "Maintainer: nttrace <lab@localhost>\nDescription: test\n")
    (root / "boot").mkdir()
    (root / "boot" / f"System.map-{release}").write_text(SYSTEM_MAP)
    debs = tmp_path / "debs"
    debs.mkdir()
    deb = debs / f"linux-image-{release}_1_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    kernel = SimpleNamespace(release=release, debs=[debs / "linux-headers-x_1_amd64.deb", deb])
    assert symbols.system_map_of(kernel) == SYSTEM_MAP
    assert symbols.system_map_of(None) is None
    other = SimpleNamespace(release=release + "-other",
                            debs=[deb.rename(debs / f"linux-image-{release}-other_1_amd64.deb")])
    with pytest.raises(symbols.SymbolError, match=f"no ./boot/System.map-{release}-other in"):
        symbols.system_map_of(other)
    kallsyms_file = tmp_path / "kallsyms"
    kallsyms_file.write_text(kallsyms())
    assert symbols.for_boot(kallsyms_file, None).source == "the guest's /proc/kallsyms"
