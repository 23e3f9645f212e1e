# SPDX-License-Identifier: Apache-2.0
"""Exit codes and the errors that map onto them.

Every command-line failure is one of these; the CLI prints its message as one
line on stderr and exits with its code. Nothing else reaches the user as a
traceback.
"""

EXIT_OK = 0            # every check passed / command succeeded
EXIT_CHECK_FAILED = 1  # a validation check failed
EXIT_USAGE = 2         # bad command line, configuration or input file
EXIT_CAPABILITY = 3    # missing privilege or kernel capability
EXIT_INTERNAL = 4      # a bug in nttrace


class NttraceError(Exception):
    exit_code = EXIT_USAGE


class UsageError(NttraceError):
    """Bad command line, configuration, or input file."""

    exit_code = EXIT_USAGE


class CapabilityError(NttraceError):
    """The process or the kernel lacks something the command needs."""

    exit_code = EXIT_CAPABILITY
