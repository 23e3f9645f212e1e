# SPDX-License-Identifier: Apache-2.0
"""Where a report was measured: bare metal, a virtual machine, or an
emulator (QEMU TCG). Detected from the CPU and firmware, never assumed:
timings from an emulator count instructions, not cache or memory behaviour,
and an A/B across such runs has to say so.

Signals, strongest first:
  CPUID leaf 0x40000000   the hypervisor's signature: "TCGTCGTCGTCG" is QEMU's
                          own emulator, "KVMKVMKVM" KVM, "Microsoft Hv", ...
  CPUID.1 ECX bit 31      the "hypervisor" flag of /proc/cpuinfo
  DMI sys_vendor          "QEMU" with no accelerator signature: TCG too

It also records the CPU mitigations the kernel chose at boot
(/sys/devices/system/cpu/vulnerabilities): retpolines, return thunks and the
like sit on every call and return of the paths nttrace times, so two kernels
compared with different ones are not compared like for like.
"""
from __future__ import annotations

from pathlib import Path

# CPUID signatures (leaf 0x40000000) -> the hypervisor's name
SIGNATURES = {
    "TCGTCGTCGTCG": "QEMU TCG",
    "KVMKVMKVM": "KVM",
    "Linux KVM Hv": "KVM (Hyper-V enlightenments)",
    "Microsoft Hv": "Hyper-V",
    "VMwareVMware": "VMware",
    "XenVMMXenVMM": "Xen",
    "VBoxVBoxVBox": "VirtualBox",
    "ACRNACRNACRN": "ACRN",
    "bhyve bhyve ": "bhyve",
    " lrpepyh  vr": "Parallels",
    "QNXQVMBSQG": "QNX",
}
EMULATORS = {"QEMU TCG"}


def classify(signature: str | None, hypervisor_flag: bool, dmi_vendor: str) -> dict:
    """{"kind": "bare-metal" | "vm" | "emulated", "hypervisor": name or None,
    "evidence": what decided it}, for this machine (a copy's: offline_kind)."""
    name = SIGNATURES.get(signature or "", None)
    if name in EMULATORS:
        return {"kind": "emulated", "hypervisor": name, "evidence": f"CPUID 0x40000000 signature {signature!r}"}
    if name:
        return {"kind": "vm", "hypervisor": name, "evidence": f"CPUID 0x40000000 signature {signature!r}"}
    if hypervisor_flag:
        if dmi_vendor == "QEMU" and not signature:
            return {"kind": "emulated", "hypervisor": "QEMU TCG",
                    "evidence": "hypervisor flag set, DMI vendor QEMU, no accelerator signature"}
        return {"kind": "vm", "hypervisor": signature or dmi_vendor or "unknown",
                "evidence": f"hypervisor flag set, CPUID signature {signature!r}, DMI vendor {dmi_vendor!r}"}
    return {"kind": "bare-metal", "hypervisor": None, "evidence": "CPUID reports no hypervisor"}


def _cpuinfo(root: Path) -> tuple[bool, str]:
    try:
        text = (root / "proc/cpuinfo").read_text()
    except OSError:
        return False, ""
    flags, model = False, ""
    for line in text.splitlines():
        if line.startswith("flags") and not flags:
            flags = "hypervisor" in line.split(":", 1)[1].split()
        elif line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
    return flags, model


VULNERABILITIES = "sys/devices/system/cpu/vulnerabilities"


def mitigations(root: Path = Path("/")) -> dict[str, str]:
    """{vulnerability: the kernel's line for it} ("spectre_v2": "Mitigation:
    Retpolines; ...", "meltdown": "Not affected"); empty where the kernel or
    a capture has no such directory."""
    d = root / VULNERABILITIES
    try:
        entries = sorted(d.iterdir())
    except OSError:
        return {}
    out = {}
    for f in entries:
        try:
            out[f.name] = f.read_text().strip()
        except OSError:
            continue
    return out


def mitigations_differ(a: dict, b: dict) -> list[str]:
    """The vulnerabilities two recorded machines handle differently (only
    those both recorded), as "name: A | B"."""
    ma, mb = a.get("mitigations") or {}, b.get("mitigations") or {}
    return [f"{k}: {ma[k]} | {mb[k]}" for k in sorted(ma.keys() & mb.keys()) if ma[k] != mb[k]]


def describe(root: Path = Path("/")) -> dict:
    """This machine (root "/"), or what a --sysroot copy holds of its
    cpuinfo and DMI (offline_kind: no CPUID is read of a copy)."""
    live = root == Path("/")
    signature = None
    if live:
        try:
            from nttrace.reference import native
            signature = native.hypervisor_signature()
        except Exception:  # noqa: BLE001 - the library is optional for this
            signature = None
    flag, model = _cpuinfo(root)
    try:
        vendor = (root / "sys/class/dmi/id/sys_vendor").read_text().strip()
    except OSError:
        vendor = ""
    out = (classify(signature, flag or bool(signature), vendor) if live
           else offline_kind((root / "proc/cpuinfo").exists(), flag, vendor))
    out.update(cpu=model, dmi_vendor=vendor or None, cpuid_signature=signature, live=live,
               mitigations=mitigations(root))
    return out


def offline_kind(has_cpuinfo: bool, hypervisor_flag: bool, dmi_vendor: str) -> dict:
    """What a copy's files say of its machine, and no more: the hypervisor
    flag of its proc/cpuinfo (the kernel's reading of CPUID.1 ECX bit 31 on
    that machine) tells a guest from bare metal; with no CPUID signature,
    KVM and QEMU's TCG look alike, so a guest is "vm". A copy without
    proc/cpuinfo says nothing: "unknown"."""
    if not has_cpuinfo:
        return {"kind": "unknown", "hypervisor": None,
                "evidence": "the copy holds no proc/cpuinfo (whose hypervisor flag tells a guest from bare metal)"}
    if hypervisor_flag:
        return {"kind": "vm", "hypervisor": dmi_vendor or "unknown",
                "evidence": f"the copy's proc/cpuinfo has the hypervisor flag (DMI vendor {dmi_vendor or 'not copied'}; "
                            "no CPUID signature in a copy, so KVM and TCG look alike)"}
    return {"kind": "bare-metal", "hypervisor": None, "evidence": "the copy's proc/cpuinfo has no hypervisor flag"}


def caveat(kind: str) -> str:
    """What a timing measured on `kind` can and cannot say."""
    if kind == "emulated":
        return ("measured under emulation (QEMU TCG): times count emulated instructions, not caches or memory "
                "traffic, so only relative changes mean anything, and NT stores cost what ordinary stores cost")
    if kind == "vm":
        return "measured in a virtual machine: the host's other guests and its memory placement add noise"
    return ""
