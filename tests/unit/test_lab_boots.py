# SPDX-License-Identifier: Apache-2.0
"""The lab's boot pool (tests/lab_boots.py), with boots that only record
what ran when: one boot at a time until a lab test asks, then two; slots to
the longest boot first, ties in registration order; a boot's prepare step (a
kernel build) holds no slot; an idle boot holds none and waits for the pool to
widen."""
import threading
import time

from lab_boots import Boot, BootPool


def _pool(names, log, gates, prepare_gate=None, parallel=2, seconds=None, idle=(), exclusive=()):
    pool = BootPool(parallel)
    for name in names:
        def run(_prepared, n=name):
            log.append(("start", n))
            gates[n].wait(10)
            log.append(("end", n))
            return n
        prep = (lambda n=name: prepare_gate.wait(10) if n == "slow-prepare" else None) if prepare_gate else (lambda: None)
        pool.register(Boot(name, lambda: True, run, prepare=prep, seconds=(seconds or {}).get(name, 0),
                           idle=name in idle, exclusive=name in exclusive))
    return pool


def _running(log):
    started = {n for e, n in log if e == "start"}
    ended = {n for e, n in log if e == "end"}
    return started - ended


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_one_boot_at_a_time_until_a_test_asks_then_two_in_registration_order():
    names = ["a", "b", "c", "d"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates)
    assert pool.start_wanted() == names
    assert _until(lambda: _running(log) == {"a"})
    time.sleep(0.2)
    assert _running(log) == {"a"}, "a second boot started before any lab test asked"
    asker = threading.Thread(target=pool.result, args=("c",))
    asker.start()                       # a lab test asks: the pool widens to two
    assert _until(lambda: _running(log) == {"a", "b"})
    gates["a"].set()
    assert _until(lambda: _running(log) == {"b", "c"}), log
    for g in gates.values():
        g.set()
    asker.join(10)
    assert pool.result("d") == "d"
    assert [n for e, n in log if e == "start"] == names


def test_a_boot_waiting_in_prepare_holds_no_slot():
    names = ["slow-prepare", "b", "c"]
    log, gates = [], {n: threading.Event() for n in names}
    prepare_gate = threading.Event()
    pool = _pool(names, log, gates, prepare_gate)
    pool.start_wanted()
    # the first boot is still preparing (its kernel building): the next one boots
    assert _until(lambda: _running(log) == {"b"})
    prepare_gate.set()
    rank = pool._rank(pool.boots[0])
    assert rank[1:] == (0, 0) and _until(lambda: rank in pool.slots.waiting)   # prepared, waiting for b's slot
    gates["b"].set()
    # once prepared, the first boot comes before c (registered earlier)
    assert _until(lambda: _running(log) == {"slow-prepare"}), log
    for g in gates.values():
        g.set()
    assert pool.result("c") == "c"


def test_one_at_a_time_throughout_when_parallel_is_one():
    names = ["a", "b"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates, parallel=1)
    asker = threading.Thread(target=pool.result, args=("b",))
    asker.start()
    assert _until(lambda: _running(log) == {"a"})
    time.sleep(0.2)
    assert _running(log) == {"a"}
    for g in gates.values():
        g.set()
    asker.join(10)
    assert [n for e, n in log if e == "start"] == names


def test_closing_the_pool_keeps_unstarted_boots_from_starting():
    names = ["a", "b"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates, parallel=1)
    pool.start_wanted()
    assert _until(lambda: _running(log) == {"a"})
    pool.closed = True          # what close() sets (without its pkill: no QEMU here)
    gates["a"].set()
    err = pool.start("b").exception(10)
    assert isinstance(err, RuntimeError) and "session ended" in str(err)
    assert ("start", "b") not in log


def test_the_longest_boot_gets_a_slot_first_ties_in_registration_order():
    names = ["short", "long", "mid-a", "mid-b"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates, parallel=1, seconds={"short": 20, "long": 800, "mid-a": 300, "mid-b": 300})
    pool.slots.acquire((-1e9, -1))      # hold the slot until all four queue: the order is then the ranks' alone
    assert pool.start_wanted() == ["long", "mid-a", "mid-b", "short"]    # submitted longest first
    assert _until(lambda: len(pool.slots.waiting) == 4)
    pool.slots.release()
    for n in ["long", "mid-a", "mid-b", "short"]:
        assert _until(lambda n=n: _running(log) == {n}), log
        gates[n].set()
    assert pool.result("short") == "short"
    assert [n for e, n in log if e == "start"] == ["long", "mid-a", "mid-b", "short"]


def test_an_idle_boot_takes_no_slot_and_waits_for_a_lab_test_to_ask():
    names = ["a", "hang"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates, parallel=1, idle={"hang"})
    pool.start_wanted()
    assert _until(lambda: _running(log) == {"a"})
    time.sleep(0.2)
    assert _running(log) == {"a"}, "the idle boot started before any lab test asked"
    asker = threading.Thread(target=pool.result, args=("hang",))
    asker.start()
    # one slot, held by a: the idle boot runs beside it all the same
    assert _until(lambda: _running(log) == {"a", "hang"}), log
    for g in gates.values():
        g.set()
    asker.join(10)
    assert pool.result("a") == "a"


