# SPDX-License-Identifier: Apache-2.0
"""Which kernel a KERNEL argument names and whether it is the one running:
the release AND the build string, read from the bzImage's setup header and
from /proc/version (the formats as Debian's and the lab's kernels write them)."""
import pytest

from ab_loop_machine import BUILDS, DEFAULT, bzimage, proc_version, running_of
from nttrace.ab import kernels
from nttrace.errors import UsageError

# a Debian kernel's two strings, as its bzImage and its /proc/version hold them
DEBIAN_IMAGE = "6.1.0-57-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)"
DEBIAN_PROC = ("Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14+deb12u1) "
               "12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)")


def test_the_image_string_and_proc_version_name_the_same_build():
    assert kernels.parse_image_version(DEBIAN_IMAGE) == kernels.parse_proc_version(DEBIAN_PROC)
    b = kernels.parse_proc_version(DEBIAN_PROC)
    assert b.release == "6.1.0-57-amd64" and b.builder == "(debian-kernel@lists.debian.org)"
    assert b.version == "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)"


def test_the_version_string_is_read_from_the_setup_header(tmp_path):
    p = bzimage(tmp_path / "vmlinuz", DEBIAN_IMAGE, body=b"\0" * 4096)
    assert kernels.image_version(p) == DEBIAN_IMAGE
    k = kernels.resolve(str(p))
    assert (k.release, k.build, k.initrd) == ("6.1.0-57-amd64", DEBIAN_IMAGE, None)
    assert kernels.is_running(k, kernels.Running("6.1.0-57-amd64", DEBIAN_PROC))


def test_another_build_of_the_same_release_is_not_the_running_kernel(tmp_path):
    k = kernels.resolve(str(bzimage(tmp_path / "vmlinuz", BUILDS["base"])))
    rebuilt = BUILDS["base"].replace("#1 ", "#2 ")
    assert kernels.is_running(k, running_of(BUILDS["base"]))
    assert not kernels.is_running(k, running_of(rebuilt))
    assert not kernels.is_running(k, running_of(DEFAULT))


def test_an_installed_release_is_found_with_its_initrd(tmp_path):
    bzimage(tmp_path / "vmlinuz-7.2.13", BUILDS["base"])
    (tmp_path / "initrd.img-7.2.13").write_bytes(b"initrd")
    k = kernels.resolve("7.2.13", boot=tmp_path)
    assert k.image == str(tmp_path / "vmlinuz-7.2.13") and k.initrd == str(tmp_path / "initrd.img-7.2.13")


def test_an_installed_release_with_a_dracut_initramfs_is_found_with_it(tmp_path):
    # Fedora, RHEL, Arch name it initramfs-R.img: without it kexec boots a kernel that cannot mount root
    bzimage(tmp_path / "vmlinuz-7.2.13", BUILDS["base"])
    (tmp_path / "initramfs-7.2.13.img").write_bytes(b"initrd")
    assert kernels.resolve("7.2.13", boot=tmp_path).initrd == str(tmp_path / "initramfs-7.2.13.img")


def test_a_path_with_an_initrd(tmp_path):
    p = bzimage(tmp_path / "bzImage", BUILDS["patched"])
    (tmp_path / "initrd").write_bytes(b"i")
    assert kernels.resolve(f"{p}:{tmp_path / 'initrd'}").initrd == str(tmp_path / "initrd")


@pytest.mark.parametrize("spec, message", [
    ("9.9.9", "unknown kernel '9.9.9': no {d}/vmlinuz-9.9.9 (an installed release, or a path to a bzImage)"),
    ("{d}/none", "unknown kernel '{d}/none': no file {d}/none"),
    ("{d}/notbz", "{d}/notbz: not an x86 bzImage (no setup header)"),
    ("{d}/vmlinuz-7.2.13:{d}/noinitrd", "kernel '{d}/vmlinuz-7.2.13:{d}/noinitrd': no initrd {d}/noinitrd"),
])
def test_a_kernel_that_is_not_there_is_refused_in_one_line(tmp_path, spec, message):
    bzimage(tmp_path / "vmlinuz-7.2.13", BUILDS["base"])
    (tmp_path / "notbz").write_bytes(b"\0" * 4096)
    with pytest.raises(UsageError) as e:
        kernels.resolve(spec.format(d=tmp_path), boot=tmp_path)
    assert str(e.value) == message.format(d=tmp_path)


def test_an_installed_release_whose_image_says_another_is_refused(tmp_path):
    bzimage(tmp_path / "vmlinuz-7.2.14", BUILDS["base"])
    with pytest.raises(UsageError, match="says release 7.2.13, not 7.2.14"):
        kernels.resolve("7.2.14", boot=tmp_path)


