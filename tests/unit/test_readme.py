# SPDX-License-Identifier: Apache-2.0
"""README.md is the front door: short, its examples real, its links alive.
Each example block under a `<!-- golden: PATH -->` marker is an excerpt of
that golden output (recorded on a real kernel and held by the golden tests):
its lines stand in the golden file in the same order, so the README cannot
show an output nttrace no longer prints."""
import re

from conftest import REPO, assert_excerpt

README = REPO / "README.md"
GOLDEN_BLOCK = re.compile(r"<!-- golden: (\S+) -->\n```[a-z]*\n(.*?)\n```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_a_front_door_not_a_manual():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: the depth belongs in docs/"


def test_each_example_is_an_excerpt_of_its_golden_output():
    blocks = GOLDEN_BLOCK.findall(README.read_text())
    assert len(blocks) >= 2, "README shows a trace table and a validate excerpt"
    for path, block in blocks:
        assert_excerpt(block, path, "README")


def test_every_link_resolves():
    for target in LINK.findall(README.read_text()):
        if "://" in target:
            continue
        assert (REPO / target).exists(), f"README links {target}, which does not exist"


def test_a_newcomer_reaches_the_ab_the_daemon_and_adding_a_probe_in_one_click():
    links = set(LINK.findall(README.read_text()))
    for page in ("docs/ab.md", "docs/ab-loop.md", "docs/daemon.md", "docs/probes.md", "docs/validate.md",
                 "docs/install.md"):
        assert page in links, f"README does not link {page}"
