# SPDX-License-Identifier: Apache-2.0
"""BENCHMARKS.md's renderers, one module per section of the document.

A section module holds the functions that turn its raw files (in
benchmarks/) into the markdown of its generated blocks, and a mapping

    BLOCKS = {"block-name": (render_function, raw_files)}

where raw_files is a list of file names (the first is read and handed to
the function) or a dict {key: file name, or a tuple of file names} (the
function gets {key: the loaded file, or a tuple of them}). A .json file is
handed over parsed, any other file as text.

To add a section: write benchmarks/sections/<section>.py with its BLOCKS,
and put each block's markers in BENCHMARKS.md,

    <!-- generated: block-name -->
    <!-- end generated: block-name -->

then run `python3 benchmarks/render.py`. The modules are found by listing
this directory (a name starting with "_" is a helper, not a section);
benchmarks/render.py refuses a block name two sections both define, a
block the document has and no section renders, and the reverse.
"""
