#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints the debian/changelog a build of the tree TREE (default: this
# checkout) uses: the changelog kept in git, and on top of it, for a build of
# any commit but a release's, one snapshot entry of the version
# tools/version.sh gives (UNRELEASED, naming the commit, dated by the commit,
# so a rebuild of one commit writes the same changelog). tools/build-deb.sh
# writes it into its temporary copy only; the file in git is not touched.
#
#   tools/debian-changelog.sh [TREE] [VERSION]
#
# Exit 2: the kept changelog's top entry is not tracer/__init__.py's
# __version__ (a release adds both, in the same commit), or no version.
set -euo pipefail
tree=${1:-$(cd "$(dirname "$0")/.." && pwd)}
here=$(cd "$(dirname "$0")" && pwd)
version=${2:-$("$here/version.sh" "$tree")}
release=$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' "$tree/tracer/__init__.py")
kept="$tree/debian/changelog"
top=$(dpkg-parsechangelog -l "$kept" -SVersion)
[ "$top" = "$release" ] || {
    echo "debian-changelog: debian/changelog's top entry is $top, tracer/__init__.py's __version__ is $release" >&2
    exit 2
}
if [ "$version" != "$release" ]; then
    maintainer=$(sed -n 's/^Maintainer: //p' "$tree/debian/control")
    stamp=${version#*+git}                      # YYYYMMDD.HHMMSS.sha7
    date=$(date -R -u -d "${stamp:0:8} ${stamp:9:2}:${stamp:11:2}:${stamp:13:2} UTC")
    cat <<CHANGELOG
nttrace ($version) UNRELEASED; urgency=medium

  * Snapshot of commit ${stamp:16}, after release $release.

 -- $maintainer  $date

CHANGELOG
fi
cat "$kept"
