#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints the version a build of the tree TREE (default: this checkout) gets.
#
#   tools/version.sh [TREE]
#
# tracer/__init__.py's __version__ is the one place a version is written: the
# last release (its debian/changelog entry is kept in git). A commit tagged
# v<__version__> builds exactly that version; any other commit builds
#   <__version__>+git<YYYYMMDD>.<HHMMSS>.<sha7>
# from the commit's committer time (UTC) and hash. dpkg (and PEP 440) sort it
# after the release and before the next one (0.1.0 < 0.1.0+git... < 0.1.1),
# and a later commit after an earlier one, so each build upgrades the last.
#
# The commit comes from git when TREE has a .git, and otherwise from
# tools/archive-commit, which `git archive` fills in (export-subst in
# .gitattributes): an exported tree builds the same version as its checkout.
# Exit 2: no __version__, or neither a checkout nor an export.
set -euo pipefail
tree=${1:-$(cd "$(dirname "$0")/.." && pwd)}
release=$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' "$tree/tracer/__init__.py" 2>/dev/null || true)
[ -n "$release" ] || { echo "version: no __version__ in $tree/tracer/__init__.py" >&2; exit 2; }

if [ -e "$tree/.git" ]; then
    read -r time hash < <(git -C "$tree" log -1 --format='%ct %H')
    tag=$(git -C "$tree" describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null || true)
else
    stamp=$(cat "$tree/tools/archive-commit" 2>/dev/null || true)
    case $stamp in
        ''|*'$Format'*)
            echo "version: $tree is neither a git checkout nor a \`git archive\` export (tools/archive-commit not filled in)" >&2
            exit 2 ;;
    esac
    read -r time hash describe <<<"$stamp"
    # %(describe) names the tag alone only on the tagged commit itself
    case ${describe:-} in *-g[0-9a-f]*) tag= ;; *) tag=${describe:-} ;; esac
fi

if [ "$tag" = "v$release" ]; then
    echo "$release"
else
    echo "$release+git$(date -u -d "@$time" +%Y%m%d.%H%M%S).${hash:0:7}"
fi
