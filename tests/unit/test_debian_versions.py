# SPDX-License-Identifier: Apache-2.0
"""The version a build of a commit gets (tools/version.sh) and the
changelog it builds with (tools/debian-changelog.sh): a count of commits
since the last release tag that only grows along the history, so each
build sorts above the one before it however close in time their commits
are; the tagged release itself; snapshots of an untagged next release below
it. Checked with dpkg's own ordering (`dpkg --compare-versions`) and with
apt installing one build over another."""
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

import nttrace

from conftest import REPO

VERSION_SH = REPO / "tools" / "version.sh"
RELEASE = re.search(r'^__version__ = "([^"]+)"', (REPO / "tracer" / "__init__.py").read_text(), re.M).group(1)
RELEASE = re.sub(r"\.(post|dev)\d+\+g[0-9a-f]+$", "", RELEASE)     # a package build's tree carries its snapshot's
VERSIONED = ("tracer/__init__.py", "tools/version.sh", "tools/debian-changelog.sh", "tools/archive-commit",
             "debian/changelog", "debian/control")
# .gitattributes' line that has `git archive` fill tools/archive-commit in (the source package, as
# dpkg-source makes it, leaves .gitattributes out: the tests' repositories get this line then)
EXPORT_SUBST = "tools/archive-commit export-subst"
# A build of the scheme before the count (<release>+git<date>.<time>.<sha7>), the latest such a
# build could have: every snapshot of the release after its tag must upgrade it.
DATED_SCHEME = f"{RELEASE}+git99991231.235959.fffffff"


def _git(repo, *args, date=None):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    if date:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


def version_of(tree, *args, commit=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(VERSION_SH), *args, str(tree), *([commit] if commit else [])],
                          capture_output=True, text=True)


def version(tree, *args, commit=None) -> str:
    p = version_of(tree, *args, commit=commit)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout.strip()


