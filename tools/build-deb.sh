#!/usr/bin/env bash
# `make deb`: builds nttrace_<version>_amd64.deb with Debian's own tools
# (dpkg-buildpackage -b: debhelper, dh-python/pybuild) from debian/, in a
# copy of the tree under /tmp (dpkg-buildpackage writes beside the source
# directory), and puts the .deb in OUT_DIR (default dist/).
#
#   tools/build-deb.sh [OUT_DIR]
#
# The version is tracer/__init__.py's __version__, the one place it is
# written: debian/changelog is generated from it (tools/debian-changelog.sh;
# it is not in git).
# The copy holds what git tracks plus untracked files git does not ignore,
# as they are in the working tree. Exit 2: no git checkout or no version.
set -euo pipefail
tree=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$tree/dist}" && cd "${1:-$tree/dist}" && pwd)

version=$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' "$tree/tracer/__init__.py")
[ -n "$version" ] || { echo "build-deb: no __version__ in tracer/__init__.py" >&2; exit 2; }
git -C "$tree" rev-parse --git-dir >/dev/null 2>&1 || { echo "build-deb: $tree is not a git checkout" >&2; exit 2; }

work=$(mktemp -d /tmp/nttrace-deb.XXXXXX)
[ -n "${NTTRACE_DEB_KEEP:-}" ] && echo "build-deb: keeping $work" >&2 || trap 'rm -rf "$work"' EXIT
src="$work/nttrace-$version"
mkdir "$src"
# tracked (as edited, deleted ones skipped) and untracked-but-not-ignored files
(cd "$tree" && git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf -) | tar -C "$src" -xf -

"$tree/tools/debian-changelog.sh" "$tree" > "$src/debian/changelog"
t0=$(date +%s)
(cd "$src" && dpkg-buildpackage -b -us -uc) > "$work/build.log" 2>&1 || {
    tail -40 "$work/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (the tail of its log is above)" >&2
    exit 1
}
deb="$work/nttrace_${version}_amd64.deb"
cp "$deb" "$out/"
echo "build-deb: $out/$(basename "$deb") in $(( $(date +%s) - t0 ))s"
