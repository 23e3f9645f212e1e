# SPDX-License-Identifier: Apache-2.0
"""Which bootloader boots this machine, its default entry, and its one-shot
entry (what `--via reboot` boots the next kernel with).

Three loaders are driven:
  grub with Debian entries: grub.cfg holds the menu entries; `grub-reboot
      ENTRY` sets next_entry in grubenv, which grub.cfg reads and clears;
  grub with BLS entries (Fedora, RHEL): grub.cfg runs `blscfg`, which makes
      an entry of each /boot/loader/entries/*.conf; the entry's id is the
      file name less .conf, and `grub2-reboot ID` sets next_entry as above;
  systemd-boot: entries in loader/entries/*.conf on the ESP (or /boot);
      `bootctl set-oneshot ID` (ID the file name in lower case) sets the EFI variable
      LoaderEntryOneShot, which systemd-boot consumes at the next boot.
Which one is in charge: the EFI variable LoaderInfo (systemd-boot writes its
name and version there at every boot) beats what lies on the disk, where
grub.cfg may be a leftover of a machine moved to systemd-boot. Anything else
is refused with what was found.

EFI variables are files under /sys/firmware/efi/efivars named NAME-GUID: 4
bytes of attributes, then the value (strings in UTF-16LE, NUL-terminated).
Every path is read under `root` so the tests lay out a machine in a directory.
"""
from __future__ import annotations

import fnmatch
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from nttrace.ab.kernels import under
from nttrace.errors import CapabilityError, UsageError

EFIVARS = Path("/sys/firmware/efi/efivars")
LOADER_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"     # systemd's Boot Loader Interface
GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-e98c0e3f6f4a"     # UEFI's own variables (SecureBoot)
LOCKDOWN = Path("/sys/kernel/security/lockdown")
GRUB_DIRS = (Path("/boot/grub"), Path("/boot/grub2"))
ESP_DIRS = (Path("/efi"), Path("/boot/efi"), Path("/boot"))     # where loader/ is, systemd-boot's order
BLS_DIRS = (Path("/boot/loader/entries"),)                     # what grub's blscfg reads
NO_SAVE_ENV = ("btrfs", "zfs")


# -- EFI variables, Secure Boot, lockdown ------------------------------------------
def efivar(root: Path, name: str, guid: str) -> bytes | None:
    """The value of an EFI variable (attributes dropped), None where unset."""
    try:
        data = (under(root, EFIVARS) / f"{name}-{guid}").read_bytes()
    except OSError:
        return None
    return data[4:] if len(data) >= 4 else None


def efivar_text(root: Path, name: str, guid: str = LOADER_GUID) -> str | None:
    data = efivar(root, name, guid)
    if data is None:
        return None
    return data.decode("utf-16-le", errors="replace").split("\0", 1)[0].strip() or None


def secure_boot(root: Path) -> bool | None:
    """Secure Boot on (True), off (False), or None where the firmware says
    nothing (BIOS, or no efivarfs)."""
    data = efivar(root, "SecureBoot", GLOBAL_GUID)
    return None if not data else data[0] == 1


def lockdown(root: Path) -> str | None:
    """The kernel's lockdown mode (the bracketed word of
    /sys/kernel/security/lockdown: none, integrity, confidentiality), None
    where the file is not there."""
    try:
        text = under(root, LOCKDOWN).read_text()
    except OSError:
        return None
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else None


def pe_signed(image: Path) -> bool | None:
    """Whether an EFI (PE) image carries an Authenticode signature: a non-empty
    certificate table (the optional header's data directory 4, "security").
    None where the file is not a PE image (no EFI stub): no firmware boots it."""
    try:
        with open(image, "rb") as f:
            head = f.read(0x1000)
    except OSError:
        return None
    if len(head) < 0x40 or head[:2] != b"MZ":
        return None
    pe = struct.unpack_from("<I", head, 0x3C)[0]
    if pe + 24 + 2 > len(head) or head[pe:pe + 4] != b"PE\0\0":
        return None
    opt = pe + 24
    magic = struct.unpack_from("<H", head, opt)[0]
    if magic == 0x20B:              # PE32+: NumberOfRvaAndSizes at 108, directories at 112
        count_at, dirs_at = opt + 108, opt + 112
    elif magic == 0x10B:            # PE32
        count_at, dirs_at = opt + 92, opt + 96
    else:
        return None
    if dirs_at + 5 * 8 > len(head) or struct.unpack_from("<I", head, count_at)[0] < 5:
        return False
    _addr, size = struct.unpack_from("<II", head, dirs_at + 4 * 8)
    return size > 0