def dpkg_lt(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0


def ascending(*versions: str) -> bool:
    return all(dpkg_lt(a, b) for a, b in zip(versions, versions[1:]))


def set_release(repo, release: str, debian_release: str) -> None:
    """__version__ RELEASE and its entry on top of the kept changelog (uncommitted)."""
    init = repo / "tracer" / "__init__.py"
    init.write_text(re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{release}"', init.read_text(), flags=re.M))
    changelog = repo / "debian" / "changelog"
    trailer = re.search(r"^ -- .*$", changelog.read_text(), re.M).group(0)
    changelog.write_text(f"nttrace ({debian_release}) unstable; urgency=medium\n\n  * Release {release}.\n\n"
                         f"{trailer}\n\n{changelog.read_text()}")


def commit(repo, message: str, date: str) -> str:
    (repo / "tools" / "notes").write_text(message + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message, date=date)
    return _git(repo, "rev-parse", "--short=7", "HEAD").strip()


@pytest.fixture
def versioned_repo(tmp_path):
    """A git repository holding the files the version is made from, as this
    tree has them (its __version__ the release, its changelog the kept
    one): one commit, untagged."""
    repo = tmp_path / "repo"
    for f in VERSIONED:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, repo / f)
    # a package build's tree carries its own snapshot version and entry: back to the release's
    init = repo / "tracer" / "__init__.py"
    init.write_text(re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{RELEASE}"', init.read_text(), flags=re.M))
    changelog = repo / "debian" / "changelog"
    text = changelog.read_text()
    changelog.write_text(text[text.index(f"nttrace ({RELEASE})"):])
    (repo / "tools" / "archive-commit").write_text("$Format:%ct %H %(describe:tags=true,match=v[0-9]*)$\n")
    attributes = REPO / ".gitattributes"
    (repo / ".gitattributes").write_text(attributes.read_text() if attributes.exists() else EXPORT_SUBST + "\n")
    _git(repo, "init", "-q")
    commit(repo, "one", "2026-12-01T10:00:00Z")
    return repo


def export(repo, rev, dest):
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-C", str(dest), "-xf", "-"], input=archive, check=True)
    return dest


def test_the_checkout_has_git_archive_fill_in_the_exports_commit():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the source package leaves .gitattributes out")
    assert EXPORT_SUBST in (REPO / ".gitattributes").read_text().splitlines()


def test_the_kept_changelogs_top_entry_is_the_one_version():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: a package build's debian/changelog has its snapshot entry on top")
    top = subprocess.run(["dpkg-parsechangelog", "-l", str(REPO / "debian" / "changelog"), "-SVersion"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert top == RELEASE
    assert "/debian/changelog" not in (REPO / ".gitignore").read_text().splitlines()   # kept in git


@pytest.mark.needs("dpkg-dev")
def test_releases_pre_releases_and_their_snapshots_sort_as_their_history(versioned_repo):
    """Fails if a commit of the same second as its parent sorts by its hash
    (the dated scheme), if a tagged release does not replace a build of its
    commit made before the tag (<release>+... above <release>), if a PEP 440
    pre-release is spelled for dpkg without its tilde (0.2.0rc1 above 0.2.0),
    or if a snapshot after the tag sorts below a build of the dated scheme."""
    repo = versioned_repo
    second = "2026-12-02T09:30:05Z"
    sha = {1: _git(repo, "rev-parse", "--short=7", "HEAD").strip()}
    untagged = version(repo)
    assert untagged == f"{RELEASE}~dev1+g{sha[1]}"
    assert version(repo, "--python") == f"{RELEASE}.dev1+g{sha[1]}"
    # two commits in one second, the second's hash below the first's or not: the count orders them
    sha[2], sha[3] = commit(repo, "two", second), commit(repo, "three", second)
    dev2, dev3 = version(repo, commit="HEAD~1"), version(repo)
    assert (dev2, dev3) == (f"{RELEASE}~dev2+g{sha[2]}", f"{RELEASE}~dev3+g{sha[3]}")
    # the release tagged on the third: exactly the release, above what that commit built before the tag
    _git(repo, "tag", f"v{RELEASE}")
    assert version(repo) == RELEASE and version(repo, "--python") == RELEASE
    sha[4], sha[5] = commit(repo, "four", second), commit(repo, "five", second)
    post1, post2 = version(repo, commit="HEAD~1"), version(repo)
    assert (post1, post2) == (f"{RELEASE}.post1+g{sha[4]}", f"{RELEASE}.post2+g{sha[5]}")
    assert version(repo, "--python") == f"{RELEASE}.post2+g{sha[5]}"
    major, minor, patch = (int(x) for x in RELEASE.split("."))
    nxt, rc = f"{major}.{minor}.{patch + 1}", f"{major}.{minor + 1}.0"
    # the next release's commit, built before its tag: below the release, above everything before
    set_release(repo, nxt, nxt)
    sha[6] = commit(repo, f"release {nxt}", second)
    pre_tag = version(repo)
    assert pre_tag == f"{nxt}~dev3+g{sha[6]}"
    _git(repo, "tag", f"v{nxt}")
    assert ascending(dev2, dev3, RELEASE, post1, post2, pre_tag, version(repo)) and version(repo) == nxt
    # a PEP 440 pre-release of the one after: dpkg's spelling has its tilde, and sorts so
    set_release(repo, f"{rc}rc1", f"{rc}~rc1")
    sha[7] = commit(repo, f"release {rc}rc1", second)
    rc1_dev = version(repo)
    assert rc1_dev == f"{rc}~rc1~dev1+g{sha[7]}" and version(repo, "--python") == f"{rc}rc1.dev1+g{sha[7]}"
    _git(repo, "tag", f"v{rc}rc1")
    assert version(repo) == f"{rc}~rc1" and version(repo, "--python") == f"{rc}rc1"
    sha[8] = commit(repo, "after rc1", second)
    rc1_post = version(repo)
    assert rc1_post == f"{rc}~rc1.post1+g{sha[8]}"
    assert ascending(nxt, rc1_dev, f"{rc}~rc1", rc1_post, rc) and dpkg_lt(f"{rc}~rc1.post9+gfffffff", f"{rc}~rc2")
    # every snapshot after a tag upgrades a build of the dated scheme of its release
    assert dpkg_lt(DATED_SCHEME, post1) and dpkg_lt(f"{nxt}+git99991231.235959.fffffff", f"{nxt}.post1+g0000000")


def test_a_tag_above_the_version_or_on_another_version_is_refused_in_one_line(versioned_repo):
    repo = versioned_repo
    _git(repo, "tag", "v99.0.0")
    p = version_of(repo)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p
    assert f"last release tag v99.0.0 is above __version__ {RELEASE}" in p.stderr
    _git(repo, "tag", "-d", "v99.0.0")
    _git(repo, "tag", "v0.0.1")
    p = version_of(repo)
    assert p.returncode == 2 and "the tag v0.0.1 is on" in p.stderr and p.stderr.count("\n") == 1, p


def first_parent_history(repo) -> list[tuple[str, int]]:
    """(commit, committer time) along the first-parent line, oldest first,
    from the first commit whose tracer/__init__.py writes __version__ (none
    before it had one)."""
    since = _git(repo, "log", "--first-parent", "--reverse", "--format=%H", "-S", "\n__version__ = ", "--",
                 "tracer/__init__.py").split()[0]
    line = _git(repo, "log", "--first-parent", "--reverse", "--format=%H %ct", f"{since}~1..HEAD").split("\n")
    return [(c, int(t)) for c, t in (entry.split() for entry in line if entry)]


def versions_along(repo, commits: list[str]) -> list[str]:
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda c: version(repo, commit=c), commits))


def assert_each_child_above_its_parent(commits: list[str], versions: list[str]) -> None:
    wrong = [f"{c[:7]} {v} !> {pv}" for c, v, pv in zip(commits[1:], versions[1:], versions) if not dpkg_lt(pv, v)]
    assert wrong == [], "\n".join(wrong)


@pytest.mark.needs("dpkg-dev")
def test_along_this_repositorys_first_parent_history_each_child_builds_a_version_above_its_parents(tmp_path):
    """This repository's own history as it is, and as it is with the release
    tagged where debian/changelog first held it on the first-parent line (a
    clone, so the real repository gets no tag): every child's build sorts
    above its parent's. Fails with the dated scheme (commits of one second
    ordered by their hashes: 10 such pairs in this history) and with a count
    that does not grow along the history."""
    if not (REPO / ".git").exists():       # a package build's or autopkgtest's tree
        pytest.skip("not a git checkout: this repository's history is not here")
    history = first_parent_history(REPO)
    commits = [c for c, _t in history]
    assert len(commits) > 300, len(commits)
    same_second = sum(1 for (_a, ta), (_b, tb) in zip(history, history[1:]) if ta == tb)
    versions = versions_along(REPO, commits)
    assert_each_child_above_its_parent(commits, versions)
    # tagged: the clone's first-parent commit that first kept the release's changelog entry
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(clone)], check=True)
    for tag in _git(clone, "tag", "-l", "v[0-9]*").split():
        _git(clone, "tag", "-d", tag)
    released = _git(clone, "log", "--first-parent", "--reverse", "--diff-filter=A", "--format=%H", "--",
                    "debian/changelog").split()[0]
    _git(clone, "tag", f"v{RELEASE}", released)
    # the tag changes the versions of the commits that have it in their history: from its parent on
    after = commits[commits.index(released) - 1:]
    tagged = versions_along(clone, after)
    assert tagged[1] == RELEASE and all(".post" in v for v in tagged[2:]), tagged[:3]
    assert_each_child_above_its_parent(after, tagged)
    assert same_second > 0, "no two commits of one second in this history: the test shows less than it says"


