# setuptools needs a setup.py only for the native reference library; all
# metadata lives in setup.cfg.
from setuptools import Extension, setup

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
