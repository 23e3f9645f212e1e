# SPDX-License-Identifier: Apache-2.0
"""The loader: a short-lived process that compiles, loads and attaches the
daemon's probes with bcc, hands the daemon the descriptors that keep them
attached (the maps it reads and the attachments: perf events, BPF links)
over a Unix socket with SCM_RIGHTS, and exits. The daemon reads the maps
with bpf(2) (nttrace.probe_framework.bpf_maps) and never imports bcc or LLVM.

Nothing is pinned, so nothing outlives the descriptors: killed at any point
(kill -9 included), the loader's descriptors close with it, and those in
flight close with the socket; the daemon's close with the daemon. The loader
dies with the daemon (PR_SET_PDEATHSIG) and never runs bcc's cleanup, which
would disable the perf events the daemon now shares.

Protocol (SOCK_SEQPACKET, one JSON object per message): the daemon sends
{"probes": [...], "options": {...}}; the loader answers {"caps", "meta"},
then one {"probe", "status", "state", "maps", "attachments"} per probe with
its descriptors (the maps' in order, then the attachments), then
{"done": true}; or {"error", "exit"} at any point.

What arrives is data (bpf_maps.Handed, one a probe: status, state, a MapSet
over the descriptors); the daemon gives it to its Tracer to adopt
(Tracer.attach(handed=...), set_probes below) and closes what is left.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nttrace.daemon.process import die_with_parent
from nttrace.errors import EXIT_INTERNAL, NttraceError

MAX_MESSAGE = 1 << 20
# The directory this nttrace is imported from: the loader imports it from
# there too, which a private directory (the Debian package's /usr/lib/nttrace)
# needs, being on no interpreter's default path.
IMPORT_ROOT = str(Path(__file__).resolve().parents[2])
MAX_FDS = 250          # SCM_RIGHTS carries at most 253 descriptors a message


class LoaderError(NttraceError):
    """The loader failed or died; the message says how. The exit code is the
    loader's own error's (a missing capability: 3), else internal (4)."""

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.exit_code = exit_code or EXIT_INTERNAL


# -- the loader process -------------------------------------------------------
def _send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def serve(sock: socket.socket) -> int:
    """The loader's whole life: one request, its answer, exit."""
    from nttrace.errors import CapabilityError
    from nttrace.kernel import metadata as kernel_meta
    from nttrace.kernel.sysroot import Sysroot
    from nttrace.capabilities import report as capabilities
    from nttrace.tracing.tracer import Tracer, attach_probe

    request = json.loads(sock.recv(MAX_MESSAGE))
    try:
        # BTF is parsed in Python while bcc compiles the capability report's
        # test programs in C (ctypes lets go of the GIL): the two overlap.
        with ThreadPoolExecutor(1) as pool:
            meta_read = pool.submit(kernel_meta.load, Sysroot("/"))
            caps = capabilities.report()
            meta = meta_read.result()
        lacking = capabilities.missing_privilege(caps)
        if lacking:
            raise CapabilityError(lacking)
        tracer = Tracer(request["probes"], request.get("options", {}), caps=caps, meta=meta, handle_signals=False)
        _send(sock, {"caps": {k: v.as_json() for k, v in caps.items()}, "meta": meta.as_json()})
        for name, probe in tracer.probes.items():
            status = attach_probe(probe)
            if status["status"] != "attached":
                _send(sock, {"probe": name, "status": status})
                continue
            maps, programs, attachments = probe.descriptors()
            fds = list(maps.values()) + list(programs.values()) + attachments
            if len(fds) > MAX_FDS:
                raise LoaderError(f"probe {name} holds {len(fds)} descriptors, more than one message carries")
            _send(sock, {"probe": name, "status": status, "state": probe.state(), "maps": list(maps),
                         "programs": list(programs), "attachments": len(attachments)}, fds)
        _send(sock, {"done": True})
        sock.recv(16)      # the daemon has them: then exit (its EOF would do as well)
    except NttraceError as exc:
        _send(sock, {"error": str(exc), "exit": exc.exit_code})
    except Exception as exc:   # bcc raises bare Exception
        _send(sock, {"error": f"loader: {exc.__class__.__name__}: {exc}", "exit": EXIT_INTERNAL})
    return 0


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        serve(sock)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)   # not atexit: bcc's cleanup would disable the perf events the daemon now holds


# -- the daemon's side ---------------------------------------------------------
class Loaded:
    """One loader run: the kernel facts it found and each probe as handed
    over (bpf_maps.Handed). A Tracer adopts probes out of `probes`;
    close() releases those it did not take."""

    def __init__(self, caps: dict, meta: dict):
        self.caps, self.meta = caps, meta
        self.probes: dict = {}      # probe name -> bpf_maps.Handed
        self.seconds = 0.0          # the loader's run, start to exit
        self.peak_rss_kib = 0       # the loader's peak resident memory (bcc, LLVM): gone with it

    def close(self) -> None:
        probes, self.probes = self.probes, {}
        for handed in probes.values():
            handed.close()


