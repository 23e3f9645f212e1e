# SPDX-License-Identifier: Apache-2.0
"""The daemon's handover is data the Tracer adopts (nttrace.tracing.tracer.adopt):
a probe handed over attached reads the maps it was given and carries the state
the loader's probe worked out; one handed over unattached keeps its reason; one
the loader sent nothing for is unavailable, saying so. Read from the maps a
real kernel filled (the nt-v3-7.2 recording), as the daemon reads live ones."""
import json

from conftest import FIXTURES
from nttrace.kernel.metadata import KernelMetadata
from nttrace.kernel.sysroot import Sysroot
from nttrace.probe_framework.bpf_maps import Handed, MapSet
from nttrace.capabilities.report import Capability
from nttrace.probes.migrate import MigrateProbe
from nttrace.tracing.tracer import adopt, snapshot_entry

RECORDING = json.loads((FIXTURES / "recorded" / "nt-v3-7.2" / "maps.json").read_text())


def probe(tmp_path) -> MigrateProbe:
    rec = RECORDING["probes"][MigrateProbe.name]
    meta = KernelMetadata.from_json(RECORDING["kernel"])
    caps = {k: Capability.from_json(v) for k, v in RECORDING["caps"].items()}
    return MigrateProbe(meta, caps, rec["options"], Sysroot(tmp_path))


def test_an_attached_probe_is_adopted_with_its_maps_and_state(tmp_path):
    rec = RECORDING["probes"][MigrateProbe.name]
    maps = MapSet.replay(MigrateProbe.source, rec["maps"])
    handed = Handed(rec["status"], rec["state"], maps)
    p = probe(tmp_path)
    status = adopt(p, handed)
    assert status == rec["status"] and status["status"] == "attached"
    assert p.bpf is maps and handed.maps is None      # taken: closing the handover no longer closes it
    assert p.state() == rec["state"]
    handed.close()
    entry = snapshot_entry(p, status)
    assert [r["calls"] for r in entry["rows"]] == [r["calls"] for r in rec["snapshot"]["rows"]]


def test_an_unattached_probe_keeps_its_reason_and_reads_nothing(tmp_path):
    p = probe(tmp_path)
    status = adopt(p, Handed({"status": "unavailable", "reason": "no tracepoint migrate:x"}))
    assert status == {"status": "unavailable", "reason": "no tracepoint migrate:x"} and p.bpf is None


def test_a_probe_the_loader_sent_nothing_for_is_unavailable(tmp_path):
    p = probe(tmp_path)
    status = adopt(p, None)
    assert status["status"] == "unavailable" and "handed nothing over" in status["reason"] and p.bpf is None
