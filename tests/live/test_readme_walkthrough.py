# SPDX-License-Identifier: Apache-2.0
"""A new user's first commands: the README's "First commands", in its order,
on a fresh clone of this checkout, each output held to what the README says
of it. `make validate` and the venv's `nttrace validate --quick` run (about
a minute together on a 2-core VM: the clone's venv, its PyPI packages and
a full validate); `make test-unit` and `make test` are held by their
documented form (`make -n`: the suite cannot run inside itself), and
tests/unit/test_readme.py holds that the block is these four commands and
that `.ci/run` runs `make test`."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO

BLOCK = re.compile(r"## First commands\n.*?```sh\n(.*?)\n```", re.S)


# what make passes to the commands it runs, and the Makefile's own PYTEST_ARGS (which benchmarks/ci_run.py
# may set for the suite): a user's shell has none of it (under `make test`, as CI runs the suite, a README
# command's make would otherwise be a sub-make printing "make[1]: Entering directory")
MAKE_VARIABLES = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR", "PYTEST_ARGS")


def run(command: str, cwd, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ends_with_the_paths_paragraph(out: str) -> None:
    """What the README says validate's text ends with: which of the two
    paths it observed, or what each lacked (and the host's load, when the
    checks ran on a loaded one)."""
    lines = out.rstrip("\n").splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith("Of the two paths nttrace is for, this run observed"))
    assert lines[at + 1].startswith("  memmap init (memmap_init_zone_device): ")
    assert lines[at + 2].startswith("  demotion (migrate_pages for MR_DEMOTION): ")
    assert lines[at + 3:] in ([], ["", next(x for x in lines[at + 3:] if x.startswith("The host was "))]), lines[at:]


@pytest.mark.needs("root", "btf", "tracefs", "tracepoint", "bcc", "uprobe", "perf-software")
def test_a_new_user_runs_the_readme_first_commands_on_a_fresh_clone(tmp_path):
    """Fails if a first command fails or does what the README does not say
    it does: `make validate` not setting the host up first (packages,
    tracefs, headers, the venv) or not ending in validate's report, the
    README's `.venv/bin/nttrace` not being the clone's command, something
    put on PATH, or the test commands not running the rooms said."""
    clone = tmp_path / "nttrace"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    commands = [line.split("#")[0].strip() for line in BLOCK.search((clone / "README.md").read_text()).group(1).splitlines()]
    on_path = shutil.which("nttrace")

    setup, quick, unit, suite = commands
    proc = run(setup, clone, timeout=900)                      # make validate
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    steps = [re.search(rf"^{what}", out, re.M) for what in (
        r"system packages: (all present|installing )", r"tracefs: (mounted at|not mounted; mounting at) ",
        r"kernel headers: ", r"nttrace \S+ installed in \.venv$", r"nttrace \S+  kernel metadata from ")]
    assert all(steps), [s is not None for s in steps]
    assert [s.start() for s in steps] == sorted(s.start() for s in steps), "setup's steps, then validate's report"
    ends_with_the_paths_paragraph(out)
    assert shutil.which("nttrace") == on_path, "make validate put an nttrace on PATH"

    exe = quick.split()[0]                                     # .venv/bin/nttrace validate --quick
    assert (clone / exe).is_file()
    proc = run(quick, clone, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("nttrace ") and "  kernel metadata from " in proc.stdout.splitlines()[0]
    ends_with_the_paths_paragraph(proc.stdout)

    for command, room in ((unit, "tests/unit"), (suite, "")):  # make test-unit, make test: as documented
        dry = run(f"{command} -n", clone, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.splitlines()[-1].strip() == f".venv/bin/python -m pytest {room}".strip(), dry.stdout
