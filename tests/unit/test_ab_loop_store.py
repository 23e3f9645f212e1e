"""The loop's files are written whole: a write cut short leaves the old file
(or none), never half a run, and a run file that is not whole is not read
as a run."""
import json
import os
import subprocess
import sys

import pytest

from ab_loop_machine import SimMachine, make_loop
from nttrace.ab import step, store


def test_a_write_cut_before_the_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "state.json"
    store.write_json(p, {"n": 1})

    def cut(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", cut)
    with pytest.raises(OSError):
        store.write_json(p, {"n": 2})
    monkeypatch.undo()
    assert store.read_json(p) == {"n": 1}
    assert [q.name for q in tmp_path.iterdir()] == ["state.json"]


def test_a_writer_killed_mid_write_leaves_the_old_file_whole(tmp_path):
    """A real process SIGKILLed inside write_atomic, after its data reached the
    temporary and before the rename (its fsync held until the kill): the file
    at the final name is the old one, whole; the temporary left is removed."""
    p = tmp_path / "run.json"
    store.write_json(p, {"old": True})
    code = ("import os, sys, time; from pathlib import Path; from nttrace.ab import store\n"
            "def held(fd):\n    print('in fsync', flush=True); time.sleep(60)\n"
            "os.fsync = held\n"
            "store.write_atomic(Path(sys.argv[1]), '{\"new\": ' + '1' * (8 << 20))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(p)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "in fsync\n"
    assert (tmp_path / "run.json.tmp").stat().st_size > 8 << 20      # the data was there, not yet renamed
    proc.kill()
    proc.wait()
    assert store.read_json(p) == {"old": True}
    assert store.remove_partial(tmp_path) == ["run.json.tmp"]
    assert [q.name for q in tmp_path.iterdir()] == ["run.json"]


def test_a_truncated_or_unfinished_run_file_is_not_a_run(tmp_path):
    loop = make_loop(tmp_path, rounds=1)
    sim = SimMachine(loop)
    m = sim.machine()
    step.begin(loop, m)
    sim.reboot()
    step.step(loop, m)
    slot = loop.slots()[0]
    good = loop.run_path(slot).read_text()
    assert list(loop.runs()) == [1]
    loop.run_path(slot).write_text(good[: len(good) // 2])          # cut mid-file (a writer without rename)
    assert loop.runs() == {}
    run = json.loads(good)
    run["ab_run"]["complete"] = False                               # whole JSON, but not a finished run
    loop.run_path(slot).write_text(json.dumps(run))
    assert loop.runs() == {}


def test_the_state_directory_is_root_only(tmp_path):
    d = tmp_path / "a" / "b"
    store.make_private_dir(d)
    assert d.stat().st_mode & 0o777 == 0o700
    os.chmod(d, 0o755)
    store.make_private_dir(d)
    assert d.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x" * 65, "a b"])
def test_a_name_that_is_not_a_plain_word_is_refused(name):
    from nttrace.errors import UsageError
    with pytest.raises(UsageError):
        store.check_name(name)
