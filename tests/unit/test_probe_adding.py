# SPDX-License-Identifier: Apache-2.0
"""docs/probes.md's "Adding a probe", walked with a toy probe (execs, on the
tracepoint sched:sched_process_exec) in a copy of the tree: the files the
section lists are written as it says and nothing else is edited by hand;
tools/probe_docs.py writes the docs' tables; then, with the copy's nttrace
imported, the toy is registered, its rows (decoded from map bytes laid out
as its C declares them) print in `trace`'s table and on the daemon's
/metrics, `validate --list` has its check, and the copy's docs and golden
tests pass. Nothing is compiled or attached here: tests/live/test_probes_toy.py
attaches the same toy from such a copy and runs the copy's live test."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nttrace
from conftest import REPO

NAME = "toy"
COPIED = ("tracer", "exporters", "bpf", "docs", "tools", "tests", "setup.cfg")

# The four files, as the recipe describes them.
BPF_C = """\
// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* toy probe: counts sched:sched_process_exec events. */
BPF_ARRAY(toy_execs, u64, 1);

int nttrace_toy_exec(void *ctx)
{
	int zero = 0;
	u64 *n = toy_execs.lookup(&zero);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
"""

MODULE = '''\
# SPDX-License-Identifier: Apache-2.0
"""The toy probe: sched:sched_process_exec events (bpf/toy.bpf.c)."""
from __future__ import annotations

import ctypes
import subprocess

from nttrace.probe_framework.base import TracepointProbe
from nttrace.probe_framework.contract import Column, Metric
from nttrace.probe_framework.exercise import Exercise


def start_five() -> dict:
    """Starts /bin/true five times."""
    for _ in range(5):
        subprocess.run(["true"], check=True)
    return {"started": 5}


class ToyProbe(TracepointProbe):
    name = "toy"
    summary = "processes that exec, from sched:sched_process_exec"
    source = "toy.bpf.c"
    programs = (("sched", "sched_process_exec", "nttrace_toy_exec"),)
    exercise = Exercise("starts /bin/true five times", start_five, count=lambda snap: snap["rows"][0]["execs"],
                        no_truth="the kernel keeps no count of execs", bench_round=start_five)
    columns = (Column("EXECS", "execs", 8),)
    metrics = (Metric("nttrace_toy_execs", "sched_process_exec events", "counter", "execs"),)

    def snapshot(self) -> dict:
        return {"via": self.via, "rows": [{"execs": self.maps["toy_execs"][ctypes.c_int(0)].value}]}
'''

LIVE_TEST = '''\
# SPDX-License-Identifier: Apache-2.0
"""The toy probe on this host: five execs seen."""
import pytest

from nttrace.probes.toy import ToyProbe
from nttrace.tracing.tracer import Tracer


@pytest.mark.needs("root", "tracepoint", "bcc")
def test_the_toy_sees_the_execs_it_starts():
    with Tracer([ToyProbe.name]) as t:
        ToyProbe.exercise.run()
        assert t.snapshot()[ToyProbe.name]["rows"][0]["execs"] >= 5
'''

# What runs with the copy's nttrace: the toy's rows from map bytes, through
# the decoder, the `trace` table and the daemon's collector; validate's list.
DRIVER = '''\
import io, json, subprocess, sys
from pathlib import Path
from prometheus_client import CollectorRegistry, generate_latest
from nttrace.exporters.prometheus_collector import ProbeCollector
from nttrace.probes import PROBES
from nttrace.tracing.tracer import replay
from nttrace.trace_cmd import print_table

tree = Path(sys.argv[1])
host = json.loads((tree / "tests/fixtures/recorded/host-6.18/maps.json").read_text())
recording = {"kernel": host["kernel"], "caps": host["caps"], "settled": True, "probes": {"toy": {
    "options": {}, "status": {"status": "attached", "via": "tracepoint"},
    "state": {"via": "tracepoint", "fentry_error": "", "_lost_records": 0},
    "maps": {"toy_execs": {"macro": "BPF_ARRAY", "ncpus": 1, "key_size": 4, "value_size": 8,
                           "entries": [["00000000", (41).to_bytes(8, "little").hex()]]}}}}}
snap = replay(recording)
table = io.StringIO()
print_table(snap, 1.0, table, stamp="00:00:00")

class Replayed:
    meta = type("Meta", (), {"nt_revision": "none"})()
    def snapshot(self, summarise=True):
        return snap

registry = CollectorRegistry(auto_describe=False)
registry.register(ProbeCollector(Replayed(), kernel_release="6.18"))
listing = subprocess.run([sys.executable, "-m", "nttrace", "validate", "--list"], capture_output=True, text=True)
print(json.dumps({"probes": list(PROBES), "module": PROBES["toy"].__module__, "trace": table.getvalue(),
                  "metrics": generate_latest(registry).decode(), "validate_list": listing.stdout,
                  "validate_rc": listing.returncode, "validate_err": listing.stderr}))
'''


def recipe() -> list[str]:
    """The files docs/probes.md's "Adding a probe" says a probe is: its
    numbered items' leading paths, <name> as written."""
    text = (REPO / "docs" / "probes.md").read_text()
    section = text.split("## Adding a probe\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. \*\*`([^`]+)`\*\*", section, re.M)


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def copy_tree(tree: Path) -> None:
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        else:
            shutil.copy(src, tree / name)


def importable(tree: Path, site: Path) -> None:
    """site/nttrace laid out as setup.cfg installs the tree (tracer/ as
    nttrace, exporters/ and bpf/ inside it), each entry a link into the
    copy, with the installed package's built native library."""
    pkg = site / "nttrace"
    pkg.mkdir(parents=True)
    for entry in (tree / "tracer").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "exporters").symlink_to(tree / "exporters")
    (pkg / "bpf").symlink_to(tree / "bpf")
    for lib in Path(nttrace.__file__).parent.glob("_native*.so"):
        (pkg / lib.name).symlink_to(lib)


