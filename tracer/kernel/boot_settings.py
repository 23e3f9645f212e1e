# SPDX-License-Identifier: Apache-2.0
"""The settings of this boot that a timing depends on beyond the kernel's
build: what an A/B run records beside its figures, so two runs taken under
different settings can be told apart afterwards.

  cmdline          /proc/cmdline, whole
  reached          how this boot was reached: `nttrace ab` appends
                   nttrace.ab_from=<boot id> to each kexec command line it
                   passes, so a boot whose command line carries it was
                   kexec'd from that boot; without it, the firmware (and its
                   bootloader) started this kernel
  turbo            intel_pstate/no_turbo, cpufreq/boost
  thp              transparent_hugepage enabled and defrag
  numa_balancing   /proc/sys/kernel/numa_balancing
  smt              smt/control and smt/active
  cstates          the cpuidle driver and governor, intel_idle's and the
                   processor driver's max_cstate, and the command line's
                   processor.max_cstate=, intel_idle.max_cstate=, idle=
  microcode        the microcode revision(s) /proc/cpuinfo lists
  cpufreq          each policy's driver and governor

Each is read from under `root` (/ on the machine; a directory laid out like
it in the tests) and is None where the machine does not expose it (a VM
without cpufreq, a kernel without THP). Nothing is changed.
"""
from __future__ import annotations

import re
from pathlib import Path

from nttrace.kernel import sysfs
from nttrace.kernel.sysfs import to_int as _int

MARKER = "nttrace.ab_from"
CPU = "sys/devices/system/cpu"


def _read(root: Path, rel: str) -> str | None:
    """root/rel's value; None where it is missing, unreadable or not text."""
    try:
        return sysfs.read(root / rel)
    except UnicodeDecodeError:
        return None


def _chosen(text: str | None) -> str | None:
    """The [selected] word of a sysfs choice ("always [madvise] never")."""
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text


def param(cmdline: str, name: str) -> str | None:
    """The value of the last `name=` on the command line ("" for a bare
    `name`), None where it is not there: the kernel takes the last one."""
    found = None
    for w in cmdline.split():
        if w == name:
            found = ""
        elif w.startswith(name + "="):
            found = w[len(name) + 1:]
    return found


def with_marker(cmdline: str | None, boot_id: str) -> str:
    """cmdline with this boot's marker for the boot it asks (any marker it
    carried replaced)."""
    words = [w for w in (cmdline or "").split() if not w.startswith(MARKER + "=")]
    return " ".join([*words, f"{MARKER}={boot_id}"])


def reached(cmdline: str | None) -> dict:
    """{"how": "kexec", "from_boot": id} where the command line carries the
    loop's marker, else {"how": "firmware", "from_boot": None}."""
    frm = param(cmdline or "", MARKER)
    if frm:
        return {"how": "kexec", "from_boot": frm}
    return {"how": "firmware", "from_boot": None}


def reached_text(r: dict) -> str:
    return f"by kexec from boot {r['from_boot']}" if r.get("how") == "kexec" else "by firmware"


def _turbo(root: Path) -> dict:
    no_turbo = _int(_read(root, f"{CPU}/intel_pstate/no_turbo"))
    boost = _int(_read(root, f"{CPU}/cpufreq/boost"))
    if no_turbo is None and boost is None:
        on = None
    else:
        on = not (no_turbo == 1 or boost == 0)
    return {"on": on, "intel_pstate_no_turbo": no_turbo, "cpufreq_boost": boost}


def _cpufreq(root: Path) -> dict:
    out = {}
    for p in sorted((root / CPU / "cpufreq").glob("policy*"), key=lambda p: _int(p.name[6:]) or 0):
        out[p.name] = {"driver": _read(root, f"{CPU}/cpufreq/{p.name}/scaling_driver"),
                       "governor": _read(root, f"{CPU}/cpufreq/{p.name}/scaling_governor")}
    return out


def _microcode(root: Path) -> list[str] | None:
    text = _read(root, "proc/cpuinfo")
    if text is None:
        return None
    revs = []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "microcode" and value.strip() not in revs:
            revs.append(value.strip())
    return revs or None


