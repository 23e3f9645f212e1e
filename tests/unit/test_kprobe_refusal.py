# SPDX-License-Identifier: Apache-2.0
"""A kprobe the kernel refuses is reported by nttrace, once: in the probe's
notes ("not traced: kprobe refused: ..."), libbcc's own line folded in, and
nothing of libbcc's on standard error, where it read as a fault of its own
(the lab's nt-v3 guest, where copy_mc_page_nt takes neither fentry nor a
kprobe; tests/lab/test_lab_kernels.py holds that it is reported untraceable
there, not what reaches the guest's stderr).

bcc is not loaded here: the object in place of bcc's BPF writes to fd 2
through the C library, as libbcc's fprintf(stderr, ...) does, and raises
what bcc raises."""
import ctypes
import os

from nttrace.probe_framework import base

LIBBCC_LINE = b"cannot attach kprobe, Invalid argument\n"


class LibbccLike:
    def __init__(self, refuse: set[str], say_on_success: bytes = b""):
        self.refuse, self.say, self.attached = refuse, say_on_success, []

    def attach_kprobe(self, event: str, fn_name: str):
        libc = ctypes.CDLL(None)
        if event in self.refuse:
            libc.write(2, LIBBCC_LINE, len(LIBBCC_LINE))
            raise Exception(f"Failed to attach BPF program b'{fn_name}' to kprobe b'{event}', it's not traceable "
                            "(either non-existing, inlined, or marked as 'notrace')")
        if self.say:
            libc.write(2, self.say, len(self.say))
        self.attached.append(event)

    attach_kretprobe = attach_kprobe


class FunctionProbe:
    """What attach_functions() asks of a probe: routed by kprobe, loaded."""
    caps: dict = {}

    def __init__(self, bpf):
        self.bpf = bpf

    def availability(self):
        return base.Availability(True, attach_via="kprobe")

    def load(self):
        pass

    def by_kprobe(self, symbol):
        return True


def test_a_refused_kprobe_is_said_in_the_notes_not_by_libbcc_on_stderr(capfd):
    """Fails if libbcc's line reaches fd 2 beside nttrace's own report of
    the refusal, or if the refusal loses libbcc's reason."""
    probe = FunctionProbe(LibbccLike(refuse={"copy_mc_page_nt"}))
    refused = base.attach_functions(probe, [("folio_copy", "nttrace_copy_0", None),
                                            ("copy_mc_page_nt", "nttrace_copy_1", None)])
    assert capfd.readouterr().err == ""
    assert list(refused) == ["copy_mc_page_nt"] and probe.bpf.attached == ["folio_copy"]
    assert refused["copy_mc_page_nt"].startswith("kprobe refused: Failed to attach BPF program")
    assert refused["copy_mc_page_nt"].endswith("(libbcc: cannot attach kprobe, Invalid argument)")


def test_what_libbcc_says_of_an_attach_that_worked_still_reaches_stderr(capfd):
    """Fails if fd 2 is left pointing elsewhere, or if libbcc's words about
    an attach that worked are dropped (nttrace reports only refusals)."""
    fd2 = os.fstat(2)
    probe = FunctionProbe(LibbccLike(refuse=set(), say_on_success=b"libbcc: a warning\n"))
    assert base.attach_functions(probe, [("folio_copy", "nttrace_copy_0", "nttrace_copy_0_ret")]) == {}
    assert capfd.readouterr().err == "libbcc: a warning\nlibbcc: a warning\n"
    assert (os.fstat(2).st_ino, os.fstat(2).st_dev) == (fd2.st_ino, fd2.st_dev)