# -- entries -------------------------------------------------------------------------
def release_of_linux(path: str) -> str | None:
    """The release a kernel path names: /vmlinuz-R, or systemd's /MACHINE-ID/R/linux."""
    name = Path(path).name
    if name.startswith("vmlinuz-"):
        return name[len("vmlinuz-"):]
    if name == "linux" and len(Path(path).parts) >= 2:
        return Path(path).parent.name
    return None


@dataclass
class Entry:
    id: str                 # what the loader's one-shot takes
    title: str
    release: str | None
    where: str              # the file it was read from
    version: str = ""       # a BLS entry's version (sorting)


def bls_entry(path: Path, entry_id: str) -> Entry:
    """A Boot Loader Specification entry file (title, version, linux lines)."""
    keys: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        k, _, v = line.strip().partition(" ")
        if k and not k.startswith("#") and k not in keys:
            keys[k] = v.strip()
    release = release_of_linux(keys.get("linux", "")) or keys.get("version")     # the kernel it boots
    return Entry(entry_id, keys.get("title", path.stem), release, str(path), keys.get("version", ""))


def version_key(text: str) -> list:
    """A version's parts for ordering (numbers as numbers): 6.10 after 6.9."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|[A-Za-z]+", text)]


def bls_sorted(entries: list[Entry]) -> list[Entry]:
    """The order grub's blscfg and systemd-boot list BLS entries in: highest
    version first, then by id."""
    return sorted(entries, key=lambda e: (version_key(e.version or e.release or ""), e.id), reverse=True)


def sdboot_id(file_name: str) -> str:
    """systemd-boot's id of an entry file: its name, lower case, less a boot
    counter ("+LEFT[-DONE]" before .conf), which is what its one-shot and
    default variables are matched against."""
    return re.sub(r"\+\d+(-\d+)?(?=\.conf$)", "", file_name).lower()


@dataclass
class Item:
    """A grub menu item: a menuentry (release from its linux line) or a submenu."""
    title: str
    id: str | None
    release: str | None = None
    children: list["Item"] | None = None      # a submenu's items
    bls: bool = False                          # the place `blscfg` puts the BLS entries


def grub_menu(cfg_text: str) -> list[Item]:
    """grub.cfg's menu as a tree: top-level items, a submenu's inside it."""
    top: list[Item] = []
    stack: list[tuple[int, list[Item]]] = [(0, top)]
    current: Item | None = None           # the menuentry whose body this line is in
    current_depth = 0
    depth = 0
    id_re = re.compile(r"(?:\$menuentry_id_option|--id)\s+'([^']+)'")
    for line in cfg_text.splitlines():
        s = line.strip()
        m = id_re.search(s)
        title = s.split("'")[1] if s.count("'") >= 2 else ""
        keyword = s.split(None, 1)[0] if s else ""      # not menuentry_id_option=..., grub.cfg's own variable
        if keyword == "submenu":
            sub = Item(title, m.group(1) if m else None, children=[])
            stack[-1][1].append(sub)
            stack.append((depth + 1, sub.children))
        elif keyword == "menuentry":
            current, current_depth = Item(title, m.group(1) if m else None), depth
            stack[-1][1].append(current)
        elif s.split()[:1] == ["blscfg"]:
            stack[-1][1].append(Item("(blscfg)", None, bls=True))
        elif s.split()[:1] in (["linux"], ["linuxefi"], ["linux16"]) and current is not None and len(s.split()) > 1:
            current.release = current.release or release_of_linux(s.split()[1])
        depth += s.count("{") - s.count("}")
        while len(stack) > 1 and stack[-1][0] > depth:
            stack.pop()
        if current is not None and depth <= current_depth:
            current = None
    return top


def grub_entry_id(cfg_text: str, release: str) -> str:
    """The grub-reboot argument ('submenu-id>entry-id') of the release's
    normal (not recovery) entry in a Debian grub.cfg: the entry titled
    "..., with Linux R" (Debian, Ubuntu), else the one whose linux line boots
    vmlinuz-R; UsageError where none."""
    def walk(items: list[Item], path: list[str], match) -> str | None:
        for it in items:
            if it.children is not None:
                found = walk(it.children, path + [it.id or it.title], match)
                if found:
                    return found
            elif it.id and "recovery" not in it.title.lower() and match(it):
                return ">".join(path + [it.id])
        return None

    menu = grub_menu(cfg_text)
    found = walk(menu, [], lambda it: re.search(rf"Linux {re.escape(release)}(?![\w.+-])", it.title)) \
        or walk(menu, [], lambda it: it.release == release)
    if not found:
        raise UsageError(f"ab start --via reboot: grub.cfg has no entry for Linux {release} (run update-grub)")
    return found


# -- the loader ----------------------------------------------------------------------
@dataclass
class Loader:
    kind: str                         # grub, grub-bls, systemd-boot, unknown
    how: str                          # how that was told
    root: Path
    cfg: Path | None = None           # grub.cfg
    entry_dirs: list[Path] = field(default_factory=list)
    loader_conf: Path | None = None   # systemd-boot's loader.conf
    notes: list[str] = field(default_factory=list)

    # entries
    def entries(self) -> list[Entry]:
        out = []
        for d in self.entry_dirs:
            for p in sorted(d.glob("*.conf")) if d.is_dir() else []:
                out.append(bls_entry(p, sdboot_id(p.name) if self.kind == "systemd-boot" else p.stem))
        return bls_sorted(out)

    def grub_items(self) -> list[Item]:
        """grub's top-level menu with blscfg's entries in their place."""
        items = []
        for it in grub_menu(self.cfg.read_text(errors="replace")) if self.cfg else []:
            if it.bls:
                items += [Item(e.title, e.id, e.release) for e in self.entries()]
            else:
                items.append(it)
        return items

    def entry_for(self, release: str) -> str:
        """The one-shot argument that boots `release`; UsageError where the
        loader has no entry for it."""
        if self.kind == "grub":
            return grub_entry_id(self.cfg.read_text(errors="replace"), release)
        found = [e for e in self.entries() if e.release == release]
        if not found:
            where = ", ".join(str(d) for d in self.entry_dirs)
            add = "kernel-install add" if self.kind == "systemd-boot" else "kernel-install add (or grubby)"
            raise UsageError(f"ab start --via reboot: no boot entry for {release} in {where} ({add})")
        return found[0].id

    # the default
    def default(self) -> dict:
        """{"loader", "entry", "release", "how"}: the entry a reset boots; entry
        and release None where it cannot be read (how says why)."""
        out = {"loader": self.kind, "entry": None, "release": None, "how": ""}
        if self.kind in ("grub", "grub-bls"):
            out.update(self._grub_default())
        elif self.kind == "systemd-boot":
            out.update(self._sdboot_default())
        else:
            out["how"] = f"cannot read the default entry: {self.how}"
        return out

    def _grub_default(self) -> dict:
        text = self.cfg.read_text(errors="replace")
        values = ["".join(m) for m in re.findall(r"^\s*set\s+default=(?:\"([^\"]*)\"|'([^']*)'|(\S*))", text, re.M)]
        values = [v for v in values if v not in ("${next_entry}", "$next_entry")]
        if not values:
            ref, how = "0", f"{self.cfg} sets no default: grub boots entry 0"
        elif values[0] in ("${saved_entry}", "$saved_entry"):
            env = self.grubenv()
            saved = grubenv_values(env).get("saved_entry") if env else None
            ref = saved or "0"
            how = (f"{self.cfg} boots saved_entry, {env} has saved_entry={saved}" if saved else
                   f"{self.cfg} boots saved_entry, which {env or 'grubenv'} does not set: grub boots entry 0")
        else:
            ref, how = values[0], f"{self.cfg}: set default=\"{values[0]}\""
        item = resolve_grub_ref(self.grub_items(), ref)
        if item is None:
            return {"how": f"{how}, which names no entry of its menu: cannot tell what a reset boots"}
        if item.release is None:
            return {"entry": ref, "how": f"{how}: '{item.title}' boots no kernel nttrace can name"}
        return {"entry": ref, "release": item.release, "how": f"{how} ('{item.title}')"}

    def _sdboot_default(self) -> dict:
        efi_default = efivar_text(self.root, "LoaderEntryDefault")      # bootctl set-default: beats loader.conf
        pattern, how = None, ""
        if efi_default:
            pattern, how = efi_default, f"the EFI variable LoaderEntryDefault is {efi_default}"
        elif self.loader_conf and self.loader_conf.is_file():
            for line in self.loader_conf.read_text(errors="replace").splitlines():
                k, _, v = line.strip().partition(" ")
                if k == "default" and v.strip():
                    pattern, how = v.strip(), f"{self.loader_conf}: default {v.strip()}"
        if pattern == "@saved":
            last = efivar_text(self.root, "LoaderEntryLastBooted")
            if not last:
                return {"how": f"{how}, and no LoaderEntryLastBooted: cannot tell what a reset boots"}
            pattern, how = last, f"{how}, LoaderEntryLastBooted is {last}"
        if not pattern:
            return {"how": "systemd-boot: no default in loader.conf nor LoaderEntryDefault; it picks by its own "
                           "order: cannot tell what a reset boots"}
        pattern = pattern.lower()
        found = [e for e in self.entries() if fnmatch.fnmatchcase(e.id, pattern)
                 or fnmatch.fnmatchcase(e.id[:-len(".conf")], pattern)]
        if not found:
            return {"how": f"{how}, which matches no entry in {', '.join(map(str, self.entry_dirs))}"}
        e = found[0]
        return {"entry": e.id, "release": e.release,
                "how": how + (f" (the highest version of {len(found)} matching)" if len(found) > 1 else "")}

    def grubenv(self) -> Path | None:
        env = self.cfg.with_name("grubenv") if self.cfg else None
        return env if env and env.is_file() else None

    # the one-shot
    def oneshot_cmd(self, entry: str) -> list[str]:
        if self.kind in ("grub", "grub-bls"):
            return [grub_reboot_binary() or "grub-reboot", entry]
        if self.kind == "systemd-boot":
            return ["bootctl", "set-oneshot", entry]
        raise RuntimeError(f"--via reboot: {self.how}")

    def oneshot_set(self, entry: str) -> str | None:
        """None where grub's environment block now holds next_entry=entry,
        else what it holds: grub-reboot exits 0 whatever grub-editenv did
        (a read-only /boot, a full disk), so its word is not taken. None for
        systemd-boot, whose bootctl reports its own failure."""
        if self.kind not in ("grub", "grub-bls") or self.cfg is None:
            return None
        env = self.cfg.with_name("grubenv")
        try:
            got = grubenv_values(env).get("next_entry")
        except OSError as exc:
            return f"{env} cannot be read ({exc.strerror})"
        return None if got == entry else f"{env} holds next_entry={got or ''}"

    def clear_cmd(self) -> list[str] | None:
        """The command that removes a pending one-shot entry; None where none is pending or possible."""
        if self.kind in ("grub", "grub-bls") and self.cfg is not None:
            return [shutil.which("grub-editenv") or shutil.which("grub2-editenv") or "grub-editenv",
                    str(self.cfg.with_name("grubenv")), "unset", "next_entry"]
        if self.kind == "systemd-boot" and efivar(self.root, "LoaderEntryOneShot", LOADER_GUID) is not None:
            return ["bootctl", "set-oneshot", ""]
        return None


def grubenv_values(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v
    return out


def resolve_grub_ref(items: list[Item], ref: str) -> Item | None:
    """The menu item grub's `default` names: a path of parts split by '>',
    each an index (from 0), an entry id or a title."""
    node: Item | None = None
    level = items
    for part in ref.split(">"):
        if level is None:
            return None
        if part.isdigit():
            node = level[int(part)] if int(part) < len(level) else None
        else:
            node = next((it for it in level if part in (it.id, it.title)), None)
        if node is None:
            return None
        level = node.children
    return node if node is not None and node.children is None else None


def grub_reboot_binary() -> str | None:
    return shutil.which("grub-reboot") or shutil.which("grub2-reboot")


def detect(root: Path = Path("/")) -> Loader:
    """The loader in charge: LoaderInfo's word where the firmware has it,
    else what the disk holds."""
    grub_cfg = next((under(root, d) / "grub.cfg" for d in GRUB_DIRS if (under(root, d) / "grub.cfg").is_file()), None)
    esp = next((under(root, d) for d in ESP_DIRS if (under(root, d) / "loader" / "loader.conf").is_file()), None)
    sd_dirs = [under(root, d) / "loader" / "entries" for d in ESP_DIRS
               if (under(root, d) / "loader" / "entries").is_dir()]
    info = efivar_text(root, "LoaderInfo")
    if info and info.lower().startswith("systemd-boot"):
        ld = Loader("systemd-boot", f"the EFI variable LoaderInfo names {info}", root, entry_dirs=sd_dirs,
                    loader_conf=esp / "loader" / "loader.conf" if esp else None)
        if grub_cfg is not None:
            ld.notes.append(f"{grub_cfg} is there but systemd-boot boots this machine (LoaderInfo): grub is not driven")
        return ld
    if info and not info.lower().startswith("grub"):
        return Loader("unknown", f"the EFI variable LoaderInfo names {info!r}, which nttrace cannot drive", root)
    if grub_cfg is not None:
        if esp is not None and not info:
            return Loader("unknown", f"both {grub_cfg} and systemd-boot's {esp / 'loader' / 'loader.conf'} are there "
                                     "and no LoaderInfo EFI variable says which boots", root)
        how = f"{grub_cfg}" + (f" (LoaderInfo names {info})" if info else "")
        text = grub_cfg.read_text(errors="replace")
        if re.search(r"^\s*blscfg\b", text, re.M):
            return Loader("grub-bls", f"{how} runs blscfg", root, cfg=grub_cfg,
                          entry_dirs=[under(root, d) for d in BLS_DIRS])
        return Loader("grub", how, root, cfg=grub_cfg)
    if esp is not None:
        return Loader("systemd-boot", f"{esp / 'loader' / 'loader.conf'} (no LoaderInfo EFI variable)", root,
                      entry_dirs=sd_dirs, loader_conf=esp / "loader" / "loader.conf")
    return Loader("unknown", "no grub.cfg (/boot/grub, /boot/grub2), no systemd-boot loader.conf "
                             "(/efi, /boot/efi, /boot) and no LoaderInfo EFI variable", root)


def grub_cannot_save_env(grub_dir: Path, run) -> str | None:
    """Why grub itself cannot clear its one-shot entry at boot, or None (also
    where grub-probe cannot tell). Grub's save_env writes grubenv only on a
    plain disk or partition and a filesystem without checksums: not on LVM,
    RAID or encryption, not on btrfs or ZFS."""
    probe = shutil.which("grub-probe") or shutil.which("grub2-probe")
    if not probe:
        return None
    found = {}
    for target in ("fs", "abstraction"):
        try:
            p = run([probe, f"--target={target}", str(grub_dir)])
        except (OSError, subprocess.SubprocessError):
            return None
        if p.returncode != 0:
            return None
        found[target] = p.stdout.strip()
    if found["abstraction"]:
        return f"{grub_dir} is on {found['abstraction']}"
    if found["fs"] in NO_SAVE_ENV:
        return f"{grub_dir} is on {found['fs']}"
    return None


def check_grub_oneshot(cfg: Path, exe: str, run) -> None:
    """grub.cfg honours the one-shot entry (reads next_entry) and grub can
    clear it at boot (save_env on grubenv); or exit 3."""
    try:
        text = cfg.read_text(errors="replace")
    except OSError as exc:
        raise CapabilityError(f"ab start --via reboot: cannot read {cfg}: {exc.strerror}") from None
    if "next_entry" not in text:
        raise CapabilityError(f"ab start --via reboot: {cfg} does not read grub's next_entry, so "
                              f"{Path(exe).name} would not boot the entry once")
    why = grub_cannot_save_env(cfg.parent, run)
    if why:
        raise CapabilityError(f"ab start --via reboot: grub cannot clear its one-shot entry at boot ({why}): a "
                              "kernel that fails to boot would be booted again and again; use --via kexec")


def check_reboot(loader: Loader, releases: dict[str, str], run) -> tuple[list[str], dict[str, str]]:
    """The loader can boot each release once and then its default again:
    (what was found, {side: one-shot entry}); CapabilityError (exit 3) where
    the loader cannot, UsageError (exit 2) where a release has no entry."""
    if loader.kind == "unknown":
        raise CapabilityError(f"ab start --via reboot: cannot drive this machine's bootloader ({loader.how}); "
                              "--via reboot knows grub (Debian or BLS entries) and systemd-boot; use --via kexec")
    found = list(loader.notes)
    if loader.kind in ("grub", "grub-bls"):
        exe = grub_reboot_binary()
        if not exe:
            raise CapabilityError(f"ab start --via reboot: grub boots this machine ({loader.how}) but there is no "
                                  "grub-reboot or grub2-reboot on PATH")
        check_grub_oneshot(loader.cfg, exe, run)
        found.append(f"grub ({loader.how}): one-shot entries by {Path(exe).name}")
    else:
        if not shutil.which("bootctl"):
            raise CapabilityError(f"ab start --via reboot: systemd-boot boots this machine ({loader.how}) but there "
                                  "is no bootctl on PATH (systemd-boot's one-shot entry is set with it)")
        found.append(f"systemd-boot ({loader.how}): one-shot entries by bootctl set-oneshot")
    entries = {side: loader.entry_for(release) for side, release in releases.items()}
    found += [f"boot entry {entry} for {releases[side]} ({side})" for side, entry in entries.items()]
    return found, entries
