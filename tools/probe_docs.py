#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the docs' tables that follow from the probes' declarations
(nttrace.probes.PROBES: each probe's `summary`, `source`, `metrics` and
`exercise`), so that a new probe is in them without a hand edit:

  docs/probes.md   probe-table    each probe's module and BPF C
  docs/daemon.md   probe-metrics  the metric families each probe exports
  docs/validate.md probe-checks   validate's probe.<name> check of each
                                  probe whose exercise runs as declared

Each table sits between `<!-- generated: NAME ... -->` and
`<!-- end generated: NAME -->` in its page; the text around it is the
page's own. It reads the nttrace that Python imports (`make install` first):

    .venv/bin/python tools/probe_docs.py --write [ROOT]   rewrite the tables
    .venv/bin/python tools/probe_docs.py --check [ROOT]   exit 1 naming each stale page

Exit 2, in one line, for a page without its block or a probe without a
summary.

ROOT is the checkout (default: the one holding this file).
tests/unit/test_probe_docs.py fails while a committed table differs from
what this writes."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


class DocsError(Exception):
    """A page or a declaration the tables cannot be written from (exit 2)."""


PAGES = {"probe-table": "docs/probes.md", "probe-metrics": "docs/daemon.md", "probe-checks": "docs/validate.md"}


def module_path(cls) -> str:
    """The checkout path of a probe's module (nttrace.probes.x: tracer/probes/x.py)."""
    return "tracer/" + cls.__module__.removeprefix("nttrace.").replace(".", "/") + ".py"


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def probe_table(probes: dict) -> str:
    rows = ["| path | what |", "|---|---|"]
    for name, cls in probes.items():
        rows.append(f"| `{module_path(cls)}` | the {name} probe: {cls.summary} |")
    sources: dict[str, list[str]] = {}
    for name, cls in probes.items():
        sources.setdefault(cls.source, []).append(name)
    for source, names in sources.items():
        rows.append(f"| `bpf/{source}` | the program of the {_names(names)} probe{'s' if len(names) > 1 else ''} |")
    return "\n".join(rows)


def family(metric) -> str:
    """A metric's family as /metrics shows it: a counter's ends in _total."""
    return metric.name + ("_total" if metric.kind == "counter" else "")


def metric_table(probes: dict) -> str:
    rows = ["| family | labels | from |", "|---|---|---|"]
    for name, cls in probes.items():
        if not cls.metrics:
            continue
        families = list(dict.fromkeys(family(m) for m in cls.metrics))
        labels = list(dict.fromkeys(label for m in cls.metrics for label, _key in m.labels))
        consts: dict[tuple[str, str], list[str]] = {}     # (label, family): its values
        for m in cls.metrics:
            for label, value in m.const_labels:
                values = consts.setdefault((label, family(m)), [])
                if value not in values:
                    values.append(value)
        said = [f"`{label}`" for label in labels]
        said += [f"`{label}` on `{fam}`: {', '.join(values)}" for (label, fam), values in consts.items()]
        rows.append(f"| {', '.join(f'`{f}`' for f in families)} | {', '.join(said)} | {name}: {cls.summary} |")
    return "\n".join(rows)


def check_table(probes: dict, catalog: list) -> str:
    rows = ["| check | workload | the kernel's count | runs |", "|---|---|---|---|"]
    for check in catalog:
        if not check.id.startswith("probe."):
            continue
        name = check.id.removeprefix("probe.")
        ex = probes[name].exercise
        truths = "; else ".join(f"{t.source}, {t.tolerance.describe()}" for t in ex.truths)
        count = truths or f"none: {ex.no_truth}"
        runs = "unasked, `--quick` too" if check.quick else f"`--exercise {name}`" + (" (the lab runs it)"
                                                                                       if ex.lab else "")
        rows.append(f"| `{check.id}` | {ex.workload} | {count} | {runs} |")
    return "\n".join(rows)


def tables() -> dict[str, str]:
    """Each generated table's text, from the nttrace Python imports."""
    from nttrace.probes import PROBES
    from nttrace.validate import checks
    missing = [name for name, cls in PROBES.items() if not cls.summary]
    if missing:
        raise DocsError(f"no `summary` declared by probe {', '.join(missing)}")
    return {"probe-table": probe_table(PROBES), "probe-metrics": metric_table(PROBES),
            "probe-checks": check_table(PROBES, checks.catalog())}


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {name}\b[^\n]*-->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def render(root: Path) -> dict[str, str]:
    """{page: its text with each generated table as the declarations make it}."""
    out: dict[str, str] = {}
    for name, table in tables().items():
        page = PAGES[name]
        text = out.get(page) or (root / page).read_text()
        block = _block(name)
        if not block.search(text):
            raise DocsError(f"{page} has no <!-- generated: {name} --> ... <!-- end generated: {name} --> block")
        out[page] = block.sub(lambda m: m.group(1) + "\n" + table + "\n\n" + m.group(3), text, count=1)
    return out


def stale(root: Path) -> list[str]:
    """The pages whose committed tables differ from the declarations'."""
    return [page for page, text in render(root).items() if (root / page).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="probe_docs.py", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated tables")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each page whose tables are stale")
    ap.add_argument("root", nargs="?", type=Path, default=HERE, help="the checkout (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        return run(args)
    except (DocsError, OSError) as exc:
        print(f"probe_docs: {exc}", file=sys.stderr)
        return 2


def run(args) -> int:
    if args.write:
        for page, text in render(args.root).items():
            if (args.root / page).read_text() != text:
                (args.root / page).write_text(text)
                print(f"probe_docs: wrote {page}")
        return 0
    old = stale(args.root)
    for page in old:
        print(f"probe_docs: {page}: its probe tables differ from the declarations "
              f"(tools/probe_docs.py --write)", file=sys.stderr)
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main())
