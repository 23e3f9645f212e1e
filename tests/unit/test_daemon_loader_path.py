# SPDX-License-Identifier: Apache-2.0
"""The daemon's loader process imports nttrace from where the daemon did,
also when that is a private directory on no interpreter's default path
(the Debian package's /usr/lib/nttrace)."""
import subprocess

import pytest

from nttrace.daemon import loader

# Debian's interpreter, not this venv's: nttrace is on its path only if someone puts it there.
SYSTEM_PYTHON = "/usr/bin/python3"
# What the loader process runs instead of nttrace.daemon.loader: it imports nttrace, reads the
# daemon's request (so that the daemon's send never meets a closed socket) and answers over the
# socket it is handed with where it found nttrace.
CHILD = ("import json, socket, sys; s = socket.socket(fileno=int(sys.argv[-1])); import nttrace; s.recv(1 << 20); "
         "s.send(json.dumps({'error': 'imported ' + nttrace.__file__, 'exit': 0}).encode())")


def test_a_plain_interpreter_does_not_find_this_nttrace():
    """The premise: without the loader's environment, Debian's python3 has
    no nttrace here (else the test below proves nothing)."""
    p = subprocess.run([SYSTEM_PYTHON, "-c", "import nttrace"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"}, cwd="/")
    assert p.returncode != 0 and "No module named 'nttrace'" in p.stderr, p.stderr


def test_the_loader_process_imports_nttrace_from_the_daemons_directory(monkeypatch):
    """Fails if the loader is started with the daemon's environment as it
    is: its interpreter then finds no nttrace in a private directory, and
    the package's daemon never loads a probe."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(loader.LoaderError) as exc:
        loader.load([], {}, timeout_s=60, argv=[SYSTEM_PYTHON, "-c", CHILD])
    assert str(exc.value) == f"imported {loader.IMPORT_ROOT}/nttrace/__init__.py"