def _handed(msg: dict, fds: list[int]):
    """A probe message and its descriptors as bpf_maps.Handed: the maps
    (in order), the programs, then the attachments, read through a MapSet
    that owns them (it closes them itself when it cannot read them)."""
    from nttrace.probes import PROBES
    from nttrace.probe_framework.bpf_maps import Handed, MapSet
    names, programs = msg.get("maps", []), msg.get("programs", [])
    status, state = msg["status"], msg.get("state", {})
    if status["status"] != "attached":
        return Handed(status, state)
    n_maps, n_progs = len(names), len(programs)
    try:
        maps = MapSet(PROBES[msg["probe"]].source, dict(zip(names, fds[:n_maps])), list(fds[n_maps + n_progs:]),
                      programs=dict(zip(programs, fds[n_maps:n_maps + n_progs])))
    except (OSError, ValueError, KeyError) as exc:
        return Handed({"status": "unavailable", "reason": f"handover failed: {exc}"}, state)
    return Handed(status, state, maps)


class Stopped(NttraceError):
    """A stop was asked for (SIGTERM, SIGINT) while a loader compiled: the
    loader is killed, what it had sent closed."""

    exit_code = 0


STOP_CHECK_S = 0.1


def loader_environment(environ=None) -> dict[str, str]:
    """The daemon's environment, with IMPORT_ROOT first on PYTHONPATH."""
    environ = os.environ if environ is None else environ
    return {**environ, "PYTHONPATH": os.pathsep.join([IMPORT_ROOT, *filter(None, [environ.get("PYTHONPATH")])])}


def load(probes: list[str], options: dict, timeout_s: float = 600.0, argv: list[str] | None = None,
         stop=None) -> Loaded:
    """Run a loader for `probes` and receive what it attached. Raises
    LoaderError (after closing whatever arrived) when it fails or dies, and
    Stopped when `stop()` turns true meanwhile (checked every STOP_CHECK_S:
    the daemon's handler only sets a flag, and a recv interrupted by it is
    resumed, so a SIGTERM waited for the whole compile)."""
    t0 = time.monotonic()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    cmd = argv or [sys.executable, "-m", "nttrace.daemon.loader"]
    proc = subprocess.Popen(cmd + [str(theirs.fileno())], pass_fds=[theirs.fileno()], preexec_fn=die_with_parent,
                            stdin=subprocess.DEVNULL, env=loader_environment())
    theirs.close()
    loaded = None

    def died() -> LoaderError:
        return LoaderError(f"the loader exited before it finished (status {proc.wait()})")

    try:
        ours.settimeout(STOP_CHECK_S)
        try:
            _send(ours, {"probes": probes, "options": options})
        except ConnectionError:
            raise died() from None
        while True:
            quiet_since = time.monotonic()
            while True:
                if stop is not None and stop():
                    raise Stopped("stopped while the loader compiled and attached")
                try:
                    data, fds, _flags, _addr = socket.recv_fds(ours, MAX_MESSAGE, MAX_FDS)
                    break
                except socket.timeout:
                    if time.monotonic() - quiet_since > timeout_s:
                        raise LoaderError(f"the loader sent nothing for {timeout_s:.0f} s") from None
                except ConnectionError:
                    raise died() from None
            if not data:
                raise died()
            msg = json.loads(data)
            if "error" in msg:
                raise LoaderError(msg["error"], exit_code=msg.get("exit"))
            if "caps" in msg:
                loaded = Loaded(msg["caps"], msg["meta"])
            elif "probe" in msg:
                if loaded is None:
                    raise LoaderError("the loader sent a probe before the kernel facts")
                loaded.probes[msg["probe"]] = _handed(msg, fds)
            elif msg.get("done"):
                ours.send(b"ok")
                ours.close()
                _pid, _status, usage = os.wait4(proc.pid, 0)
                proc.returncode = _status
                loaded.seconds, loaded.peak_rss_kib = time.monotonic() - t0, usage.ru_maxrss
                return loaded
    except BaseException:
        if loaded is not None:
            loaded.close()
        proc.kill()
        raise
    finally:
        ours.close()
        if proc.returncode is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def set_probes(tracer, names: list[str], options: dict, timeout_s: float = 600.0, stop=None) -> dict[str, list[str]]:
    """The daemon's reload of its probe set: a loader run attaches the
    probes `names` adds to `tracer` (none: no loader runs), the tracer
    adopts them (Tracer.set_probes(handed=...)) and drops those `names`
    leaves out; what it did not adopt is closed. Returns set_probes'
    {"added", "removed"}. Raises as load() does (LoaderError, Stopped)."""
    added = [n for n in names if n not in tracer.probes]
    loaded = load(added, {n: options[n] for n in added}, timeout_s, stop=stop) if added else None
    try:
        return tracer.set_probes(names, options, handed=loaded.probes if loaded else {})
    finally:
        if loaded is not None:
            loaded.close()


if __name__ == "__main__":
    main()
