# SPDX-License-Identifier: Apache-2.0
"""The perf adapter's binding path, run for real: perf's Python extension
built from the lab's Linux 7.2 source (lab/perf_binding.py, cached),
imported in a child process in place of Debian's, counting the same work as
the syscall path: page faults of a first touch and the task clock of a spin."""
import statistics

import pytest



@pytest.fixture(scope="module")
def binding_dir():
    from lab import perf_binding
    return perf_binding.build()


@pytest.mark.needs("perf-software", "kernel-build")
def test_binding_path_counts_what_the_syscall_path_counts(binding_dir):
    from lab import perf_binding
    pages = 20000
    result = perf_binding.compare(binding_dir, pages=pages, spin_s=0.2, rounds=3)
    assert result["can_count"], result["module"]
    assert result["module"].startswith(str(binding_dir)), "the child imported another perf module"
    by_path = {p: [r for r in result["rows"] if r["path"] == p] for p in ("binding", "syscall")}
    assert len(by_path["binding"]) == len(by_path["syscall"]) == 3
    medians = {}
    for path, rows in by_path.items():
        for r in rows:
            pf, tc = r["page_faults"], r["task_clock"]
            assert pf["error"] is None and tc["error"] is None, (path, pf, tc)
            assert pf["path"] == path
            assert abs(pf["value"] - pages) <= 0.02 * pages, (path, pf)          # one fault a page
            assert 0.9 <= tc["value"] / r["cpu_ns"] <= 1.1, (path, tc, r["cpu_ns"])  # the thread's own CPU time
        medians[path] = statistics.median(r["page_faults"]["value"] for r in rows)
    assert abs(medians["binding"] - medians["syscall"]) <= 0.01 * pages, medians
