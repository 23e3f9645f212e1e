# SPDX-License-Identifier: Apache-2.0
# setuptools needs a setup.py for the native reference library and for the
# package list; all other metadata lives in setup.cfg.
from pathlib import Path

from setuptools import Extension, setup

# setup.cfg's package_dir: one import name, three directories
PACKAGE_ROOTS = {"nttrace": "tracer", "nttrace.exporters": "exporters", "nttrace.bpf": "bpf"}


def packages() -> list[str]:
    """Every directory with an __init__.py under the three roots: a module or
    subpackage added there is packed (the wheel and the Debian package)
    without a list to keep."""
    found = set()
    for name, root in PACKAGE_ROOTS.items():
        for init in Path(root).rglob("__init__.py"):
            found.add(".".join((name, *init.parent.relative_to(root).parts)))
    return sorted(found)


NATIVE_SOURCES = [
    "native/cpu_features.c",
    "native/cached_copy.c",
    "native/nt_copy.c",
    "native/page_copy.c",
    "native/memmap_model.c",
    "native/demotion_model.c",
    "native/cache_flush.c",
    "native/module.c",
]

setup(
    packages=packages(),
    ext_modules=[
        Extension(
            "nttrace._native",
            sources=NATIVE_SOURCES,
            depends=["native/nttrace_native.h"],
            include_dirs=["native"],
            # -fno-tree-loop-distribute-patterns keeps the compiler from
            # replacing the hand-written copy loops with calls to libc memcpy.
            extra_compile_args=["-O2", "-fno-tree-loop-distribute-patterns", "-fno-strict-aliasing"],
        )
    ]
)
