"""debian/ against the tree it packs (the package itself is built and
installed by tests/lab/test_deb.py): each shipped unit and config is
installed from its one source in tracer/data/, and the units run the
command the package installs."""
import re
import subprocess

import pytest

import nttrace

from conftest import REPO

DATA = REPO / "tracer" / "data"


def installs() -> dict[str, str]:
    """debian/nttrace.install: source -> destination directory."""
    lines = (REPO / "debian" / "nttrace.install").read_text().split("\n")
    return dict(line.split() for line in lines if line.strip() and not line.startswith("#"))


def test_every_unit_and_config_is_installed_from_tracer_data():
    inst = installs()
    assert all((REPO / src).is_file() for src in inst), inst
    for unit in [*DATA.glob("*.service"), *DATA.glob("*.timer")]:
        assert inst.get(f"tracer/data/{unit.name}") == "lib/systemd/system/", unit.name
    for conf in ("nttrace.toml", "web-config.yml"):
        assert inst.get(f"tracer/data/{conf}") == "etc/nttrace/", conf


def test_the_units_run_the_packages_command():
    script = re.search(r"^console_scripts =\s*\n\s*(\S+) = ", (REPO / "setup.cfg").read_text(), re.M).group(1)
    for unit in DATA.glob("*.service"):
        execs = re.findall(r"^ExecStart=(\S+)", unit.read_text(), re.M)
        assert execs == [f"/usr/bin/{script}"], (unit.name, execs)


@pytest.mark.needs("dpkg-dev")
def test_the_changelog_is_generated_from_the_one_version():
    changelog = subprocess.run([str(REPO / "tools" / "debian-changelog.sh"), str(REPO)], capture_output=True,
                               text=True, check=True).stdout
    parsed = subprocess.run(["dpkg-parsechangelog", "-l-", "-SVersion"], input=changelog, capture_output=True,
                            text=True, check=True)
    assert parsed.stdout.strip() == nttrace.__version__, changelog
    assert not parsed.stderr, parsed.stderr      # dpkg's warnings (a malformed date or trailer)
    assert "/debian/changelog" in (REPO / ".gitignore").read_text().splitlines()   # generated, never kept