def run(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "NTTRACE_LAB_PREBUILD": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def add_toy(tree: Path) -> str:
    """Writes the toy's four files into the copy; returns the registration
    file as it was."""
    (tree / "bpf" / "toy.bpf.c").write_text(BPF_C)
    (tree / "tracer" / "probes" / "toy.py").write_text(MODULE)
    (tree / "tests" / "live" / "test_probe_toy.py").write_text(LIVE_TEST)
    init = tree / "tracer" / "probes" / "__init__.py"
    registration = init.read_text()
    last = re.findall(r'^    "[a-z_]+\.[A-Za-z]+",\n', registration, re.M)[-1]
    init.write_text(registration.replace(last, last + '    "toy.ToyProbe",\n', 1))
    return registration


def test_the_recipe_is_four_files_at_most():
    assert recipe() == ["bpf/<name>.bpf.c", "tracer/probes/<name>.py", "tests/live/test_probe_<name>.py",
                        "tracer/probes/__init__.py"]


def test_adding_a_toy_probe_as_docs_probes_md_says(tmp_path):
    tree, site = tmp_path / "tree", tmp_path / "site"
    copy_tree(tree)
    importable(tree, site)
    before = files(tree)

    # the recipe's files, each written as its item says
    touches = [p.replace("<name>", NAME) for p in recipe()]
    assert len(touches) <= 4
    registration = add_toy(tree)
    init = tree / "tracer" / "probes" / "__init__.py"

    # the docs' tables follow from the declarations: stale until written, by the generator
    tool = [sys.executable, str(tree / "tools" / "probe_docs.py")]
    check = run(tool + ["--check", str(tree)], site, tree)
    assert check.returncode == 1, check.stderr
    write = run(tool + ["--write", str(tree)], site, tree)
    assert write.returncode == 0, write.stderr
    generated = set(re.findall(r"^probe_docs: wrote (\S+)$", write.stdout, re.M))
    assert generated == {"docs/probes.md", "docs/daemon.md", "docs/validate.md"}, write.stdout

    after = files(tree)
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    assert changed - generated == set(touches), "edited beyond the recipe's files"
    added = [line for line in init.read_text().splitlines() if line not in registration.splitlines()]
    assert added == ['    "toy.ToyProbe",'], added
    docs = {page: (tree / page).read_text() for page in generated}
    assert "| `tracer/probes/toy.py` | the toy probe: processes that exec" in docs["docs/probes.md"]
    assert "| `bpf/toy.bpf.c` | the program of the toy probe |" in docs["docs/probes.md"]
    assert "| `nttrace_toy_execs_total` |  | toy: processes that exec" in docs["docs/daemon.md"]
    assert "| `probe.toy` | starts /bin/true five times | none: the kernel keeps no count" in docs["docs/validate.md"]

    # the copy's nttrace: registered, in `trace`, on /metrics, in validate's catalog
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = run([sys.executable, str(tmp_path / "driver.py"), str(tree)], site, tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["probes"][-1] == NAME and seen["module"] == "nttrace.probes.toy"
    assert seen["trace"].splitlines()[1:] == ["  toy (via tracepoint)", "       EXECS", "          41"], seen["trace"]
    assert "nttrace_toy_execs_total 41.0" in seen["metrics"].splitlines()
    assert 'nttrace_probe_up{probe="toy",via="tracepoint"} 1.0' in seen["metrics"].splitlines()
    assert seen["validate_rc"] == 0, seen["validate_err"]
    assert re.search(r"^probe\.toy +the toy probe against the kernel's own count", seen["validate_list"], re.M)

    # the copy's own docs and golden tests pass with the toy in it
    tests = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "tests/unit/test_docs_probes.py", "tests/unit/test_daemon_doc.py", "tests/unit/test_probe_docs.py",
                 "tests/unit/test_validate_catalog.py", "tests/unit/test_golden_outputs.py",
                 # the goldens that need no build-info label (a snapshot build's differs) or nttrace subprocess
                 "-k", "not baseline_against_current and not probe_metrics_golden and not textfile_golden"],
                site, tree)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert re.search(r"^\d+ passed", tests.stdout.splitlines()[-1]), tests.stdout[-500:]
