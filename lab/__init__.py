# SPDX-License-Identifier: Apache-2.0
"""The lab: Linux kernels built from Debian's source with a series applied as
posted, booted in a QEMU guest with an emulated NVDIMM and a CPU-less memory
node, where nttrace runs for real; and the A/B of two kernels over several
interleaved boots (`python3 -m lab.ab`). Run from the checkout (README.md)."""

import glob as _glob
import os as _os
import sys as _sys

# The lab records the host's conditions with nttrace's own code. Run from a
# `python3` that lacks nttrace, it takes the package from the checkout's
# .venv (what `make setup` installs), the same Python minor version.
try:
    import nttrace as _nttrace  # noqa: F401
except ImportError:
    _here = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    _found = _glob.glob(_os.path.join(_here, ".venv", "lib",
                                      f"python{_sys.version_info[0]}.{_sys.version_info[1]}", "site-packages"))
    if not _found:
        raise SystemExit("lab: nttrace is not installed for this Python and the checkout has no .venv of "
                         f"Python {_sys.version_info[0]}.{_sys.version_info[1]}: run `make setup`") from None
    _sys.path.append(_found[0])
