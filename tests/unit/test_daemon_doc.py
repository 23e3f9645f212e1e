# SPDX-License-Identifier: Apache-2.0
"""docs/daemon.md's metrics table names every metric family the daemon
exports, and nothing it does not: the probes' families from their own
declarations, the collectors' from their source."""
import re
from fnmatch import fnmatch

from conftest import REPO
from nttrace.probes import PROBES

DOC = REPO / "docs" / "daemon.md"
FAMILY = re.compile(r"(Counter|Gauge|Histogram)MetricFamily\(\s*(f?)\"(nttrace_[a-z_{}]+)\"")


def documented() -> set[str]:
    text = DOC.read_text()
    table = text[text.index("## The metrics"):]
    table = table[:table.index("\n## ")]
    rows = [line for line in table.splitlines() if line.startswith("| `nttrace_")]
    return {name for row in rows for name in re.findall(r"`(nttrace_[a-z_*]+)`", row.split("|")[1])}


def declared() -> set[str]:
    """Exposition names: a counter's family ends in _total. A family whose
    name is built at run time (vmstat's, one per kernel counter) is its
    prefix and a *."""
    names = {m.name + ("_total" if m.kind == "counter" else "") for p in PROBES.values() for m in p.metrics}
    for path in sorted((REPO / "exporters").glob("*.py")):
        for kind, formatted, name in FAMILY.findall(path.read_text()):
            name = re.sub(r"\{[a-z_]+\}", "*", name) if formatted else name
            names.add(name + ("_total" if kind == "Counter" else ""))
    return names


def test_the_doc_names_every_family_and_only_those():
    doc, code = documented(), declared()
    assert len(doc) > 30
    missing = {n for n in code if not any(fnmatch(n, d) or fnmatch(d, n) for d in doc)}
    unknown = {d for d in doc if not any(fnmatch(d, n) for n in code)}
    assert not missing, f"exported but not in docs/daemon.md's metrics table: {sorted(missing)}"
    assert not unknown, f"in docs/daemon.md's metrics table but not exported: {sorted(unknown)}"


def test_the_web_config_example_is_the_shipped_file_and_holds_no_credential():
    """docs/daemon.md's example web config says what tracer/data/web-config.yml
    (the package's conffile) says, and, as it, carries no bcrypt hash: fails
    on a working example password in the docs (a "change-me" someone keeps)."""
    import yaml
    text = DOC.read_text()
    section = text[text.index("The example (`tracer/data/web-config.yml`)"):]
    example = section[section.index("```yaml\n") + 8:section.index("```\n", section.index("```yaml\n") + 8)]
    shipped = (REPO / "tracer" / "data" / "web-config.yml").read_text()
    assert yaml.safe_load(example) == yaml.safe_load(shipped)
    bcrypt_hash = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")
    assert not bcrypt_hash.search(text) and not bcrypt_hash.search(shipped)
