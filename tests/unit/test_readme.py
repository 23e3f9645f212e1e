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


# -- what the README claims, held where it can be checked ------------------------------------------
def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def make_rule(target: str) -> tuple[list[str], list[str]]:
    """(prerequisites, recipe lines) of a Makefile target."""
    lines = (REPO / "Makefile").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[at + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return lines[at].split(":", 1)[1].split(), recipe


def make_variable(name: str) -> str:
    m = re.search(rf"^{name}\s*\?=\s*(\S+)", (REPO / "Makefile").read_text(), re.M)
    return m.group(1)


def test_the_commands_table_lists_every_command():
    """Every subcommand the parser holds (and each of theirs, but for what
    its help says is not for users) is in the table, in a row of its own
    command. Fails when a command is added and the front door not told."""
    import argparse

    from nttrace.cli import build_parser
    rows = [m.group(1) for line in section("Commands").splitlines() if (m := re.match(r"\| (`nttrace .*?`) \|", line))]

    def subcommands(parser):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                helps = {c.dest: c.help or "" for c in a._choices_actions}
                return {name: sub for name, sub in a.choices.items() if "not for users" not in helps.get(name, "")}
        return {}
    for name, sub in subcommands(build_parser()).items():
        cells = [r for r in rows if r.strip().startswith(f"`nttrace {name}")]
        assert cells, f"README's commands table has no row for `nttrace {name}`"
        for inner in subcommands(sub):
            assert any(re.search(rf"[ |]{inner}\b", c) for c in cells), f"`nttrace {name} {inner}` not in the table"


def test_the_first_commands_are_what_the_makefile_and_ci_do():
    """The first commands' block: `make validate` sets the host up first
    (make setup) and runs the venv's nttrace, which is the command named
    next; `make test` is what CI runs (.ci/run); the setup steps the text
    lists are the Makefile's. Fails if a command, the venv's path, CI's test
    command or setup's steps change and the README does not."""
    block = re.search(r"## First commands\n.*?```sh\n(.*?)\n```", README.read_text(), re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ["make validate", f"{make_variable('VENV')}/bin/nttrace validate --quick", "make test-unit",
                        "make test"]
    prereqs, recipe = make_rule("validate")
    assert prereqs == ["setup"] and recipe == ["$(VENV)/bin/nttrace validate"]
    assert make_rule("setup")[0] == ["system-packages", "tracefs", "kernel-headers", "install"]
    text = section("First commands")
    for said in ("make setup", "tools/install-system-packages.sh", "mounts tracefs",
                 "tools/link-fallback-kernel-headers.sh", "builds\n`.venv`", "Nothing is put on PATH"):
        assert said in text, said
    assert make_rule("system-packages")[1] == ["@tools/install-system-packages.sh"]
    assert make_rule("kernel-headers")[1] == ["@tools/link-fallback-kernel-headers.sh"]
    assert "\nmake test\n" in (REPO / ".ci" / "run").read_text(), ".ci/run no longer runs the README's `make test`"
    assert "nttrace = nttrace.cli:main" in (REPO / "setup.cfg").read_text()


def test_what_it_needs_is_what_validate_cannot_work_without():
    """The needs section names each thing env.core fails without (BTF,
    tracefs, each migrate tracepoint, bcc) and the Debian packages of bcc and
    perf, which the setup script installs. Fails if nttrace comes to need
    something the front door does not say."""
    from nttrace.validate.checks.env import ESSENTIAL
    text = section("What it needs")
    words = {"btf": "BTF", "tracefs": "tracefs", "bcc": "bcc"}
    for need in ESSENTIAL:
        said = words.get(need) or ":".join(need.split(":")[1:])
        assert said in text, f"README's needs do not name {need}"
    script = (REPO / "tools" / "install-system-packages.sh").read_text()
    for package in ("python3-bpfcc", "linux-perf"):
        assert f"`{package}`" in text and re.search(rf"^\s+{package}\b", script, re.M), package


def test_the_suite_times_are_the_recorded_ci_runs():
    """`make test`'s times in the README (first run, and with the caches
    warm) are within a quarter of the newest recorded CI runs on a 2-core
    machine, cold and warm (benchmarks/ci-*.json, BENCHMARKS.md's CI
    table). Fails when the suite's time moves and the README still says
    the old one."""
    import json
    text = " ".join(section("First commands").split())
    first = re.search(r"about (an hour|\d+ minutes) the first time", text).group(1)
    after = re.search(r"about (\d+) minutes once they are cached", text).group(1)
    said = {True: 60.0 if first == "an hour" else float(first.split()[0]), False: float(after)}
    runs = [json.loads(p.read_text()) for p in (REPO / "benchmarks").glob("ci-*.json")]
    for cold in (True, False):
        newest = max((r for r in runs if r.get("cold") is cold and (r.get("host") or {}).get("cpus") == 2),
                     key=lambda r: r["started"])
        minutes = newest["wall_s"] / 60
        assert 0.75 <= minutes / said[cold] <= 1.25, (cold, said[cold], round(minutes, 1), newest["commit"])


def test_every_path_the_readme_names_exists():
    """A file or directory of the checkout named in a code span (a script,
    a module's directory, a golden file) exists. Fails on a README that
    names what was moved or removed."""
    spans = set(re.findall(r"`([\w.-]+/[\w./-]*)`", README.read_text()))
    named = [s for s in spans if not s.startswith((".venv/", "dist/", "../")) and "*" not in s]
    assert "tools/install-system-packages.sh" in named and "lab/traffic/" in named
    for path in named:
        assert (REPO / path).exists(), f"README names {path}, which does not exist"
