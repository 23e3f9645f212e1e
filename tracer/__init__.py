"""nttrace: trace and validate the kernel's non-temporal-store memory paths."""
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("nttrace")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"
