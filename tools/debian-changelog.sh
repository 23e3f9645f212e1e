#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints the debian/changelog a build of a commit uses: the changelog kept
# in git, and on top of it, for a build of any commit but a release's, one
# snapshot entry of the version tools/version.sh gives (UNRELEASED, naming
# the commit, dated by the commit, so a rebuild of one commit writes the
# same changelog). tools/build-deb.sh writes it into its temporary copy
# only; the file in git is not touched.
#
#   tools/debian-changelog.sh [TREE [COMMIT]]
#
# TREE and COMMIT as tools/version.sh takes them: a checkout's COMMIT
# (default HEAD) as committed, or an extracted `git archive` export.
#
# Exit 2: the kept changelog's top entry is not the commit's __version__ (a
# release adds both, in the same commit), or no version (version.sh says why).
set -euo pipefail
tree=${1:-$(cd "$(dirname "$0")/.." && pwd)}
commit=${2:-HEAD}
here=$(cd "$(dirname "$0")" && pwd)
version=$("$here/version.sh" "$tree" "$commit")
release=$("$here/version.sh" --release "$tree" "$commit")
read -r time hash < <("$here/version.sh" --commit "$tree" "$commit")
if [ -e "$tree/.git" ]; then
    kept=$(git -C "$tree" show "$commit:debian/changelog")
    control=$(git -C "$tree" show "$commit:debian/control")
else
    kept=$(cat "$tree/debian/changelog")
    control=$(cat "$tree/debian/control")
fi
top=$(dpkg-parsechangelog -l- -SVersion <<<"$kept")
[ "$top" = "$release" ] || {
    echo "debian-changelog: debian/changelog's top entry is $top, tracer/__init__.py's __version__ is $release" >&2
    exit 2
}
if [ "$version" != "$release" ]; then
    maintainer=$(sed -n 's/^Maintainer: //p' <<<"$control")
    case $version in
        *~dev*) where="before release $release" ;;
        *) where="after release $release" ;;
    esac
    cat <<CHANGELOG
nttrace ($version) UNRELEASED; urgency=medium

  * Snapshot of commit ${hash:0:7}, $where.

 -- $maintainer  $(date -R -u -d "@$time")

CHANGELOG
fi
printf '%s\n' "$kept"