def test_an_image_changed_or_gone_is_named(tmp_path):
    p = bzimage(tmp_path / "vmlinuz", BUILDS["base"])
    k = kernels.resolve(str(p)).as_json()
    assert kernels.changed(k) is None
    bzimage(p, BUILDS["base"], body=b"rebuilt")
    assert "changed since the loop started" in kernels.changed(k)
    p.unlink()
    assert "is gone" in kernels.changed(k)


def test_proc_version_of_this_format_round_trips():
    assert kernels.parse_proc_version(proc_version(BUILDS["patched"])).text() == BUILDS["patched"]


def test_an_initrd_changed_is_named(tmp_path):
    # update-initramfs -u (a microcode or module update) between two boots: not the initrd the loop began with
    p = bzimage(tmp_path / "bzImage", BUILDS["base"])
    initrd = tmp_path / "initrd"
    initrd.write_bytes(b"initrd 1")
    k = kernels.resolve(f"{p}:{initrd}").as_json()
    assert kernels.changed(k) is None
    initrd.write_bytes(b"initrd 2, with new microcode")
    assert "changed since the loop started" in kernels.changed(k) and str(initrd) in kernels.changed(k)
    k_before = dict(k)
    del k_before["initrd_sha256"]                  # a schedule written before initrds were hashed
    assert kernels.changed(k_before) is None


# -- the module tree, config and headers a kernel brings ---------------------------------
def _installed(root, release="7.2.13-nt", build=BUILDS["patched"]):
    """An installed kernel under root: /boot/vmlinuz-R and config-R, /lib/modules/R with a
    module, modules.builtin, modules.dep, and build/ linked (absolute, as packages do) to
    /usr/src/linux-headers-R."""
    (root / "boot").mkdir(parents=True, exist_ok=True)
    bzimage(root / "boot" / f"vmlinuz-{release}", build)
    (root / "boot" / f"config-{release}").write_text(
        'CONFIG_LOCALVERSION="-nt"\nCONFIG_DEBUG_INFO_BTF=y\nCONFIG_I6300ESB_WDT=m\nCONFIG_HZ=250\n'
        "# CONFIG_KEXEC is not set\n")
    mods = root / "lib/modules" / release
    (mods / "kernel/drivers/watchdog").mkdir(parents=True)
    (mods / "kernel/drivers/watchdog/i6300esb.ko.xz").write_bytes(b"module v1")
    (mods / "modules.dep").write_text("kernel/drivers/watchdog/i6300esb.ko.xz:\n")
    (mods / "modules.builtin").write_text("kernel/drivers/watchdog/softdog.ko\nkernel/fs/ext4/ext4.ko\n")
    (root / "usr/src" / f"linux-headers-{release}/include").mkdir(parents=True)
    (mods / "build").symlink_to(f"/usr/src/linux-headers-{release}")
    return mods


def test_an_installed_kernel_brings_its_module_tree_config_and_headers(tmp_path):
    mods = _installed(tmp_path)
    k = kernels.resolve("7.2.13-nt", root=tmp_path)
    assert k.modules_dir == str(mods) and len(k.modules_sha256) == 64
    assert k.config == str(tmp_path / "boot/config-7.2.13-nt") and k.headers == str(mods / "build")
    kd = k.as_json()
    assert kernels.config_value(kd, "CONFIG_LOCALVERSION") == "-nt" and kernels.config_value(kd, "CONFIG_HZ") == "250"
    assert kernels.config_value(kd, "CONFIG_DEBUG_INFO_BTF") == "y" and kernels.config_value(kd, "CONFIG_KEXEC") is None
    assert kernels.has_module(kd, "i6300esb") and kernels.has_module(kd, "softdog") and kernels.has_module(kd, "ext4")
    assert not kernels.has_module(kd, "iTCO_wdt")
    # headers: build/ must hold include/, read under the root (not this host's /usr/src)
    import shutil
    shutil.rmtree(tmp_path / "usr/src/linux-headers-7.2.13-nt/include")
    assert kernels.resolve("7.2.13-nt", root=tmp_path).headers is None


def test_a_module_without_depmod_is_found_by_its_file(tmp_path):
    mods = _installed(tmp_path)
    (mods / "modules.dep").unlink()
    kd = kernels.resolve("7.2.13-nt", root=tmp_path).as_json()
    assert kernels.has_module(kd, "i6300esb") and not kernels.has_module(kd, "wdat_wdt")


