# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab start|step|status|stop|report`: the subcommands' entry points
(the parser is in nttrace.cli)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from nttrace.ab.loop import Loop
from nttrace.errors import EXIT_OK, CapabilityError, UsageError


def main(args) -> int:
    try:
        return _main(args)
    except PermissionError as exc:
        raise CapabilityError(f"ab {args.ab}: {exc.filename}: permission denied (the loops' state is root-only)") \
            from None


def _main(args) -> int:
    what = args.ab
    if what == "start":
        from nttrace.ab import start
        return start.main(args)
    if what == "step":
        from nttrace.ab import step
        if args.ended:
            return step.ended(Loop.named(args.name), os.environ.get("SERVICE_RESULT", ""),
                              os.environ.get("EXIT_CODE", ""), os.environ.get("EXIT_STATUS", ""))
        if args.deadline:
            return step.deadline(Loop.named(args.name))
        return step.step(Loop.named(args.name))
    if what == "status":
        from nttrace.ab import status
        return status.main_status(args)
    if what == "stop":
        from nttrace.ab import stop
        return stop.main_stop(args)
    if what == "report":
        from nttrace.ab import report
        loop = Loop.named(args.name)
        if args.out:
            written = report.write_all(loop, Path(args.out))
            print(f"A/B report: {written['html']} (and {', '.join(p.name for f, p in written.items() if f != 'html')} "
                  "beside it)")
        else:
            sys.stdout.write(report.render(loop, args.format))
        return EXIT_OK
    raise UsageError("nttrace ab: choose start, status, stop or report (see --help)")
