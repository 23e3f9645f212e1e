# SPDX-License-Identifier: Apache-2.0
"""The session's lab guests, booted by one pool: the stock guests of
test_lab.py and the lab kernels of test_lab_kernels.py.

A guest is single-threaded QEMU TCG: one core of the two. The lab's tests
run last (plugin_rooms orders them so); their guests start booting as soon as
collection ends, one at a time while the rest of the suite runs on the other
core, then two at a time once a lab test asks for one (NTTRACE_LAB_PARALLEL
sets that number; 1 boots one at a time throughout). NTTRACE_LAB_EARLY=0
starts nothing before a lab test asks.

A boot is registered by its module at import (`register`): a name, whether
this session's tests want it, a `prepare` that runs outside the pool's slots
(a lab kernel's build, which must not hold a core's slot while it waits for
the background build), `run` that boots, and how long it is expected to take.
Slots go to the longest waiting boot first (ties: registration order): two
cores finish a set of guests soonest when the long ones start first, and the
short ones fill in beside them. A guest that mostly waits (`idle`: the hang
guest boots in seconds, then sleeps until its bound) holds no slot; it starts
when the pool widens, so it never shares the cores with the other tests. A
guest that measures (`exclusive`: the A/B's boots) runs alone: after every
other boot has taken its slot, holding all of the widened pool's slots, and
after its `prepare` has waited for every kernel build to end, so that nothing
the suite does compiles or emulates beside it. Nor does a lab test's own
body (test_kernel_build's injected builds run make and the compiler; others
run nttrace on the host): plugin_lab runs each lab test's body inside
`POOL.host_work()`, the lock an exclusive boot holds while it measures, and
a body lets go of it only while it waits for a boot (`result`).
"""
from __future__ import annotations

import os
import subprocess
import threading
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

PARALLEL = max(1, int(os.environ.get("NTTRACE_LAB_PARALLEL", "2")))
EARLY = os.environ.get("NTTRACE_LAB_EARLY", "1") != "0"


@dataclass
class Boot:
    name: str
    wanted: Callable[[], bool]
    run: Callable[[object], object]            # (prepared) -> result; holds a slot
    prepare: Callable[[], object] = lambda: None   # runs before a slot is taken
    seconds: float = 0.0       # expected run time: the longest waiting boot gets a slot first
    idle: bool = False         # mostly waits: takes no slot, starts once the pool widens
    exclusive: bool = False    # measures: runs alone, after the others, holding every slot


class _Slots:
    """Counting slots handed out by rank (lowest first) among the boots waiting."""

    def __init__(self, n: int):
        self.free = n
        self.cond = threading.Condition()
        self.waiting: list[tuple] = []

    def acquire(self, rank: tuple, n: int = 1) -> None:
        with self.cond:
            self.waiting.append(rank)
            while not (self.free >= n and min(self.waiting) == rank):
                self.cond.wait()
            self.waiting.remove(rank)
            self.free -= n
            self.cond.notify_all()

    def release(self, n: int = 1) -> None:
        with self.cond:
            self.free += n
            self.cond.notify_all()


class BootPool:
    def __init__(self, parallel: int = PARALLEL):
        self.parallel = parallel
        self.boots: list[Boot] = []
        self.futures: dict[str, Future] = {}
        self.lock = threading.Lock()
        self.slots = _Slots(1)          # one while other tests run; widened when a lab test asks
        self.executor: ThreadPoolExecutor | None = None
        self.tmp = None                 # the session's TempPathFactory (plugin_lab sets it): guests' result directories
        self.closed = False
        self.wide = threading.Event()   # set when a lab test first asks: the pool is widened
        self.measuring = threading.Lock()   # held by an exclusive boot's run, and by a lab test's body
        self.holder: int | None = None      # the thread in host_work, holding `measuring`

    def register(self, boot: Boot) -> None:
        with self.lock:
            if all(b.name != boot.name for b in self.boots):
                self.boots.append(boot)

    def _job(self, boot: Boot, rank: tuple):
        prepared = boot.prepare()
        if boot.idle:
            self.wide.wait()
            return self._run(boot, prepared)
        need = 1
        if boot.exclusive:
            self.wide.wait()                # all slots exist only once the pool has widened
            self._others_done()             # an idle guest holds no slot, but its QEMU is beside us
            need = self.parallel
        self.slots.acquire(rank, need)
        try:
            if boot.exclusive:
                with self.measuring:
                    return self._run(boot, prepared)
            return self._run(boot, prepared)
        finally:
            self.slots.release(need)

    @contextmanager
    def host_work(self):
        """Around a lab test's body (the test thread's): whatever it runs on
        the host (a compiler, make, nttrace) is never beside an exclusive
        boot's measurement."""
        with self.measuring:
            self.holder = threading.get_ident()
            try:
                yield
            finally:
                self.holder = None

    def _run(self, boot: Boot, prepared):
        if self.closed:
            raise RuntimeError(f"lab boot {boot.name}: the session ended before it started")
        return boot.run(prepared)

    def _others_done(self) -> None:
        """Wait for every started boot that is not exclusive (its outcome is its test's business)."""
        exclusive = {b.name for b in self.boots if b.exclusive}
        while True:
            with self.lock:
                pending = [f for n, f in self.futures.items() if n not in exclusive and not f.done()]
            if not pending:
                return
            for f in pending:
                try:
                    f.result()
                except BaseException:  # noqa: BLE001 - reported by the test that asks for it
                    pass

    def close(self) -> None:
        """The session's end: boots not yet started never start, and the
        guests still running (this process's QEMU children) are killed, so
        the interpreter's exit does not wait for them."""
        self.closed = True
        self.wide.set()             # idle boots still waiting wake to find the pool closed
        if any(not f.done() for f in self.futures.values()):
            subprocess.run(["pkill", "-KILL", "-P", str(os.getpid()), "-f", "qemu-system"], check=False)

    def _rank(self, boot: Boot) -> tuple:
        """The order boots get slots in (lowest first): the exclusive ones
        last, then the longest, then the first registered."""
        return boot.exclusive, -boot.seconds, self.boots.index(boot)

    def start(self, name: str) -> Future:
        """The boot's future, submitting it if it is not under way."""
        with self.lock:
            if name not in self.futures:
                if self.executor is None:   # a thread a boot: one waiting on its kernel holds no slot
                    self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lab-boot")
                boot = next(b for b in self.boots if b.name == name)
                self.futures[name] = self.executor.submit(self._job, boot, self._rank(boot))
            return self.futures[name]

    def start_wanted(self) -> list[str]:
        """Submit every registered boot this session's tests want (the end of
        collection), the longest first: the first to come takes the free slot."""
        names = [b.name for b in sorted(self.boots, key=self._rank) if b.wanted()]
        for name in names:
            self.start(name)
        return names

    def result(self, name: str):
        """What the boot returned, waiting for it. The first lab test to ask
        starts every wanted boot (if collection did not) and widens the pool."""
        with self.lock:
            first = not self.wide.is_set()
            self.wide.set()
        if first:
            self.start_wanted()
            if self.parallel > 1:
                self.slots.release(self.parallel - 1)
        future = self.start(name)
        if self.holder != threading.get_ident():     # only the thread holding the lock lets go of it
            return future.result()
        self.measuring.release()        # waiting is not loading the host: a measuring boot may run
        try:
            return future.result()
        finally:
            self.measuring.acquire()


POOL = BootPool()
