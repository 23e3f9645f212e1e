"""No probe is known by its name outside tracer/probes/: code that needs a
probe takes it from the registry or its class (nttrace.probes.PROBES,
DEFAULT, DEMOTION_WATCH, `SomeProbe.name`), so renaming or adding a probe
touches the probe's own files. A string literal that equals a probe name
(or lists probe names, "a,b") is a hard-coded name; one that names
something else spelled the same (a tracepoint system, a lab scenario set)
says so on its line with `# not a probe: <what it is>`."""
import ast
from pathlib import Path

from conftest import REPO
from nttrace.probes import PROBES

# the code that could name a probe: the package (its probes aside), the
# exporters, the lab, the benchmarks' renderer, the tools, and the tests
ROOTS = ("tracer", "exporters", "lab", "benchmarks", "tools", "tests")
OWN = REPO / "tracer" / "probes"
MARK = "# not a probe:"


def hard_coded_names(path: Path, names: set[str]) -> list[str]:
    """'path:line: literal' for each string literal naming a probe."""
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text, str(path))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        parts = [p.strip() for p in node.value.split(",")]
        dotted = node.value.split(".")   # "copy.rows": a key path into a probe's entry
        if not (node.value in names or (len(parts) > 1 and all(p in names for p in parts))
                or (len(dotted) > 1 and dotted[0] in names and all(d.isidentifier() for d in dotted))):
            continue
        if MARK in lines[node.lineno - 1]:
            continue
        where = path.relative_to(REPO) if REPO in path.parents else path
        out.append(f"{where}:{node.lineno}: {node.value!r}")
    return out


def scan(roots: list[Path], names: set[str]) -> list[str]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if OWN in path.parents or path.resolve() == Path(__file__).resolve():
                continue
            found += hard_coded_names(path, names)
    return found


def test_no_probe_name_is_written_outside_the_probes():
    found = scan([REPO / r for r in ROOTS if (REPO / r).is_dir()], set(PROBES))
    assert not found, "probe names written outside tracer/probes/ (take them from the registry or the probe " \
                      "class):\n" + "\n".join(found)


def test_the_scan_finds_a_planted_name_and_honours_the_mark(tmp_path):
    (tmp_path / "planted.py").write_text(
        "from x import Tracer\n"
        "with Tracer(['reclaim']) as t:\n"
        "    pass\n"
        "probes = 'migrate,memmap'\n"
        "rows = ev['copy.rows']\n"
        "system = 'migrate'   # not a probe: a tracepoint system\n"
        "words = 'copy the migrate rows'\n")
    found = scan([tmp_path], set(PROBES))
    assert sorted(f.split(": ", 1)[1] for f in found) == ["'copy.rows'", "'migrate,memmap'", "'reclaim'"], found


# -- no probe imported by name outside tracer/probes --------------------------------
PRODUCT = ("tracer", "exporters", "lab", "benchmarks", "tools")


def probe_imports(path: Path) -> list[str]:
    """'path:line: what' for each import of a probe's module or class (the
    modules and classes of PROBES) in one file."""
    modules = {p.__module__ for p in PROBES.values()}
    classes = {p.__name__ for p in PROBES.values()}
    out = []
    shown = path.relative_to(REPO) if REPO in path.parents else path
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if node.module in modules or (node.module == "nttrace.probes" and names & classes):
                out.append(f"{shown}:{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
            elif node.module == "nttrace.probes" and names & {m.rsplit('.', 1)[1] for m in modules}:
                out.append(f"{shown}:{node.lineno}: a probe module from nttrace.probes")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    out.append(f"{shown}:{node.lineno}: import {a.name}")
    return out


def test_no_module_outside_the_probes_imports_a_probe_by_name():
    """validate, bench, the daemon, the exporters, the lab and the benchmark
    scripts find a probe through the registry (PROBES, DEFAULT, by_role(),
    the class's declarations), so a probe is its own files (tests may import
    the probe they test)."""
    found = []
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")) if (REPO / root).is_dir() else []:
            if OWN not in path.parents:
                found += probe_imports(path)
    assert not found, "probes imported by name outside tracer/probes/:\n" + "\n".join(found)


def test_the_import_scan_finds_a_planted_import(tmp_path):
    planted = tmp_path / "_planted_for_the_scan.py"     # never into the checkout
    planted.write_text("from nttrace.probes.copy import CopyProbe\nimport nttrace.probes.memmap\n"  # not a probe: planted
                       "from nttrace.probes import ReclaimProbe, by_role\n")
    assert len(probe_imports(planted)) == 3