@pytest.mark.needs("dpkg-dev")
def test_an_export_without_git_builds_the_version_of_its_commit(versioned_repo, tmp_path):
    repo = versioned_repo
    _git(repo, "tag", f"v{RELEASE}")
    post = commit(repo, "two", "2026-12-02T09:30:05Z")
    tree = export(repo, "HEAD", tmp_path / "export")
    assert not (tree / ".git").exists()
    assert version(tree) == version(repo) == f"{RELEASE}.post1+g{post}"
    assert version(tree, "--commit") == version(repo, "--commit")
    assert version(export(repo, "HEAD~1", tmp_path / "tagged")) == RELEASE


def test_an_export_with_no_release_tag_in_its_history_is_refused_in_one_line(versioned_repo, tmp_path):
    """Its count is not in the export (git describe names no tag): refused,
    not given a count that could go backwards."""
    p = version_of(export(versioned_repo, "HEAD", tmp_path / "export"))
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p
    assert "has no release tag" in p.stderr


def test_a_copy_that_is_neither_checkout_nor_export_is_refused_in_one_line(versioned_repo, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(versioned_repo, copy, ignore=shutil.ignore_patterns(".git"))
    p = version_of(copy)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "neither a git checkout nor a `git archive` export" in p.stderr, p.stderr


@pytest.mark.needs("dpkg-dev")
def test_the_build_changelog_puts_the_snapshot_on_the_kept_one(versioned_repo):
    repo = versioned_repo
    sha = _git(repo, "rev-parse", "--short=7", "HEAD").strip()
    ver = version(repo)
    changelog = subprocess.run([str(repo / "tools" / "debian-changelog.sh"), str(repo)], capture_output=True,
                               text=True, check=True).stdout
    parsed = subprocess.run(["dpkg-parsechangelog", "-l-", "--all"], input=changelog, capture_output=True,
                            text=True, check=True)
    assert not parsed.stderr, parsed.stderr      # dpkg's warnings (a malformed date or trailer)
    assert re.search(r"^Version: (.+)$", parsed.stdout, re.M).group(1) == ver
    assert re.search(r"^Date: (.+)$", parsed.stdout, re.M).group(1) == "Tue, 01 Dec 2026 10:00:00 +0000"
    assert re.findall(r"^nttrace \(([^)]+)\)", changelog, re.M) == [ver, RELEASE]
    assert changelog.endswith((repo / "debian" / "changelog").read_text())     # the kept one, unchanged
    assert f"Snapshot of commit {sha}, before release {RELEASE}." in changelog
    # the release's own tag: the kept changelog alone
    _git(repo, "tag", f"v{RELEASE}")
    assert subprocess.run([str(repo / "tools" / "debian-changelog.sh"), str(repo)], capture_output=True,
                          text=True, check=True).stdout == (repo / "debian" / "changelog").read_text()
    # a __version__ bumped without its changelog entry: refused
    init = repo / "tracer" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{RELEASE}"', '"9.9.9"'))
    commit(repo, "bump", "2026-12-03T00:00:00Z")
    p = subprocess.run([str(repo / "tools" / "debian-changelog.sh"), str(repo)], capture_output=True, text=True)
    assert p.returncode == 2 and "top entry is" in p.stderr and "9.9.9" in p.stderr, p.stderr


def probe_deb(version: str, dest) -> str:
    """A package of the one name, version VERSION, and nothing else (dpkg-deb)."""
    tree = dest / f"probe-{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: nttrace-version-probe\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: nttrace tests <tests@localhost>\nDescription: a version, installed by apt\n")
    deb = dest / f"probe-{version}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)], capture_output=True, check=True)
    return str(deb)


