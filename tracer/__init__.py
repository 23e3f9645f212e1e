"""nttrace: trace and validate the kernel's non-temporal-store memory paths."""

__version__ = "0.1.0"   # the one place the version is written (setup.cfg reads it)