def read(root: Path = Path("/")) -> dict:
    root = Path(root)
    cmdline = _read(root, "proc/cmdline") or ""
    governor = _read(root, f"{CPU}/cpuidle/current_governor") or _read(root, f"{CPU}/cpuidle/current_governor_ro")
    return {
        "cmdline": cmdline,
        "reached": reached(cmdline),
        "turbo": _turbo(root),
        "thp": {"enabled": _chosen(_read(root, "sys/kernel/mm/transparent_hugepage/enabled")),
                "defrag": _chosen(_read(root, "sys/kernel/mm/transparent_hugepage/defrag"))},
        "numa_balancing": _int(_read(root, "proc/sys/kernel/numa_balancing")),
        "smt": {"control": _read(root, f"{CPU}/smt/control"), "active": _int(_read(root, f"{CPU}/smt/active"))},
        "cstates": {"cpuidle_driver": _read(root, f"{CPU}/cpuidle/current_driver"),
                    "cpuidle_governor": governor,
                    "intel_idle_max_cstate": _int(_read(root, "sys/module/intel_idle/parameters/max_cstate")),
                    "processor_max_cstate": _int(_read(root, "sys/module/processor/parameters/max_cstate")),
                    "cmdline": {k: v for k in ("processor.max_cstate", "intel_idle.max_cstate", "idle")
                                if (v := param(cmdline, k)) is not None}},
        "microcode": _microcode(root),
        "cpufreq": _cpufreq(root),
    }


# Words of a command line that name how the boot was reached, not how the
# kernel runs: the loop's kexec marker, and the image grub booted (grub
# puts BOOT_IMAGE= on the line of every kernel it boots: it differs between
# base and patched by design, as their images do).
NOT_SETTINGS = (MARKER + "=", "BOOT_IMAGE=")


def compared(settings: dict) -> dict:
    """The settings two runs should share to be compared like for like: all
    but how the boot was reached, and the command line without the words
    that only say how (NOT_SETTINGS)."""
    out = {k: v for k, v in settings.items() if k != "reached"}
    out["cmdline"] = " ".join(w for w in (settings.get("cmdline") or "").split() if not w.startswith(NOT_SETTINGS))
    return out


def flat(d: dict, prefix: str = "") -> dict[str, object]:
    """{"thp.enabled": "always", ...}: one key per leaf."""
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differences(runs: dict[str, dict]) -> dict[str, dict[str, object]]:
    """{setting: {run name: value}} of each setting whose value is not the
    same in every run given ({run name: settings})."""
    flats = {name: flat(compared(s)) for name, s in runs.items()}
    keys = sorted({k for f in flats.values() for k in f})
    out = {}
    for k in keys:
        values = {name: f.get(k) for name, f in flats.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out[k] = values
    return out


def summary(s: dict) -> str:
    """The settings on one line, as the report shows them."""
    t, thp, smt, cs = (s.get(k) or {} for k in ("turbo", "thp", "smt", "cstates"))
    turbo = {True: "on", False: "off"}.get(t.get("on"), "not exposed")
    limits = [f"{k}={v}" for k, v in (cs.get("cmdline") or {}).items()]
    if cs.get("intel_idle_max_cstate") is not None:
        limits.append(f"intel_idle max_cstate {cs['intel_idle_max_cstate']}")
    governors = sorted({str(p.get("governor")) for p in (s.get("cpufreq") or {}).values()})
    return "; ".join([
        f"turbo {turbo}",
        f"THP {thp.get('enabled') or '-'}/{thp.get('defrag') or '-'}",
        f"numa_balancing {s.get('numa_balancing') if s.get('numa_balancing') is not None else '-'}",
        f"SMT {smt.get('control') or '-'}",
        f"cpuidle {cs.get('cpuidle_driver') or 'none'}" + (f" ({', '.join(limits)})" if limits else ""),
        f"microcode {', '.join(s.get('microcode') or []) or '-'}",
        f"governor {', '.join(governors) if governors else 'no cpufreq'}"])
