# SPDX-License-Identifier: Apache-2.0
"""native.nt_benefit on this host: each series gets its verdict, its reason
and its evidence, and the table prints a line per series."""
import json

import pytest

from conftest import run_nttrace
from nttrace.validate.checks import NOISY, SERIES_STATUSES, SeriesVerdict, overall


@pytest.mark.needs("root", "btf", "tracefs", "bcc")
def test_the_live_check_gives_each_series_its_verdict_and_evidence():
    proc = run_nttrace("validate", "--quick", "--check", "native.nt_benefit", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    check = json.loads(proc.stdout)["checks"][0]
    series = {v["series"]: v for v in check["series"]}
    assert set(series) == {"zone_device_template", "nt_demotion"}
    for v in series.values():
        assert v["status"] in SERIES_STATUSES and v["summary"] and v["evidence"]
        if v["status"] != NOISY:
            assert v["summary"].startswith("on this CPU")
    assert check["status"] == overall([SeriesVerdict(k, "", v["status"], "") for k, v in series.items()])
    mm = series["zone_device_template"]["evidence"]
    assert set(mm["ms_median"]) == {"slow", "template_cached", "template_movnti", "template_nt", "movnti_write_limit",
                                    "nt_write_limit"}
    assert mm["template_movnti_shorter_pct"]["n"] == check["evidence"]["plan"]["runs"]
    pc = series["nt_demotion"]["evidence"]["vs_memcpy"]
    assert {"movnti_prefetchnta/per_folio", "movnti_prefetchnta/per_page", "movnti_prefetchnta/none"} <= set(pc)
    table = run_nttrace("validate", "--quick", "--check", "native.nt_benefit", timeout=300).stdout.splitlines()
    # a table row per series ("STATUS  native.nt_benefit  ..."); the closing paragraph may name the check too
    # (the contention it ran beside), which is not a row
    rows = [line for line in table if line.split()[1:2] == ["native.nt_benefit"]]
    # (a second run: each row's verdict is one a series can have, not necessarily the first run's)
    assert len(rows) == 2 and all(r.split()[0] in {s.upper() for s in SERIES_STATUSES} for r in rows), rows

