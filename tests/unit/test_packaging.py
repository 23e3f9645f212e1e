# SPDX-License-Identifier: Apache-2.0
"""What `pip install .` puts in site-packages."""
import importlib.machinery
from pathlib import Path

import nttrace


def test_one_import_name():
    site = Path(nttrace.__file__).resolve().parents[1]
    assert not (site / "tracer").exists()
    assert not (site / "exporters").exists()
    finder = importlib.machinery.PathFinder
    assert finder.find_spec("tracer", [str(site)]) is None
    assert finder.find_spec("exporters", [str(site)]) is None
    record = next(site.glob("nttrace-*.dist-info")) / "RECORD"
    installed = [line.split(",", 1)[0] for line in record.read_text().splitlines()]
    top = {p.split("/", 1)[0] for p in installed if not p.startswith("../")}  # ../../../bin/nttrace: the script
    assert top == {"nttrace", next(site.glob("nttrace-*.dist-info")).name}, top


def test_bpf_sources_and_native_library_are_installed():
    from nttrace import bpf
    from nttrace.reference import native
    pkg = Path(nttrace.__file__).parent
    from nttrace.probes import PROBES
    for probe in PROBES.values():    # every probe's program, and the header they share
        assert (pkg / "bpf" / probe.source).is_file() and bpf.source(probe.source).strip()
    assert bpf.source("common.h").strip()
    lib = Path(native.library_path())
    assert lib.parent == pkg and lib.name.startswith("_native")
    # the installed library runs: the model initialises descriptors and counts its refcount stores
    with native.Buffer(64 * 64) as buf:
        run = native.memmap_init(buf, 64, method="template_nt")
        assert run.nr == 64 and run.elapsed_ns > 0
        written = buf.bytes(0, 64 * 64)
        assert written != b"\x5a" * len(written)          # Buffer's fill: the model wrote over it


def test_exporters_are_under_nttrace():
    import nttrace.exporters
    assert Path(nttrace.exporters.__file__).parent.parent == Path(nttrace.__file__).parent


def test_every_module_of_the_tree_is_installed():
    """setup.py finds the packages: a module or subpackage added under
    tracer/, exporters/ or bpf/ is installed without a list to update."""
    from conftest import REPO
    pkg = Path(nttrace.__file__).parent
    roots = {"tracer": pkg, "exporters": pkg / "exporters", "bpf": pkg / "bpf"}
    missing = [str(src.relative_to(REPO)) for root, dest in roots.items() for src in (REPO / root).rglob("*.py")
               if not (dest / src.relative_to(REPO / root)).is_file()]
    assert missing == []
