# SPDX-License-Identifier: Apache-2.0
"""Where a scratch memory cgroup goes: under the cgroup a systemd unit with
Delegate= hands its process (nttrace-validate.service says so with
NTTRACE_DELEGATED_CGROUP=1), else in the hierarchy's root. The cgroup files
here are a directory of this test's: the moves and the controllers
themselves are the kernel's, proven in the lab's Debian guest
(tests/lab/test_deb.py: the validate unit's probe.reclaim as root's)."""
import pytest

from nttrace.workloads import scratch_cgroup
from nttrace.workloads.scratch_cgroup import NoMemoryCgroup, own_cgroup, scratch_parent

UNIT_CGROUP = "0::/system.slice/nttrace-validate.service\n"


def cgroup_tree(tmp_path, controllers="cpu io memory pids"):
    unit = tmp_path / "system.slice" / "nttrace-validate.service"
    unit.mkdir(parents=True)
    (unit / "cgroup.controllers").write_text(controllers + "\n")
    return unit


def test_own_cgroup_is_the_v2_line_of_proc_self_cgroup(tmp_path):
    hybrid = "12:memory:/system.slice/x.service\n1:name=systemd:/system.slice/x.service\n" + UNIT_CGROUP
    assert own_cgroup(tmp_path, hybrid) == tmp_path / "system.slice" / "nttrace-validate.service"
    with pytest.raises(NoMemoryCgroup):
        own_cgroup(tmp_path, "4:memory:/\n")


def test_a_delegated_unit_makes_its_scratch_cgroup_in_its_own_cgroup_never_the_root(tmp_path):
    """Fails if the scratch cgroup goes to the hierarchy's root (or anywhere
    but the unit's own cgroup) when the unit delegates one: the unit may
    write its own cgroup only (ProtectControlGroups=yes), and the root is
    systemd's."""
    unit = cgroup_tree(tmp_path)
    assert scratch_parent(tmp_path, 2, {"NTTRACE_DELEGATED_CGROUP": "1"}, UNIT_CGROUP) == unit
    # no delegation said, or cgroup v1's memory hierarchy: the root, as a root shell's run makes it
    assert scratch_parent(tmp_path, 2, {}, UNIT_CGROUP) == tmp_path
    assert scratch_parent(tmp_path, 1, {"NTTRACE_DELEGATED_CGROUP": "1"}, UNIT_CGROUP) == tmp_path


def test_a_delegation_without_the_memory_controller_is_said_not_worked_around(tmp_path):
    cgroup_tree(tmp_path, controllers="cpu pids")
    with pytest.raises(NoMemoryCgroup, match="has no memory controller"):
        scratch_parent(tmp_path, 2, {"NTTRACE_DELEGATED_CGROUP": "1"}, UNIT_CGROUP)


def test_the_validate_unit_delegates_memory_and_says_so():
    """The unit and the code agree on the variable (a renamed one would put
    the scratch cgroup in the read-only root again)."""
    from conftest import REPO
    unit = (REPO / "tracer" / "data" / "nttrace-validate.service").read_text()
    assert "\nDelegate=memory\n" in unit
    assert f"\nEnvironment={scratch_cgroup.DELEGATED}=1\n" in unit
    assert "\nProtectControlGroups=yes\n" in unit and "CAP_DAC_OVERRIDE" not in unit.split("CapabilityBoundingSet=")[1]
