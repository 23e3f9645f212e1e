# SPDX-License-Identifier: Apache-2.0
"""A docs page's example under `<!-- recorded: PATH -->` is an excerpt of
that recording (real output, kept in tests/fixtures): its lines stand in the
file in the same order, "..." marking what is left out."""
import re

import pytest

from conftest import REPO, assert_excerpt

BLOCK = re.compile(r"<!-- recorded: (\S+) -->\n```[a-z]*\n(.*?)\n```", re.S)
PAGES = sorted((REPO / "docs").glob("*.md"))


def test_some_page_shows_a_recording():
    assert any(BLOCK.search(p.read_text()) for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_recorded_example_is_an_excerpt_of_its_recording(page):
    for path, block in BLOCK.findall(page.read_text()):
        assert_excerpt(block, path, page.name)
