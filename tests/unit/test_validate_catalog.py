# SPDX-License-Identifier: Apache-2.0
"""validate's catalog: one check per exercised path, and each check's
evidence read back through the check that wrote it, from reports recorded on
the lab's kernels (tests/fixtures/recorded), under the ids checks had then."""
import json
import re

from conftest import FIXTURES, REPO
from nttrace.probes import PROBES
from nttrace.validate import checks, evidence
from nttrace.validate.checks.exercises import CompactionEvidence, MemcgReclaimEvidence, _runnable
from nttrace.validate.checks.kernel import DemotionEvidence

RECORDED = FIXTURES / "recorded"


def recorded_check(kernel: str, report: str, cid: str) -> dict:
    rep = json.loads((RECORDED / kernel / f"{report}.report.json").read_text())
    return next(c for c in rep["checks"] if c["id"] == cid)


def test_one_check_per_exercised_path():
    ids = [c.id for c in checks.catalog()]
    assert len(ids) == len(set(ids)), ids
    exercised = {f"probe.{p.name}" for p in PROBES.values() if p.exercise is not None and _runnable(p.exercise)}
    assert {i for i in ids if i.startswith("probe.")} == exercised
    # outside probe.*, only the demotion check runs a probe's workload: its
    # own path (a demotion, watched by three probes)
    others = {c.id for c in checks.catalog() if not c.id.startswith("probe.")
              and any(p.exercise.workload.split(" (")[0] in c.triggers for p in PROBES.values() if p.exercise)}
    assert others == {"kernel.demotion_nt"}

def test_a_report_under_an_id_no_check_has_reads_untyped():
    """The recorded compactions carry an id no check has
    (kernel.migrate_observed): no check claims them, and their evidence reads
    as any check's without a class: every number a descriptive figure."""
    for kernel in ("base-7.2", "nt-v3-7.2"):
        c = recorded_check(kernel, "compaction", "kernel.migrate_observed")
        assert checks.find(c["id"]) is None
        ev = evidence.of(c)
        assert type(ev) is evidence.Untyped
        figs = {f.metric: f for f in ev.figures()}
        assert figs["compaction_calls"].value == c["evidence"]["compaction_calls"] > 0
        assert {f.role for f in figs.values()} == {"descriptive"}
    assert type(evidence.of(recorded_check("nt-v3-7.2", "compaction", "kernel.nt_support"))) is not evidence.Untyped


def test_each_path_judges_its_own_rows():
    """What a count cannot say: compaction with no MR_COMPACTION call, a
    memcg reclaim with no episode, fails the check."""
    no_compaction = CompactionEvidence(rows=[{"mode": "MIGRATE_SYNC", "reason": "MR_NUMA_MISPLACED", "calls": 3}])
    assert no_compaction.fault() == "compaction ran but the migrate probe saw no MR_COMPACTION call"
    idle = MemcgReclaimEvidence(run={"interface": "memory.reclaim"}, rows=[{"kind": "memcg", "episodes": 0}])
    assert idle.fault() == "memory.reclaim ran but the probe saw no memcg reclaim episode"
    busy = MemcgReclaimEvidence(run={"interface": "memory.reclaim"}, rows=[{"kind": "memcg", "episodes": 2}])
    assert busy.fault() is None


def test_an_unknown_or_gone_check_reads_untyped_and_a_known_one_typed():
    assert type(evidence.of({"id": "kernel.no_such_check", "evidence": {"n": 3}})) is evidence.Untyped
    c = recorded_check("nt-v3-7.2", "demotion", "kernel.demotion_nt")
    assert type(evidence.of(c)) is DemotionEvidence
    assert evidence.primary_reason("kernel.demotion_nt") == DemotionEvidence.PRIMARY_REASON
    assert evidence.primary_reason("kernel.no_such_check") == "the scenario’s own cost"


def test_the_validate_page_describes_every_check():
    """docs/validate.md has a word for each check --list prints, and no
    check that is gone."""
    page = (REPO / "docs" / "validate.md").read_text()
    ids = {c.id for c in checks.catalog()}
    missing = sorted(i for i in ids if f"`{i}`" not in page)
    assert not missing, f"docs/validate.md does not describe {missing}"
    named = set(re.findall(r"`((?:env|native|kernel|perf|probe)\.[a-z_]+)`", page))
    assert named <= ids, sorted(named - ids)
