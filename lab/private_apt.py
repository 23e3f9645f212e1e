# SPDX-License-Identifier: Apache-2.0
"""apt-get with a sources list and state of its own: how the lab fetches
from Debian's archive (linux-source-7.2 for the kernels, QEMU's source for
the plugin header, the guest's test runner and its dependencies) without
reading or changing the system's apt configuration, lists or lock.

Under `state`: sources.list (the caller writes it), lists/, cache/.
`status` is the dpkg status apt resolves against: /dev/null for a plain
download, or a file holding another system's (the guest image's) status.
"""
from __future__ import annotations

from pathlib import Path


def options(state: Path, status: Path | str = "/dev/null", archives: Path | None = None) -> list[str]:
    """apt-get's -o options for the private state under `state`, fetching
    into `archives` (default: state/cache/archives)."""
    opts = {
        "Dir::Etc::SourceList": state / "sources.list",
        "Dir::Etc::SourceParts": "/dev/null",
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": "/dev/null",
        "Dir::State::Lists": state / "lists",
        "Dir::State::Status": status,
        "Dir::State::extended_states": state / "extended_states",
        "Dir::Cache": state / "cache",
        "Dir::Cache::Archives": archives or state / "cache" / "archives",
        "APT::Architecture": "amd64",
        "APT::Architectures": "amd64",
        "APT::Install-Recommends": "false",
        # downloads land in directories root owns: no drop to _apt
        "APT::Sandbox::User": "root",
        # take no lock: the state is this cache's alone, and its callers hold the cache's lock (lab.locks)
        "Debug::NoLocking": "1",
    }
    return [arg for k, v in opts.items() for arg in ("-o", f"{k}={v}")]
