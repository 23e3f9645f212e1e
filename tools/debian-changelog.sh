#!/usr/bin/env bash
# Prints debian/changelog for the tree TREE (default: this checkout): one
# entry, its version tracer/__init__.py's __version__ (the one place the
# version is written), naming the commit and carrying its date (a rebuild of
# one commit writes the same changelog), by debian/control's Maintainer.
# tools/build-deb.sh writes it into the copy it builds. Exit 2: no version.
set -euo pipefail
tree=${1:-$(cd "$(dirname "$0")/.." && pwd)}
version=$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' "$tree/tracer/__init__.py")
[ -n "$version" ] || { echo "debian-changelog: no __version__ in $tree/tracer/__init__.py" >&2; exit 2; }
commit=$(git -C "$tree" rev-parse --short HEAD)
dirty=$(git -C "$tree" status --porcelain --untracked-files=no | head -c1)
maintainer=$(sed -n 's/^Maintainer: //p' "$tree/debian/control")
date=$(date -R -u -d "@$(git -C "$tree" log -1 --format=%ct)")
cat <<CHANGELOG
nttrace ($version) unstable; urgency=medium

  * Built from the nttrace tree at commit $commit${dirty:+ (with uncommitted changes)}.

 -- $maintainer  $date
CHANGELOG
