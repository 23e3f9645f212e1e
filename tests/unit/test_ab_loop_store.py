# SPDX-License-Identifier: Apache-2.0
"""The loop's files are written whole: a write cut short leaves the old file
(or none), never half a run, and a run file that is not whole is not read
as a run."""
import json
import os
import subprocess
import sys

import pytest

from ab_loop_machine import first_slot_measured, make_loop
from nttrace.ab import store


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
    loop, sim, m = first_slot_measured(tmp_path, rounds=1)
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


def test_the_directory_of_all_loops_is_made_root_only_but_one_the_user_named_keeps_its_mode(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)                    # NTTRACE_AB_DIR=/tmp, say: others' files live there
    monkeypatch.setenv("NTTRACE_AB_DIR", str(shared))
    store.make_root()
    assert shared.stat().st_mode & 0o7777 == 0o1777
    monkeypatch.setenv("NTTRACE_AB_DIR", str(tmp_path / "new" / "ab"))
    assert store.make_root().stat().st_mode & 0o777 == 0o700


def test_a_relative_state_directory_is_named_absolutely_in_the_unit(tmp_path, monkeypatch):
    from nttrace.ab import unit
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NTTRACE_AB_DIR", "rel/ab")
    assert store.root() == tmp_path / "rel" / "ab"
    text = unit.dropins("t", "/usr/bin/nttrace", store.root(), 9000, 900, ["r"])[unit.unit_name("t")]
    assert f"Environment=NTTRACE_AB_DIR={tmp_path}/rel/ab" in text
    assert f"ConditionPathExists={tmp_path}/rel/ab/t/schedule.json" in text


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x" * 65, "a b"])
def test_a_name_that_is_not_a_plain_word_is_refused(name):
    from nttrace.errors import UsageError
    with pytest.raises(UsageError):
        store.check_name(name)


def test_the_lock_is_never_a_link_followed_out_of_the_loop_directory(tmp_path):
    loop = make_loop(tmp_path, rounds=1)
    elsewhere = tmp_path / "etc-something"
    (loop.dir / "lock").symlink_to(elsewhere)        # planted while the directory was writable by others
    with pytest.raises(OSError):
        with loop.lock():
            pass
    assert not elsewhere.exists()


def test_a_temporary_planted_as_a_link_is_not_written_through(tmp_path):
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    d = tmp_path / "loop"
    store.make_private_dir(d)
    (d / "state.json.tmp").symlink_to(target)
    store.write_json(d / "state.json", {"state": "failed"})
    assert target.read_text() == "root:x:0:0\n"
    assert store.read_json(d / "state.json") == {"state": "failed"} and not (d / "state.json.tmp").exists()


def test_the_state_keeps_its_previous_copy_replaced_whole(tmp_path):
    p = tmp_path / "state.json"
    store.write_json(p, {"n": 1}, keep_previous=True)
    assert not store.previous(p).exists()
    store.write_json(p, {"n": 2}, keep_previous=True)
    store.write_json(p, {"n": 3}, keep_previous=True)
    assert store.read_json(p) == {"n": 3} and store.read_json(store.previous(p)) == {"n": 2}
    assert sorted(q.name for q in tmp_path.iterdir()) == ["state.json", "state.json.prev"]


def test_events_jsonl_survives_a_line_cut_mid_write(tmp_path):
    p = tmp_path / "events.jsonl"
    store.append_line(p, '{"n": 1}')
    with open(p, "a") as f:
        f.write('{"n": 2, "wh')                     # the power went mid-line
    store.append_line(p, '{"n": 3}')
    assert store.read_lines(p) == [{"n": 1}, {"n": 3}]
