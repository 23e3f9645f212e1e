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


def debian_unit_file(unit: str) -> str:
    """The debian/ file dh_installsystemd installs UNIT from: nttrace.service;
    nttrace.NAME.service (--name=NAME); a template NAME@.service from
    nttrace@.NAME.service (--name=NAME, the template's package file)."""
    if unit == "nttrace.service":
        return unit
    name, _, suffix = unit.rpartition(".")
    return f"nttrace@.{name.rstrip('@')}.{suffix}" if name.endswith("@") else f"nttrace.{unit}"


def test_each_unit_reaches_dh_installsystemd_from_its_one_source():
    """dh_installsystemd installs debian/nttrace.service,
    debian/nttrace.NAME.{service,timer} and the templates'
    debian/nttrace@.NAME.{service,timer}: each a link to tracer/data/, the
    file the tests read; each unit named in rules' dh_installsystemd calls,
    each template by rules' TEMPLATES (every NAME@.service and .timer there)."""
    rules = (REPO / "debian" / "rules").read_text()
    assert re.search(r"^TEMPLATES = .*\$\(wildcard tracer/data/\*@\.service tracer/data/\*@\.timer\)", rules, re.M)
    for unit in [*DATA.glob("*.service"), *DATA.glob("*.timer")]:
        link = REPO / "debian" / debian_unit_file(unit.name)
        assert link.is_symlink() and link.resolve() == unit.resolve(), link
        if "@." not in unit.name:
            assert re.search(rf"^\tdh_installsystemd .*\b{re.escape(unit.name)}$", rules, re.M), unit.name
    assert debian_unit_file("nttrace-ab@.service") == "nttrace@.nttrace-ab.service"
    assert debian_unit_file("nttrace-ab-deadline@.timer") == "nttrace@.nttrace-ab-deadline.timer"


def test_the_timer_fires_on_a_calendar_so_persistent_means_something():
    timer = (DATA / "nttrace-validate.timer").read_text()
    assert re.search(r"^Persistent=true$", timer, re.M) and re.search(r"^OnCalendar=\S+", timer, re.M)


def systemd_version() -> int:
    out = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True).stdout
    return int(re.match(r"systemd (\d+)", out).group(1))


def recorded_scores() -> tuple[int, dict[str, float]]:
    """docs/install.md's offline scores: (the systemd version that gave
    them, {unit: score})."""
    docs = (REPO / "docs" / "install.md").read_text()
    version = int(re.search(r"`systemd-analyze security --offline=true UNIT`\s+\(systemd (\d+)\)", docs).group(1))
    return version, {u: float(x) for u, x in re.findall(r"^\* `([\w@.-]+\.service)`: (\d+\.\d+)", docs, re.M)}


# The loop's step keeps root's capabilities, devices and system calls (it
# boots kernels and runs the checks' module loads and rebinds:
# docs/install.md): MEDIUM, bounded below 7.0; every other unit "OK".
BANDS = {"nttrace-ab@.service": 7.0}


@pytest.mark.needs("systemd-analyze")
@pytest.mark.parametrize("unit", ["nttrace.service", "nttrace-validate.service", "nttrace-ab@.service",
                                  "nttrace-ab-deadline@.service"])
def test_each_unit_scores_what_docs_install_md_says(unit):
    """systemd-analyze's offline score of each unit, parsed: in systemd's
    "OK" band or better (below 5.0) with any systemd, and with the systemd
    docs/install.md names (Debian 12's), the very figure it records there
    (other versions weigh the checks differently, and the build must not
    fail on a newer one). Fails if a unit is loosened (a figure that is no
    longer docs', or MEDIUM and worse) or docs' figure is not the unit's."""
    p = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(DATA / unit)],
                       capture_output=True, text=True)
    found = re.search(r"exposure level for \S+: (\d+(?:\.\d+)?)", p.stdout)
    assert found, p.stdout + p.stderr
    score = float(found.group(1))
    assert score < BANDS.get(unit, 5.0), p.stdout
    version, recorded = recorded_scores()
    assert unit in recorded, recorded
    if systemd_version() == version:
        assert score == recorded[unit], (score, recorded[unit], p.stdout)


def test_the_units_run_the_packages_command():
    script = re.search(r"^console_scripts =\s*\n\s*(\S+) = ", (REPO / "setup.cfg").read_text(), re.M).group(1)
    for unit in DATA.glob("*.service"):
        execs = re.findall(r"^ExecStart=(\S+)", unit.read_text(), re.M)
        assert execs == [f"/usr/bin/{script}"], (unit.name, execs)
