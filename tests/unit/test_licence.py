# SPDX-License-Identifier: Apache-2.0
"""The licence, file by file: LICENSE at the root is the Apache License 2.0,
every tracked source file names its licence in an SPDX line at its top, and
debian/copyright (DEP-5) gives each path of the tree a licence that agrees
with the SPDX lines.

Which files are source here (each checked by what git tracks):
- code: *.py, *.sh, *.c, *.h (bpf/*.bpf.c included), Makefile, and any file
  that starts with a shebang (debian/rules, maintainer scripts, .ci/run);
- configuration with a comment syntax: *.toml, *.yml, *.yaml, *.cfg,
  *.service, *.timer;
- the kernel fixups, lab/kernel/fixups/*.diff (their free-text header,
  before the first `---`, takes the line).
Not checked: documentation (*.md: Markdown has no comment that stays out of
the rendered page; debian/copyright covers it by its `Files: *`), JSON (no
comment syntax), tests/fixtures/ (recorded kernel and tool output, golden
files and configs the tests read as inputs: data, not source), and Debian's
own control files (debian/control, copyright, changelog, source/format,
*.install, tests/control: formats of their own, covered by debian/copyright).
"""
import fnmatch
import re
import subprocess

import pytest

from conftest import REPO

APACHE = "Apache-2.0"
BPF = "GPL-2.0-only OR BSD-2-Clause"
KERNEL = "GPL-2.0-only"
# the SPDX line must come first, or right after a shebang (and, in a .diff,
# may follow nothing else): the first three lines leave room for a shebang
# and an encoding or mode line
HEAD_LINES = 3
SOURCE_SUFFIXES = (".py", ".sh", ".c", ".h", ".toml", ".yml", ".yaml", ".cfg", ".service", ".timer", ".diff")
NOT_SOURCE = ("tests/fixtures/*", "*.md", "*.json")
SPDX = re.compile(r"SPDX-License-Identifier:\s*(.+?)\s*(?:\*/)?\s*$")


def tracked() -> list[str]:
    if not (REPO / ".git").exists():       # a package build's or autopkgtest's tree: git's list is not there
        pytest.skip("not a git checkout: which files are tracked is unknown")
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (REPO / f).is_file()]


def is_source(path: str) -> bool:
    if any(fnmatch.fnmatch(path, pattern) for pattern in NOT_SOURCE):
        return False
    if path.endswith(SOURCE_SUFFIXES) or path.rsplit("/", 1)[-1] == "Makefile":
        return True
    with open(REPO / path, "rb") as f:
        return f.read(2) == b"#!"


def expected(path: str) -> str:
    """The licence a file carries: the BPF programs the kernel's
    GPL-compatible dual licence, the kernel fixups the kernel's, all else
    the project's."""
    if re.fullmatch(r"bpf/[^/]+\.[ch]", path):
        return BPF
    if fnmatch.fnmatch(path, "lab/kernel/fixups/*.diff"):
        return KERNEL
    return APACHE


def declared(path: str) -> str | None:
    with open(REPO / path, encoding="utf-8", errors="replace") as f:
        head = [f.readline() for _ in range(HEAD_LINES)]
    for line in head:
        if m := SPDX.search(line):
            return m.group(1)
    return None


def test_licence_is_apache_2_0_in_full():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10000   # the full text, not a pointer to it


def test_the_rules_pick_each_files_licence():
    assert expected("bpf/migrate.bpf.c") == BPF and expected("bpf/common.h") == BPF
    assert expected("bpf/__init__.py") == APACHE            # the loader's Python is the project's
    assert expected("lab/kernel/fixups/v2-2of3-migrate.diff") == KERNEL
    assert expected("native/nt_copy.c") == APACHE
    assert is_source("debian/rules") and is_source("tools/build-deb.sh") and is_source("Makefile")
    assert not is_source("docs/install.md") and not is_source("tests/fixtures/web_config/good-empty.yml")


def test_every_source_file_has_its_spdx_line():
    files = [f for f in tracked() if is_source(f)]
    assert len(files) > 100, files          # the tree's sources, not an empty listing
    wrong = {f: declared(f) for f in files if declared(f) != expected(f)}
    assert wrong == {}, "\n".join(f"{f}: {d or 'no SPDX line'} (wants {expected(f)})" for f, d in wrong.items())


def dep5_paragraphs() -> list[dict[str, str]]:
    text = (REPO / "debian" / "copyright").read_text()
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields, key = {}, None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        paragraphs.append(fields)
    return paragraphs


def copyright_licence(path: str) -> str:
    """debian/copyright's licence for PATH: the last Files paragraph that
    matches it wins (DEP-5), `*` matching across `/`."""
    found = None
    for p in dep5_paragraphs():
        if "Files" in p and any(fnmatch.fnmatchcase(path, g) for g in p["Files"].split()):
            found = p["License"].split("\n")[0]
    assert found, f"debian/copyright covers no {path}"
    return found


@pytest.mark.parametrize("path", ["tracer/cli.py", "bpf/migrate.bpf.c", "bpf/common.h", "bpf/__init__.py",
                                  "lab/kernel/fixups/v2-2of3-compaction.diff", "debian/rules", "LICENSE"])
def test_debian_copyright_agrees_with_the_spdx_rules(path):
    dep5 = {"Apache-2.0": APACHE, "GPL-2.0-only or BSD-2-Clause": BPF, "GPL-2.0-only": KERNEL}
    assert dep5[copyright_licence(path)] == expected(path)


def test_every_tracked_path_is_covered_and_each_licence_has_its_text():
    paragraphs = dep5_paragraphs()
    assert paragraphs[0]["Format"].startswith("https://www.debian.org/doc/packaging-manuals/copyright-format/1.0")
    assert any(p.get("Files") == "*" for p in paragraphs)
    named = {p["License"].split("\n")[0] for p in paragraphs if "Files" in p}
    texts = {p["License"].split("\n")[0] for p in paragraphs if "Files" not in p and "License" in p}
    short = {n for name in named for n in name.split(" or ")}
    assert short <= texts, short - texts
    assert {copyright_licence(f) for f in tracked()} == named        # no paragraph that covers nothing
