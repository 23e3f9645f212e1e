# SPDX-License-Identifier: Apache-2.0
"""Builds the traffic plugin (libtraffic.so, against the cached qemu-plugin.h)
and the guest's workload (traffic-guest, static, with the native reference's
copies linked in), with the system compiler, cached under the QEMU cache
keyed on every input (sources, header, compiler):

  <cache>/build-<key>/libtraffic.so, traffic-guest, build.json
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lab.locks import locked
from lab.traffic import header as hdr

HERE = Path(__file__).resolve().parent
NATIVE = HERE.parent.parent / "native"
PLUGIN_SOURCES = ("traffic.c", "model.c")
PLUGIN_INPUTS = ("traffic.c", "model.c", "model.h")
GUEST_SOURCES = (HERE / "guest.c", NATIVE / "cached_copy.c", NATIVE / "nt_copy.c", NATIVE / "cpu_features.c",
                 NATIVE / "page_copy.c")
GUEST_INPUTS = (*GUEST_SOURCES, HERE / "window.h", NATIVE / "nttrace_native.h")
CC = "cc"
# The native reference's own flags (setup.py): the hand-written loops stay loops.
NATIVE_FLAGS = ("-O2", "-fno-tree-loop-distribute-patterns", "-fno-strict-aliasing")


class BuildError(RuntimeError):
    """A compile failed; the message carries the compiler's output."""


@dataclass(frozen=True)
class Built:
    plugin: Path
    guest: Path
    info: dict


def cc_version() -> str:
    p = subprocess.run([CC, "--version"], capture_output=True, text=True)
    if p.returncode != 0:
        raise BuildError(f"{CC} --version failed: {p.stderr.strip()}")
    return p.stdout.splitlines()[0]


def key(header: Path) -> str:
    h = hashlib.sha256()
    for p in [*(HERE / n for n in PLUGIN_INPUTS), *GUEST_INPUTS, header]:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(cc_version().encode())
    return h.hexdigest()[:16]


def compile_(cmd: list[str], what: str) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise BuildError(f"building {what} failed:\n$ {' '.join(cmd)}\n{p.stderr[-3000:]}")


def plugin_command(header: Path, out: Path) -> list[str]:
    return [CC, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{header.parent}", "-o", str(out),
            *(str(HERE / s) for s in PLUGIN_SOURCES)]


def guest_command(out: Path) -> list[str]:
    return [CC, *NATIVE_FLAGS, "-Wall", "-static", f"-I{NATIVE}", f"-I{HERE}", "-o", str(out),
            *map(str, GUEST_SOURCES)]


def build() -> Built:
    """The plugin and the guest's workload, built once per key."""
    header = hdr.header()
    d = hdr.CACHE / f"build-{key(header)}"
    if (d / "build.json").exists():
        return Built(d / "libtraffic.so", d / "traffic-guest", json.loads((d / "build.json").read_text()))
    with locked(hdr.CACHE / "build.lock"):
        if not (d / "build.json").exists():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            compile_(plugin_command(header, d / "libtraffic.so"), "the traffic plugin")
            compile_(guest_command(d / "traffic-guest"), "traffic-guest")
            (d / "build.json").write_text(json.dumps({
                "cc": cc_version(), "header": str(header), "qemu_plugin_version": hdr.plugin_version(header),
                "source": json.loads((header.parent / "source.json").read_text())}, indent=1) + "\n")
    return Built(d / "libtraffic.so", d / "traffic-guest", json.loads((d / "build.json").read_text()))
