# SPDX-License-Identifier: Apache-2.0
"""Guest instruction addresses named by the kernel function that holds them.

The traffic plugin charges every device line and LLC fill to the guest
address of the instruction that caused it; this module names that address
against the kernel the guest booted:

* the guest's own /proc/kallsyms (its text symbols, written by
  guest-traffic.sh after the steps ran, so the modules they loaded are in
  it): the addresses as this boot placed them, KASLR or not;
* and, for a lab kernel, the System.map of its build (in the kernel's
  linux-image package in the kernel cache): the link-time addresses. The
  lab's kernel config has CONFIG_RANDOMIZE_BASE=y and its command line no
  nokaslr, so the kernel runs slid by a random offset; the slide is the
  guest's `_text` less the System.map's, 0 when KASLR is off, and every
  core text symbol the guest lists must sit at its System.map address plus
  that slide, or the System.map is not the booted kernel's (refused).

An address in no function's range is named for where it is: user space
(the plugin keeps no user address), or "?" with its address. Compiler
suffixes (.constprop.0, .isra.0, .part.0, .cold) name the C function they
came from.
"""
from __future__ import annotations

import bisect
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

USER = "user space"
TEXT_TYPES = frozenset("tTwW")
# The compiler's clones and split parts of one C function.
SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|llvm|lto_priv)(\.\d+)?)+$")


class SymbolError(ValueError):
    """A symbol table that cannot name this boot's addresses."""


@dataclass(frozen=True)
class Symbol:
    address: int
    name: str
    module: str = ""
    text: bool = True


def parse(text: str) -> list[Symbol]:
    """The symbols of a System.map or a /proc/kallsyms listing
    (`ADDRESS TYPE NAME [MODULE]`), sorted by address; `text` says which
    are functions (the others bound them)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        try:
            address = int(parts[0], 16)
        except ValueError:
            continue
        module = parts[3].strip("[]") if len(parts) > 3 else ""
        out.append(Symbol(address, parts[2], module, parts[1] in TEXT_TYPES))
    out.sort(key=lambda s: s.address)
    return out


def function_name(symbol: str) -> str:
    """The C function a symbol is of (its compiler suffixes dropped)."""
    return SUFFIX.sub("", symbol)


def _named(symbols: list[Symbol], name: str) -> int:
    found = [s.address for s in symbols if s.name == name and not s.module and s.text]
    if not found:
        raise SymbolError(f"no {name} in the symbol table")
    return found[0]


def slide(system_map: list[Symbol], kallsyms: list[Symbol]) -> int:
    """How far the booted kernel's text sits from its link-time place
    (KASLR: 0 when off): the guest's `_text` less the System.map's. Every
    core text symbol both list must be that far apart, else SymbolError."""
    offset = _named(kallsyms, "_text") - _named(system_map, "_text")
    linked: dict[str, set[int]] = {}
    for s in system_map:
        if s.text:
            linked.setdefault(s.name, set()).add(s.address)
    wrong = [s.name for s in kallsyms if s.text and not s.module and s.name in linked
             and s.address - offset not in linked[s.name]]
    if wrong:
        raise SymbolError(f"the System.map is not the booted kernel's: {len(wrong)} symbols, e.g. {wrong[0]}, "
                          f"are not at their System.map address plus the slide {offset:#x}")
    return offset


@dataclass
class Symbolizer:
    """Names addresses against `symbols` (sorted by address): an address
    names the function at or below it, within the core kernel's text (its
    first function to `_etext`) or, in a module, below the next symbol of
    any kind (past the last symbol listed, a function's end is unknown);
    `source` says where the symbols came from, `kaslr_slide` how far the
    System.map's were moved."""
    symbols: list[Symbol]
    source: str
    kaslr_slide: int | None = None

    def __post_init__(self):
        self._addresses = [s.address for s in self.symbols]
        core = [s.address for s in self.symbols if not s.module and s.text]
        etext = [s.address for s in self.symbols if s.name == "_etext" and not s.module]
        self._core = (core[0], etext[0] if etext else core[-1] + 1) if core else (0, 0)

    def name(self, pc: int | str) -> str:
        """The function holding the address ('user' for the plugin's user
        space row, a hex string or an int otherwise)."""
        if pc == "user":
            return USER
        address = int(pc, 16) if isinstance(pc, str) else pc
        i = bisect.bisect_right(self._addresses, address) - 1
        if i < 0:
            return f"? {address:#x}"
        s = self.symbols[i]
        if not s.text or (not s.module and not (self._core[0] <= address < self._core[1])):
            return f"? {address:#x}"
        if s.module:
            if i + 1 == len(self.symbols):     # past the last symbol listed: its function's end is unknown
                return f"? {address:#x}"
            return f"{function_name(s.name)} [{s.module}]"
        return function_name(s.name)


def from_kallsyms(kallsyms_text: str) -> Symbolizer:
    syms = parse(kallsyms_text)
    if not any(s.text for s in syms):
        raise SymbolError("the guest's kallsyms lists no text symbol")
    if all(s.address == 0 for s in syms):
        raise SymbolError("the guest's kallsyms hides its addresses (kernel.kptr_restrict): all are 0")
    return Symbolizer(syms, "the guest's /proc/kallsyms")


def from_system_map(system_map_text: str, kallsyms_text: str) -> Symbolizer:
    """The System.map's core text slid to where the guest placed it, and the
    guest's module symbols (a System.map has none)."""
    linked, booted = parse(system_map_text), from_kallsyms(kallsyms_text).symbols
    offset = slide(linked, booted)
    syms = [Symbol(s.address + offset, s.name, "", s.text) for s in linked if s.address]
    syms += [s for s in booted if s.module]
    syms.sort(key=lambda s: s.address)
    return Symbolizer(syms, "the kernel build's System.map", offset)


def system_map_of(kernel) -> str | None:
    """A lab kernel's System.map, read from its linux-image package in the
    kernel cache (dpkg-deb; nothing is written there); None when it has none."""
    if kernel is None:
        return None
    debs = [d for d in kernel.debs if d.name.startswith(f"linux-image-{kernel.release}_")]
    if not debs:
        return None
    member = f"./boot/System.map-{kernel.release}"
    dpkg = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(debs[0])], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-xOf", "-", member], stdin=dpkg.stdout, capture_output=True, timeout=300)
    dpkg.stdout.close()
    dpkg.wait(timeout=60)
    if dpkg.returncode != 0 or tar.returncode != 0:
        raise SymbolError(f"no {member} in {debs[0]}: {tar.stderr.decode(errors='replace').strip()[:300]}")
    return tar.stdout.decode()


def for_boot(kallsyms: Path, kernel=None) -> Symbolizer:
    """The symbolizer for one traffic boot: its kernel build's System.map
    when it has one (a lab kernel), the guest's kallsyms otherwise."""
    text = kallsyms.read_text()
    system_map = system_map_of(kernel)
    return from_system_map(system_map, text) if system_map else from_kallsyms(text)