def test_a_module_tree_rebuilt_between_boots_is_named(tmp_path):
    mods = _installed(tmp_path)
    kd = kernels.resolve("7.2.13-nt", root=tmp_path).as_json()
    assert kernels.changed(kd, root=tmp_path) is None
    (mods / "kernel/drivers/watchdog/i6300esb.ko.xz").write_bytes(b"module v2")     # make modules_install again
    why = kernels.changed(kd, root=tmp_path)
    assert why.startswith(f"the module tree {mods} changed since the loop started") and "no mixed builds" in why
    (mods / "kernel/drivers/watchdog/i6300esb.ko.xz").write_bytes(b"module v1")
    assert kernels.changed(kd, root=tmp_path) is None
    (mods / "kernel/drivers/watchdog/extra.ko").write_bytes(b"")                     # a module added
    assert "changed since" in kernels.changed(kd, root=tmp_path)


def test_headers_changed_or_gone_between_boots_are_named(tmp_path):
    """bcc compiles the probes against /lib/modules/R/build: headers another
    build installed there, or headers removed (apt autoremove), make every
    later run another build's (fails if the headers are not hashed, or
    their link not resolved, at each boot)."""
    _installed(tmp_path)
    kd = kernels.resolve("7.2.13-nt", root=tmp_path).as_json()
    headers = tmp_path / "usr/src/linux-headers-7.2.13-nt"
    assert kd["headers_real"] == str(headers) and len(kd["headers_sha256"]) == 64
    (headers / "include/new.h").write_text("x")
    why = kernels.changed(kd, root=tmp_path)
    assert why.startswith(f"its headers {headers} changed since the loop started (sha256 ") and "no mixed builds" in why
    (headers / "include/new.h").unlink()
    assert kernels.changed(kd, root=tmp_path) is None
    import shutil
    shutil.rmtree(headers)
    assert "are gone (bcc would have nothing to compile the probes against)" in kernels.changed(kd, root=tmp_path)


def test_a_bzimage_paths_config_is_the_one_beside_it(tmp_path):
    # a build tree: arch/x86/boot/bzImage and the tree's .config
    tree = tmp_path / "linux"
    (tree / "arch/x86/boot").mkdir(parents=True)
    image = bzimage(tree / "arch/x86/boot/bzImage", BUILDS["patched"])
    (tree / ".config").write_text("CONFIG_DEBUG_INFO_BTF=y\n")
    root = tmp_path / "root"
    (root / "boot").mkdir(parents=True)
    (root / "boot/config-7.2.13-nt").write_text("CONFIG_DEBUG_INFO_BTF=n\n")
    k = kernels.resolve(str(image), root=root)
    assert k.config == str(tree / ".config") and k.modules_dir is None and k.modules_sha256 is None
    # the lab's kernels: bzImage with `config` beside it
    lab = tmp_path / "lab"
    lab.mkdir()
    bzimage(lab / "bzImage", BUILDS["patched"])
    (lab / "config").write_text("CONFIG_X=y\n")
    assert kernels.resolve(str(lab / "bzImage"), root=root).config == str(lab / "config")
    # neither: the installed release's /boot/config-R; and its module tree where installed
    other = tmp_path / "other"
    other.mkdir()
    bzimage(other / "vmlinuz", BUILDS["patched"])
    (root / "lib/modules/7.2.13-nt").mkdir(parents=True)
    k = kernels.resolve(str(other / "vmlinuz"), root=root)
    assert k.config == str(root / "boot/config-7.2.13-nt") and k.modules_dir == str(root / "lib/modules/7.2.13-nt")
    (root / "boot/config-7.2.13-nt").unlink()
    assert kernels.resolve(str(other / "vmlinuz"), root=root).config is None


def test_a_files_hash_is_reused_while_it_is_the_same_file_and_made_again_when_it_changes(tmp_path):
    """The loop checks a distribution kernel's module tree (hundreds of MB)
    at every boot from the hashes it kept: a file whose size, mtime and inode
    are the same is not read again; one rewritten is, and the same contents
    give the same hash (fails if a rewrite goes unseen, or if every boot
    reads every file again)."""
    f = tmp_path / "mod.ko"
    f.write_bytes(b"module v1")
    cache = kernels.HashCache(tmp_path / "hashes.json")
    first = cache.sha256(f)
    cache.save()
    again = kernels.HashCache(tmp_path / "hashes.json")
    reads = []
    real = kernels.sha256
    kernels.sha256 = lambda p: reads.append(p) or real(p)
    try:
        assert again.sha256(f) == first and reads == []
        f.write_bytes(b"module v2")
        assert again.sha256(f) != first and reads == [f]
        f.write_bytes(b"module v1")
        assert again.sha256(f) == first and len(reads) == 2
    finally:
        kernels.sha256 = real
    (tmp_path / "hashes.json").write_text("{not json")
    assert kernels.HashCache(tmp_path / "hashes.json").entries == {}
