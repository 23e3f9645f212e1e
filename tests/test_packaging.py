"""What `pip install .` puts in site-packages."""
import importlib.util
from pathlib import Path

import nttrace


def test_one_import_name():
    site = Path(nttrace.__file__).resolve().parents[1]
    assert not (site / "tracer").exists()
    assert not (site / "exporters").exists()
    assert importlib.util.find_spec("tracer") is None
    assert importlib.util.find_spec("exporters") is None


def test_bpf_sources_and_native_library_are_installed():
    from nttrace import bpf, native
    pkg = Path(nttrace.__file__).parent
    assert (pkg / "bpf" / "migrate.bpf.c").is_file()
    assert bpf.source("migrate.bpf.c").strip()
    lib = Path(native.library_path())
    assert lib.parent == pkg and lib.name.startswith("_native")
    assert native.lib().nttrace_memmap_init_zone_device_model is not None


def test_exporters_are_under_nttrace():
    import nttrace.exporters
    assert Path(nttrace.exporters.__file__).parent.parent == Path(nttrace.__file__).parent
