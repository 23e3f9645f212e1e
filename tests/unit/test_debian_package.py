# SPDX-License-Identifier: Apache-2.0
"""debian/ against the tree it packs (the package itself is built and
installed by tests/lab/test_deb.py): each shipped unit and config is
installed from its one source in tracer/data/, and the units run the
command the package installs."""
import re
import subprocess

import pytest

from conftest import REPO

DATA = REPO / "tracer" / "data"


def installs() -> dict[str, str]:
    """debian/nttrace.install: source -> destination directory."""
    lines = (REPO / "debian" / "nttrace.install").read_text().split("\n")
    return dict(line.split() for line in lines if line.strip() and not line.startswith("#"))


def test_every_config_is_installed_from_tracer_data_and_no_unit_by_path():
    inst = installs()
    assert all((REPO / src).is_file() for src in inst), inst
    for conf in ("nttrace.toml", "web-config.yml"):
        assert inst.get(f"tracer/data/{conf}") == "etc/nttrace/", conf
    assert not [dest for dest in inst.values() if "systemd" in dest], inst    # dh_installsystemd's paths only


def test_each_unit_reaches_dh_installsystemd_from_its_one_source():
    """dh_installsystemd installs debian/nttrace.service and
    debian/nttrace.NAME.{service,timer}: each a link to tracer/data/, the
    file the tests read, and each named in rules' dh_installsystemd calls."""
    rules = (REPO / "debian" / "rules").read_text()
    for unit in [*DATA.glob("*.service"), *DATA.glob("*.timer")]:
        link = REPO / "debian" / ("nttrace.service" if unit.name == "nttrace.service" else f"nttrace.{unit.name}")
        assert link.is_symlink() and link.resolve() == unit.resolve(), link
        assert re.search(rf"^\tdh_installsystemd .*\b{re.escape(unit.name)}$", rules, re.M), unit.name


def test_the_timer_fires_on_a_calendar_so_persistent_means_something():
    timer = (DATA / "nttrace-validate.timer").read_text()
    assert re.search(r"^Persistent=true$", timer, re.M) and re.search(r"^OnCalendar=\S+", timer, re.M)


@pytest.mark.needs("systemd-analyze")
@pytest.mark.parametrize("unit,most", [("nttrace.service", 2.5), ("nttrace-validate.service", 2.5)])
def test_each_unit_scores_what_docs_install_md_says(unit, most):
    """systemd-analyze's offline score of each unit (docs/install.md records
    it and what each remaining exposure is for): a loosened unit fails here."""
    p = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(DATA / unit)],
                       capture_output=True, text=True)
    score = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", p.stdout).group(1))
    assert score <= most, p.stdout
    assert f"`{unit}`: {score}" in (REPO / "docs" / "install.md").read_text(), score


def test_the_units_run_the_packages_command():
    script = re.search(r"^console_scripts =\s*\n\s*(\S+) = ", (REPO / "setup.cfg").read_text(), re.M).group(1)
    for unit in DATA.glob("*.service"):
        execs = re.findall(r"^ExecStart=(\S+)", unit.read_text(), re.M)
        assert execs == [f"/usr/bin/{script}"], (unit.name, execs)