def test_an_exclusive_boot_runs_alone_after_every_other_boot_idle_ones_included():
    """The A/B's boots measure: nothing else of the pool runs beside them,
    not even an idle guest, and they go last whatever their length."""
    names = ["ab", "a", "b", "idle"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates, seconds={"ab": 999}, idle=("idle",), exclusive=("ab",))
    pool.start_wanted()
    asker = threading.Thread(target=pool.result, args=("ab",))
    asker.start()
    assert _until(lambda: _running(log) == {"a", "b", "idle"}), log
    gates["a"].set()
    gates["b"].set()
    time.sleep(0.3)
    assert "ab" not in _running(log), "the exclusive boot started beside the idle guest"
    gates["idle"].set()
    assert _until(lambda: _running(log) == {"ab"}), log
    gates["ab"].set()
    asker.join(10)
    starts = [n for e, n in log if e == "start"]
    assert starts[-1] == "ab"
    # while it ran, nothing else did
    i = log.index(("start", "ab"))
    assert all(e == "end" and n == "ab" for e, n in log[i + 1:]), log


def test_a_lab_tests_body_and_an_exclusive_boot_never_overlap():
    """A test body (host_work: it may compile or run nttrace on the host)
    holds the exclusive boot off; the boot runs while the body waits for a
    boot's result, and the body goes on only once the boot has measured.
    The control: without host_work the exclusive boot starts at once."""
    names = ["ab", "a"]
    log, gates = [], {n: threading.Event() for n in names}
    pool = _pool(names, log, gates, exclusive=("ab",))
    asker = threading.Thread(target=pool.result, args=("a",))
    asker.start()                       # a lab test asks: the pool widens; "ab" waits for "a"
    assert _until(lambda: _running(log) == {"a"})
    holding, asked = threading.Event(), {}

    def body():
        with pool.host_work():
            holding.set()
            time.sleep(0.3)                     # the test's own host work
            log.append(("body-work", "test"))
            asked["ab"] = pool.result("ab")     # waiting: the exclusive boot runs meanwhile
            log.append(("body-after", "test"))

    t = threading.Thread(target=body)
    t.start()
    assert holding.wait(5)
    gates["a"].set()                    # "ab" may go now, but for the body
    assert _until(lambda: ("body-work", "test") in log)
    assert _until(lambda: _running(log) == {"ab"}), log   # the body waits in result(): the boot runs
    time.sleep(0.2)
    assert ("body-after", "test") not in log
    gates["ab"].set()
    t.join(10)
    asker.join(10)
    assert asked["ab"] == "ab"
    assert log.index(("body-work", "test")) < log.index(("start", "ab")) < log.index(("end", "ab")) \
        < log.index(("body-after", "test")), log
    # the control: no test body holding it, an exclusive boot starts at once
    log2, gates2 = [], {n: threading.Event() for n in ["ab"]}
    pool2 = _pool(["ab"], log2, gates2, exclusive=("ab",))
    gates2["ab"].set()
    assert pool2.result("ab") == "ab" and ("start", "ab") in log2


def test_a_session_without_a_lab_test_starts_no_boot(monkeypatch, tmp_path_factory):
    """The end of collection submits the wanted boots only when a lab test
    was selected: `make test-unit` (and -m "not lab") never starts a guest,
    whatever a registered boot says it wants."""
    import types

    import lab_boots
    import plugin_lab
    started = []
    pool = BootPool(2)
    pool.register(Boot("guest", lambda: True, lambda _p: started.append("guest")))
    monkeypatch.setattr(lab_boots, "POOL", pool)
    monkeypatch.setattr(plugin_lab, "has", lambda *caps: True)      # as on a host with root and QEMU

    def session(*lab_marks):
        items = [types.SimpleNamespace(get_closest_marker=lambda name, lab=lab: object() if lab and name == "lab"
                                       else None) for lab in lab_marks]
        config = types.SimpleNamespace(option=types.SimpleNamespace(collectonly=False),
                                       _tmp_path_factory=tmp_path_factory)
        return types.SimpleNamespace(items=items, config=config)
    plugin_lab._start_lab_boots(session(False, False))
    assert pool.futures == {} and started == []
    plugin_lab._start_lab_boots(session(False, True))      # the control: a lab test selected starts it
    pool.futures["guest"].result(timeout=10)
    assert started == ["guest"]


def test_a_prepare_step_waiting_for_the_prebuild_builds_nothing_once_the_session_ended(monkeypatch):
    """A collection error (or ^C) ends the session while a boot's prepare
    step waits for the background build: the step returns an error instead
    of building the kernel itself, so the interpreter's exit (which joins the
    pool's threads) is not held for a whole kernel build. The mutation it
    catches: lab_kernel ignoring the session's end (a CI run held past its
    time limit after one test module failed to import)."""
    import plugin_lab
    from lab import kernel_build
    built = []
    monkeypatch.setattr(plugin_lab, "prebuild_running", lambda: True)
    monkeypatch.setattr(kernel_build, "cached", lambda variant: False)
    monkeypatch.setattr(kernel_build, "build", lambda variant: built.append(variant) or variant)
    monkeypatch.setattr(plugin_lab.time, "sleep", lambda s: None)
    monkeypatch.setattr(plugin_lab, "ENDED", threading.Event())
    waiting = threading.Thread(target=lambda: built.append(plugin_lab.lab_kernel("nt-v2")))
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and built == []       # still waiting for the prebuild
    plugin_lab.ENDED.set()
    waiting.join(5)
    assert not waiting.is_alive()
    assert len(built) == 1 and isinstance(built[0], kernel_build.KernelBuildError), built
    # the control: the session not ended and the prebuild gone, the step builds
    monkeypatch.setattr(plugin_lab, "ENDED", threading.Event())
    monkeypatch.setattr(plugin_lab, "prebuild_running", lambda: False)
    assert plugin_lab.lab_kernel("nt-v2") == "nt-v2" and built[-1] == "nt-v2"
