# SPDX-License-Identifier: Apache-2.0
"""Golden text outputs from snapshots and reports recorded on real kernels
(tests/fixtures/recorded/<kernel>/: this host's 6.18, and the lab's 7.2
builds, base and nt-v3 with the seed series; where a recording kept the
probes' raw maps, maps.json, the snapshot is decoded from those): the `trace` table, every
probe's metrics, `validate`'s text and markdown, and the A/B of base against
nt-v3. Regenerate a golden file only after reading the diff:
NTTRACE_UPDATE_GOLDEN=1 pytest tests/unit/test_golden_outputs.py"""
import io
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES, run_nttrace
from nttrace.validate import runner as validate
from nttrace.ab.compare import merge
from nttrace.exporters.prometheus_collector import ProbeCollector
from nttrace.probes import PROBES
from nttrace.probes.migrate import MigrateProbe
from nttrace.tracing.tracer import replay
from nttrace.trace_cmd import print_table
from test_exporter_golden import RecordedTracer, check_golden, render

RECORDED = FIXTURES / "recorded"
TRACES = sorted(p.parent.name for p in RECORDED.glob("*/trace.json"))
REPORTS = sorted({p.parent.name for p in RECORDED.glob("*/*.report.json")})


MAPS = sorted(p.parent.name for p in RECORDED.glob("*/maps.json"))


def recorded_trace(kernel: str) -> dict:
    """A recorded `trace --json`; where the recording kept the raw maps
    (`trace --record-maps`: maps.json), the attached probes' entries are
    decoded from them here, offline, by the daemon's decoder."""
    trace = json.loads((RECORDED / kernel / "trace.json").read_text())
    if kernel in MAPS:
        trace["probes"] = {**trace["probes"], **replay(recorded_maps(kernel))}
    return trace


def recorded_maps(kernel: str) -> dict:
    return json.loads((RECORDED / kernel / "maps.json").read_text())


@pytest.mark.parametrize("kernel", MAPS)
def test_raw_maps_decode_offline_to_what_the_kernel_showed(kernel):
    """The maps' bytes, replayed through bpf_maps' tables and the probes'
    snapshot(), give exactly the snapshot taken from the live maps when they
    were recorded, and the recorded `trace --json` output."""
    rec = recorded_maps(kernel)
    live = json.loads((RECORDED / kernel / "trace.json").read_text())["probes"]
    assert rec["settled"] and rec["probes"], "a recording whose maps moved while they were dumped"
    replayed = replay(rec)
    for name, entry in rec["probes"].items():
        assert replayed[name] == entry["snapshot"] == live[name], name
        assert any(r.get("calls") or r.get("episodes") or r.get("events") for r in replayed[name]["rows"]), name


def test_a_recording_whose_layout_no_longer_matches_its_c_is_refused():
    rec = recorded_maps(MAPS[0])
    name, probe = next(iter(rec["probes"].items()))
    table = next(iter(probe["maps"]))
    probe["maps"][table]["value_size"] += 8
    with pytest.raises(ValueError, match=f"map {table}: recorded with key/value sizes"):
        replay(rec)


def reports(kernel: str) -> list:
    return sorted((RECORDED / kernel).glob("*.report.json"))


@pytest.mark.parametrize("kernel", TRACES)
def test_trace_table_golden(kernel):
    trace = recorded_trace(kernel)
    out = io.StringIO()
    print_table(trace["probes"], trace["duration_s"], out, stamp="00:00:00")
    text = out.getvalue()
    check_golden(f"trace-{kernel}.txt", text)
    # a line per unattached probe; an attached one prints its title, its
    # header, a line per row and one per note
    expected = 1
    for name, entry in trace["probes"].items():
        if entry["status"] == "attached":
            assert f"  {name} (via {entry['via']})" in text
            expected += 2 + len(entry["rows"]) + len(entry.get("notes", []))
        else:
            expected += 1
    assert text.count("\n") == expected