def apt_in(root):
    """apt-get, and dpkg under it, on a throwaway root of their own: its own
    dpkg database, no sources, no lock on the host's (any user)."""
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/cache/apt/archives/partial",
              "var/lib/apt/lists/partial", "var/log/apt", "etc/apt"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").touch()
    conf = root / "apt.conf"
    conf.write_text("\n".join([
        f'Dir "{root}/";', f'Dir::State::status "{root}/var/lib/dpkg/status";',
        *(f'Dir::Etc::{k} "/dev/null";' for k in ("SourceList", "SourceParts", "Main", "Parts", "Preferences",
                                                   "PreferencesParts")),
        f'DPkg::Options:: "--root={root}";', 'DPkg::Options:: "--force-not-root";',
        'DPkg::Options:: "--force-bad-path";', f'DPkg::Options:: "--log={root}/var/log/dpkg.log";',
        'Debug::NoLocking "true";', ""]))
    env = {"APT_CONFIG": str(conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(root),
           "DEBIAN_FRONTEND": "noninteractive"}

    def apt_get(*args):
        return subprocess.run(["apt-get", "-q", "-y", *args], capture_output=True, text=True, env=env)
    return apt_get


@pytest.mark.needs("dpkg-dev", "apt")
def test_apt_upgrades_the_build_of_a_commit_made_in_the_same_second_as_its_parent(versioned_repo, tmp_path):
    """Two commits in one second, each built (a package of each one's
    version), installed by apt one after the other in a throwaway root: the
    second is an upgrade, and apt refuses the first over the second as a
    downgrade. Fails with the dated scheme whenever the second commit's
    hash sorts below the first's (half of all such pairs)."""
    repo = versioned_repo
    _git(repo, "tag", f"v{RELEASE}")
    second = "2026-12-02T09:30:05Z"
    # pairs of commits until the second's hash sorts below the first's as dpkg sorts a version's
    # last field (where the dated scheme put it: its failing case)
    for i in range(64):
        a, b = commit(repo, f"a{i}", second), commit(repo, f"b{i}", second)
        if dpkg_lt(f"0+{b}", f"0+{a}"):
            break
    assert dpkg_lt(f"0+{b}", f"0+{a}")
    first, then = version(repo, commit="HEAD~1"), version(repo)
    assert len(set(_git(repo, "log", "-2", "--format=%ct").split())) == 1     # one second
    apt_get = apt_in(tmp_path / "root")
    debs = tmp_path / "debs"
    debs.mkdir()
    p = apt_get("install", probe_deb(first, debs))
    assert p.returncode == 0, p.stdout + p.stderr
    p = apt_get("install", probe_deb(then, debs))
    assert p.returncode == 0 and "1 upgraded" in p.stdout, p.stdout + p.stderr
    status = subprocess.run(["dpkg-query", f"--admindir={tmp_path}/root/var/lib/dpkg", "-W", "-f=${Version}",
                             "nttrace-version-probe"], capture_output=True, text=True, check=True).stdout
    assert status == then
    p = apt_get("install", str(debs / f"probe-{first}.deb"))
    assert p.returncode != 0 and "DOWNGRADED" in p.stdout, p.stdout + p.stderr
