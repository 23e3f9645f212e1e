# SPDX-License-Identifier: Apache-2.0
"""`nttrace ab stop NAME`: the loop ends now, its unit disabled and removed,
nothing pending (no kexec kernel loaded, no one-shot grub entry), every run
kept; the default kernel boots next."""
from __future__ import annotations

import os

from nttrace.ab import boot, unit
from nttrace.ab.loop import Loop
from nttrace.errors import EXIT_CAPABILITY, EXIT_OK, UsageError


def stop(loop: Loop, booter=None, remove_unit=unit.remove) -> list[str]:
    """End the loop; returns what it did. Runs are kept."""
    try:
        sched = loop.schedule()
    except UsageError:
        remove_unit(loop.name)        # a loop too damaged to read still leaves nothing enabled
        raise
    with loop.lock():         # a step asking for a boot finishes first; one in validate sees the stop after
        st = loop.state()
        done = remove_unit(loop.name)
        booter = booter or boot.Booter(sched["via"])
        done += booter.clear()
        if st["state"] == "running":
            st["state"] = "stopped"
            st["why"] = "stopped by `nttrace ab stop`"
            st["booting"] = None
            st["measuring"] = None
            loop.save_state(st)
    return done


def main_stop(args) -> int:
    from nttrace.errors import CapabilityError
    if os.geteuid() != 0:
        raise CapabilityError("ab stop: needs root")
    loop = Loop.named(args.name)
    done = stop(loop)
    cleared = boot.all_cleared(done)
    print(f"nttrace ab {loop.name}: {loop.state()['state']}; {len(loop.runs())} runs kept in {loop.runs_dir}; "
          + ("the default kernel boots next" if cleared else "the next boot may not be the default kernel")
          + (f" ({'; '.join(done)})" if done else ""))
    return EXIT_OK if cleared else EXIT_CAPABILITY
