# SPDX-License-Identifier: Apache-2.0
"""debian/ against the tree it packs (the package itself is built and
installed by tests/lab/test_deb.py): each shipped unit and config is
installed from its one source in tracer/data/, and the units run the
command the package installs."""
import re
import shutil
import subprocess

import pytest

import nttrace

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


def _git(repo, *args, date=None):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    if date:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


VERSIONED = ("tracer/__init__.py", "tools/version.sh", "tools/debian-changelog.sh", "tools/archive-commit",
             ".gitattributes", "debian/changelog", "debian/control")


@pytest.fixture
def versioned_repo(tmp_path):
    """A git repository holding the files the version is made from, as this
    tree has them: one commit of 2026-12-01, a second of 2026-12-02."""
    repo = tmp_path / "repo"
    for f in VERSIONED:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, repo / f)
    # a package build's tree carries its own snapshot version and entry: back to the release's
    release = nttrace.__version__.split("+")[0]
    init = repo / "tracer" / "__init__.py"
    init.write_text(re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{release}"', init.read_text(), flags=re.M))
    changelog = repo / "debian" / "changelog"
    text = changelog.read_text()
    changelog.write_text(text[text.index(f"nttrace ({release})"):])
    (repo / "tools" / "archive-commit").write_text("$Format:%ct %H %(describe:tags=true,match=v[0-9]*)$\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one", date="2026-12-01T10:00:00Z")
    (repo / "tools" / "notes").write_text("two\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "two", date="2026-12-02T09:30:05Z")
    return repo


def version_of(tree) -> subprocess.CompletedProcess:
    return subprocess.run([str(tree / "tools" / "version.sh"), str(tree)], capture_output=True, text=True)


def export(repo, commit, dest):
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-C", str(dest), "-xf", "-"], input=archive, check=True)
    return dest


def dpkg_lt(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0


def test_the_kept_changelogs_top_entry_is_the_one_version():
    top = subprocess.run(["dpkg-parsechangelog", "-l", str(REPO / "debian" / "changelog"), "-SVersion"],
                         capture_output=True, text=True, check=True).stdout.strip()
    release = re.search(r'^__version__ = "([^"]+)"', (REPO / "tracer" / "__init__.py").read_text(), re.M).group(1)
    assert top == release
    assert "/debian/changelog" not in (REPO / ".gitignore").read_text().splitlines()   # kept in git


@pytest.mark.needs("dpkg-dev")
def test_each_commit_builds_a_version_between_the_release_and_the_next(versioned_repo):
    repo = versioned_repo
    release = nttrace.__version__.split("+")[0]
    second = version_of(repo).stdout.strip()
    sha2 = _git(repo, "rev-parse", "--short=7", "HEAD").strip()
    assert second == f"{release}+git20261202.093005.{sha2}"
    _git(repo, "checkout", "-q", "HEAD~1")
    first = version_of(repo).stdout.strip()
    assert first.startswith(f"{release}+git20261201.100000.")
    major, minor, patch = (int(x) for x in release.split("."))
    for later in (f"{major}.{minor}.{patch + 1}", f"{major}.{minor + 1}.0"):
        assert dpkg_lt(release, first) and dpkg_lt(first, second) and dpkg_lt(second, later), (first, second)
    # the release's own tag: exactly the release, on that commit only
    _git(repo, "tag", f"v{release}")
    assert version_of(repo).stdout.strip() == release
    _git(repo, "checkout", "-q", "-")
    assert version_of(repo).stdout.strip() == second


@pytest.mark.needs("dpkg-dev")
def test_an_export_without_git_builds_the_version_of_its_commit(versioned_repo, tmp_path):
    repo = versioned_repo
    second = version_of(repo).stdout.strip()
    tree = export(repo, "HEAD", tmp_path / "export")
    assert not (tree / ".git").exists()
    assert version_of(tree).stdout.strip() == second
    _git(repo, "tag", f"v{nttrace.__version__.split('+')[0]}", "HEAD~1")
    assert version_of(export(repo, "HEAD~1", tmp_path / "tagged")).stdout.strip() == nttrace.__version__.split("+")[0]
    assert version_of(export(repo, "HEAD", tmp_path / "after-tag")).stdout.strip() == second


def test_a_copy_that_is_neither_checkout_nor_export_is_refused_in_one_line(versioned_repo, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(versioned_repo, copy, ignore=shutil.ignore_patterns(".git"))
    p = version_of(copy)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "neither a git checkout nor a `git archive` export" in p.stderr, p.stderr


@pytest.mark.needs("dpkg-dev")
def test_the_build_changelog_puts_the_snapshot_on_the_kept_one(versioned_repo):
    repo = versioned_repo
    version = version_of(repo).stdout.strip()
    changelog = subprocess.run([str(repo / "tools" / "debian-changelog.sh"), str(repo)], capture_output=True,
                               text=True, check=True).stdout
    parsed = subprocess.run(["dpkg-parsechangelog", "-l-", "--all"], input=changelog, capture_output=True,
                            text=True, check=True)
    assert not parsed.stderr, parsed.stderr      # dpkg's warnings (a malformed date or trailer)
    assert re.search(r"^Version: (.+)$", parsed.stdout, re.M).group(1) == version
    assert re.findall(r"^nttrace \(([^)]+)\)", changelog, re.M) == [version, nttrace.__version__.split("+")[0]]
    assert changelog.endswith((repo / "debian" / "changelog").read_text())     # the kept one, unchanged
    assert "Snapshot of commit " + version.rsplit(".", 1)[1] in changelog
    # a __version__ bumped without its changelog entry: refused
    init = repo / "tracer" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{nttrace.__version__.split("+")[0]}"', '"9.9.9"'))
    p = subprocess.run([str(repo / "tools" / "debian-changelog.sh"), str(repo)], capture_output=True, text=True)
    assert p.returncode == 2 and "top entry is" in p.stderr and "9.9.9" in p.stderr, p.stderr
