#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make deb`: builds nttrace's Debian source package (3.0 native: .dsc and
# .tar.xz) and its binary package (nttrace_<version>_amd64.deb) with Debian's
# own tools (dpkg-buildpackage: debhelper, dh-python/pybuild), from a clean
# export of the tree, and puts them (with the .buildinfo and .changes) in
# OUT_DIR (default dist/).
#
#   tools/build-deb.sh [OUT_DIR]
#   tools/build-deb.sh --source OUT_DIR   the source package only (dpkg-source:
#                                         nothing built; what a clean chroot
#                                         builds, lab/deb_chroot.py)
#
# The export: in a git checkout, `git archive HEAD` (the committed tree:
# uncommitted changes are not built, and the script says so when there are
# any); in a tree without .git (an extracted `git archive` export), the tree
# as it is. Either way the build runs in a copy under /tmp, never in the
# tree, and the version comes from tools/version.sh on the tree (a
# checkout's HEAD, whose history gives its count; an export's commit, which
# tools/archive-commit carries). Only the copy is changed: its
# tracer/__init__.py gets the build's version (as PEP 440 spells it), and
# its debian/changelog the snapshot entry on top of the one kept in git
# (tools/debian-changelog.sh).
#
# Exit 1: the build failed (the tail of its log is printed). Exit 2: no
# version (neither a checkout nor an export), or a build dependency missing.
set -euo pipefail
source_only=
[ "${1:-}" != --source ] || { source_only=1; shift; }
tree=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$tree/dist}" && cd "${1:-$tree/dist}" && pwd)

work=$(mktemp -d /tmp/nttrace-deb.XXXXXX)
[ -n "${NTTRACE_DEB_KEEP:-}" ] && echo "build-deb: keeping $work" >&2 || trap 'rm -rf "$work"' EXIT
export_dir="$work/export"
mkdir "$export_dir"
if [ -e "$tree/.git" ]; then
    if [ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ]; then
        echo "build-deb: the tree has uncommitted changes; building the committed tree (HEAD) only" >&2
    fi
    git -C "$tree" archive --format=tar HEAD | tar -C "$export_dir" -xf -
else
    tar -C "$tree" --exclude=./.venv --exclude=./dist --exclude=./build -cf - . | tar -C "$export_dir" -xf -
fi

version=$("$tree/tools/version.sh" "$tree")
python_version=$("$tree/tools/version.sh" --python "$tree")
src="$work/nttrace-$version"
mv "$export_dir" "$src"
"$tree/tools/debian-changelog.sh" "$tree" > "$work/changelog"
mv "$work/changelog" "$src/debian/changelog"
sed -i "s/^__version__ = \"[^\"]*\"/__version__ = \"$python_version\"/" "$src/tracer/__init__.py"

if [ -n "$source_only" ]; then
    (cd "$work" && dpkg-source -b "nttrace-$version") > "$work/source.log" 2>&1 \
        || { cat "$work/source.log" >&2; echo "build-deb: dpkg-source failed" >&2; exit 1; }
    cp "$work/nttrace_${version}.dsc" "$work/nttrace_${version}.tar.xz" "$out/"
    echo "build-deb: $out/nttrace_${version}.dsc (the source package alone)"
    exit 0
fi

# The build's environment is Debian's, not the caller's: no PATH entry of a
# pyenv, venv or ~/.local whose python3 would build (and test) the package
# instead of /usr/bin/python3, no PYTHONPATH, a locale every host has.
clean_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$work" LC_ALL=C.UTF-8 TMPDIR="$work"
           ${DEB_BUILD_OPTIONS:+DEB_BUILD_OPTIONS="$DEB_BUILD_OPTIONS"})
(cd "$src" && "${clean_env[@]}" dpkg-checkbuilddeps) || { echo "build-deb: install the build dependencies above (tools/install-system-packages.sh)" >&2; exit 2; }
t0=$(date +%s)
(cd "$src" && "${clean_env[@]}" dpkg-buildpackage -us -uc) > "$work/build.log" 2>&1 || {
    tail -40 "$work/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (the tail of its log is above)" >&2
    exit 1
}
for f in "nttrace_${version}_amd64.deb" "nttrace_${version}.dsc" "nttrace_${version}.tar.xz" \
         "nttrace_${version}_amd64.buildinfo" "nttrace_${version}_amd64.changes" \
         "nttrace-dbgsym_${version}_amd64.deb"; do
    cp "$work/$f" "$out/"
done
echo "build-deb: $out/nttrace_${version}_amd64.deb and its source package (nttrace_${version}.dsc) in $(( $(date +%s) - t0 ))s"