@pytest.mark.parametrize("kernel", TRACES)
def test_probe_metrics_golden(kernel):
    probes = recorded_trace(kernel)["probes"]
    text = render(ProbeCollector(RecordedTracer(probes), kernel_release=kernel))
    check_golden(f"probes-{kernel}.prom", text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, entry in probes.items():
        if entry["status"] != "attached":
            continue
        for metric in PROBES[name].metrics:
            assert metric.name in families, metric.name
    # the migrate histogram agrees with the rows it was made from: cumulative
    # buckets, +Inf == count == calls, the sum in seconds, the calls a counter
    for row in probes[MigrateProbe.name]["rows"] if probes[MigrateProbe.name]["status"] == "attached" else ():
        labels = {"mode": row["mode"], "reason": row["reason"], "nt": str(row["nt"]).lower()}
        hist = [s for s in families["nttrace_migrate_duration_seconds"].samples
                if {k: s.labels.get(k) for k in labels} == labels]
        buckets = [s for s in hist if s.name.endswith("_bucket")]
        assert [s.value for s in buckets] == sorted(s.value for s in buckets)
        inf = next(s.value for s in buckets if s.labels["le"] == "+Inf")
        count = next(s.value for s in hist if s.name.endswith("_count"))
        total = next(s.value for s in hist if s.name.endswith("_sum"))
        assert inf == count == row["calls"], (kernel, labels)
        assert abs(total - row["latency_ns"]["sum"] * 1e-9) < 1e-12
        calls = families["nttrace_migrate_calls"]
        assert calls.type == "counter" and labels in [s.labels for s in calls.samples]


def test_every_recorded_probe_is_a_registered_probe_with_rows():
    """The recordings name only probes of PROBES (a renamed or removed probe
    fails here until the lab records again), and each probe they hold
    attached made rows. A probe that no recording holds yet adds no golden
    file of its own: its rows are held to its declarations by
    tests/live/test_probes_declared.py on every host that can attach it, and
    it enters these files when the lab's nt-v3 trace scenarios, which trace
    every probe in PROBES, are recorded again."""
    recorded = {name: e for k in TRACES for name, e in recorded_trace(k)["probes"].items()}
    assert set(recorded) <= set(PROBES), set(recorded) - set(PROBES)
    covered = {name for k in TRACES for name, e in recorded_trace(k)["probes"].items()
               if e["status"] == "attached" and e.get("rows")}
    assert covered, "no recording holds an attached probe's rows"


@pytest.mark.parametrize("kernel", REPORTS)
def test_validate_text_and_markdown_golden(kernel):
    report = merge([json.loads(p.read_text()) for p in reports(kernel)])
    text, md = io.StringIO(), io.StringIO()
    validate.print_table(report, text)
    validate.print_markdown(report, md)
    check_golden(f"validate-{kernel}.txt", text.getvalue())
    check_golden(f"validate-{kernel}.md", md.getvalue())
    for c in report["checks"]:
        assert f"{c['status'].upper():5} {c['id']}" in text.getvalue()


@pytest.mark.parametrize("kernel", REPORTS)
def test_validate_textfile_golden(kernel, tmp_path):
    """What `validate --textfile-dir` writes for node_exporter, from the
    recorded reports of one run's worth of distinct checks (a live run has
    each check once; the two memmap reports are the same check twice), run
    time fixed: the recording's own is not kept."""
    from nttrace.validate import textfile
    report = merge([json.loads(p.read_text()) for p in reports(kernel) if not p.name.startswith("memmap_")])
    path = textfile.write(str(tmp_path), report, 1_800_000_000.0, 1_800_000_042.5, validate.exit_code(report))
    text = open(path).read()
    check_golden(f"textfile-{kernel}.prom", text)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert len(fams["nttrace_validate_check_status"].samples) == len(report["checks"])
    assert fams["nttrace_validate_info"].samples[0].labels["nt_revision"] == report["kernel"]["nt_revision"]


def ab_args(base: str = "base-7.2", cur: str = "nt-v3-7.2") -> list[str]:
    """The A/B of two recorded kernels' reports of the checks both ran,
    paths relative to the recordings (what the outputs show of them)."""
    common = sorted({p.name for p in reports(base)} & {p.name for p in reports(cur)})
    return (["validate", "--baseline"] + [f"{base}/{n}" for n in common]
            + ["--current"] + [f"{cur}/{n}" for n in common])


def strip_svg(html_text: str) -> str:
    """The page without its plots' SVG bodies (their bytes follow matplotlib's
    version; the plots are checked in a browser by test_ab_report.py)."""
    import re
    return re.sub(r"<svg.*?</svg>", "<svg/>", html_text, flags=re.S)


def boot_args(ab_dir: str, a_boots: int, b_boots: int) -> list[str]:
    """An A/B of the lab's recorded boots (ab/<dir>/A|B/boot-k), the first
    a_boots of A against the first b_boots of B, memmap scenarios."""
    def side(name, n):
        return [f"ab/{ab_dir}/{name}/boot-{k}/{s}.report.json" for k in range(1, n + 1)
                for s in ("memmap_fsdax", "memmap_devdax")]
    return ["validate", "--baseline", *side("A", a_boots), "--current", *side("B", b_boots)]


# The A/B's layouts: one run a side (never tested), five a side, and sides
# of unequal size.
LAYOUTS = {"ab-base-nt-v3": ab_args(), "ab-5-boots": boot_args("ab-base-nt-v3", 5, 5),
           "ab-5-against-3-boots": boot_args("ab-base-nt-v3", 5, 3)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_the_ab_of_recorded_runs_golden(fmt, layout):
    proc = run_nttrace(*LAYOUTS[layout], "--format", fmt, cwd=RECORDED, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    if fmt == "json":
        body = json.loads(out)
        out = json.dumps({k: body[k] for k in ("baseline_header", "baseline_comparison", "baseline_legend",
                                               "baseline_runs", "baseline_conditions")},
                         indent=1, sort_keys=True) + "\n"
    elif fmt == "html":
        out = strip_svg(out)
    check_golden(f"{layout}.{ {'text': 'txt', 'markdown': 'md', 'json': 'json', 'html': 'html'}[fmt] }", out)


@pytest.mark.parametrize("kernel", TRACES)
def test_every_declared_column_and_metric_key_is_in_every_recorded_row(kernel):
    """The rows' layout is what the probe declares: each column, metric value
    and label names a key every row of a recorded snapshot has (a value may
    be null where the probe cannot know it, e.g. migrate_fn's page counts)."""
    for name, entry in recorded_trace(kernel)["probes"].items():
        if entry["status"] != "attached":
            continue
        probe = PROBES[name]
        keys = [c.key for c in probe.columns] + [m.value for m in probe.metrics]
        keys += [k for m in probe.metrics for _label, k in m.labels]
        for row in entry["rows"]:
            for key in keys:
                head, _, rest = key.partition(".")
                assert head in row and (not rest or row[head] is None or rest in row[head]), (name, key, row)
