# SPDX-License-Identifier: Apache-2.0
"""docs/validate.md's copy commands make a --sysroot of this host that
validate judges as it judges the live host, on every fact a copy can hold
(the offline rules on made-up copies: tests/unit/test_sysroot_offline.py)."""
import json
import re
import subprocess

import pytest

from conftest import REPO, run_nttrace

SNIPPET = re.compile(r"<!-- sysroot-copy: [^>]*-->\n```sh\n(.*?)\n```", re.S)
# what only a live run can know: bcc, fentry and perf are tried, not read;
# privileges are this process's
LIVE_ONLY = ("bcc", "fentry", "perf:software", "perf:hardware", "cap:sys_admin", "cap:perfmon", "cap:bpf")


@pytest.mark.needs("root", "btf", "tracefs")
def test_the_documented_copy_is_judged_as_the_live_host(tmp_path):
    """Fails if the documented commands leave out a file validate reads (a
    capability the live host has reads as missing in the copy, or the other
    way), if the copy's enums differ from the kernel's, or if the machine's
    kind or mitigations are not the copy's reading of this host."""
    script = SNIPPET.search((REPO / "docs/validate.md").read_text()).group(1)
    dest = tmp_path / "copy"
    script = re.sub(r"^DEST=\S+", f"DEST={dest}", script, count=1, flags=re.M)
    subprocess.run(["bash", "-c", script], check=True, timeout=120)
    live = json.loads(run_nttrace("validate", "--json", "--check", "env.*", "--check", "kernel.nt_support",
                                  check=True).stdout)
    copy = json.loads(run_nttrace("validate", "--json", "--sysroot", str(dest), "--check", "env.*",
                                  "--check", "kernel.nt_support", check=True).stdout)
    differ = {k: (live["capabilities"][k], copy["capabilities"][k]) for k in live["capabilities"]
              if k not in LIVE_ONLY and live["capabilities"][k]["available"] != copy["capabilities"][k]["available"]}
    assert differ == {}
    assert copy["kernel"] == live["kernel"]
    statuses = {c["id"]: c["status"] for c in live["checks"]}
    for c in copy["checks"]:
        if c["id"] not in ("env.fentry", "env.perf_hardware"):     # live-only capabilities
            assert c["status"] == statuses[c["id"]], (c, statuses[c["id"]])
    kind = "bare-metal" if live["machine"]["kind"] == "bare-metal" else "vm"
    assert copy["machine"]["kind"] == kind and copy["machine"]["evidence"].startswith("the copy's proc/cpuinfo")
    assert copy["machine"]["mitigations"] == live["machine"]["mitigations"]
