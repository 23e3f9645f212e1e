#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints the version a build of a commit gets.
#
#   tools/version.sh [--python|--release|--commit] [TREE [COMMIT]]
#
#   (no option)  the Debian version (debian/changelog's, the .deb's)
#   --python     the same version as PEP 440 spells it (nttrace.__version__ of the build)
#   --release    the Debian spelling of the commit's own __version__ (the kept changelog's top entry)
#   --commit     the commit's time (seconds since the epoch) and full hash
#
# TREE (default: this checkout) is a git checkout, whose COMMIT (default
# HEAD) is read from git, committed content only; or an extracted `git
# archive` export, whose commit tools/archive-commit carries (export-subst in
# .gitattributes: its time, hash and `git describe`).
#
# tracer/__init__.py's __version__ is the one place a version is written: a
# release (PEP 440: 0.1.0, 0.2.0rc1). The commit tagged v<__version__>
# builds exactly that release. Any other commit builds a snapshot whose
# version carries N, the number of commits in its history that are not in
# the last release tag's (`git describe`'s count), so along the history it
# only grows, however close in time two commits are:
#
#   after the release __version__ is tagged:   <release>.post<N>+g<sha7>
#   before it is tagged (the next release):    <release>.dev<N>+g<sha7>
#     (N counted from the last release tag, or from the first commit
#      when there is none)
#
# PEP 440 and dpkg sort them the same way once Debian spells a pre-release
# or a dev segment with a tilde (0.2.0rc1 -> 0.2.0~rc1, .dev -> ~dev):
#   0.1.0 < 0.1.0.post1+g... < 0.1.0.post2+g... < 0.1.1~dev3+g... < 0.1.1
# A dev snapshot sorts below its release, so the tagged release replaces a
# build of the same commit made before the tag; a post snapshot sorts above
# every build of the old scheme (<release>+git<date>...: '.' sorts after '+').
#
# Exit 2: no __version__ or not a PEP 440 release; neither a checkout nor an
# export; an export whose history has no release tag (its count is unknown);
# a release tag above __version__, or on a commit whose __version__ differs.
set -euo pipefail
mode=debian
case ${1:-} in --python|--release|--commit) mode=${1#--}; shift ;; esac
tree=${1:-$(cd "$(dirname "$0")/.." && pwd)}
commit=${2:-HEAD}
fail() { echo "version: $*" >&2; exit 2; }

# The Debian spelling of a PEP 440 version: a tilde before a pre-release
# (a, b, rc) or a dev segment, which dpkg sorts before the release; the
# local part (+g<sha7>) as it is.
debian() {
    local public=${1%%+*} local=
    [ "$public" = "$1" ] || local=+${1#*+}
    echo "$(sed -E 's/([0-9])(a|b|rc)([0-9]+)/\1~\2\3/; s/\.dev([0-9]+)$/~dev\1/' <<<"$public")$local"
}

if [ -e "$tree/.git" ]; then
    init=$(git -C "$tree" show "$commit:tracer/__init__.py" 2>/dev/null) || fail "no tracer/__init__.py in $commit of $tree"
    read -r time hash < <(git -C "$tree" log -1 --format='%ct %H' "$commit")
    describe=$(git -C "$tree" describe --tags --match 'v[0-9]*' "$hash" 2>/dev/null || true)
    [ -n "$describe" ] || count=$(git -C "$tree" rev-list --count "$hash")
else
    init=$(cat "$tree/tracer/__init__.py" 2>/dev/null || true)
    stamp=$(cat "$tree/tools/archive-commit" 2>/dev/null || true)
    case $stamp in
        ''|*'$Format'*)
            fail "$tree is neither a git checkout nor a \`git archive\` export (tools/archive-commit not filled in)" ;;
    esac
    read -r time hash describe <<<"$stamp"
    [ -n "${describe:-}" ] \
        || fail "the export of ${hash:0:7} has no release tag v* in its history, so its commit count is unknown: build it from the checkout"
fi
release=$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' <<<"$init")
[ -n "$release" ] || fail "no __version__ in tracer/__init__.py of $tree"
[[ $release =~ ^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?$ ]] \
    || fail "__version__ $release is not a PEP 440 release (N.N.N, or with a1, b1, rc1)"

if [ -n "${describe:-}" ]; then
    # v<tag> on the tagged commit itself, v<tag>-<count>-g<hash> after it
    if [[ $describe =~ ^v(.+)-([0-9]+)-g[0-9a-f]+$ ]]; then
        tagged=${BASH_REMATCH[1]} count=${BASH_REMATCH[2]}
    else
        tagged=${describe#v} count=0
    fi
    dpkg --compare-versions "$(debian "$tagged")" le "$(debian "$release")" \
        || fail "the last release tag v$tagged is above __version__ $release"
    [ "$count" != 0 ] || [ "$tagged" = "$release" ] \
        || fail "the tag v$tagged is on ${hash:0:7}, whose __version__ is $release"
fi

if [ "${tagged:-}" = "$release" ] && [ "$count" = 0 ]; then
    python=$release
elif [ "${tagged:-}" = "$release" ]; then
    python="$release.post$count+g${hash:0:7}"
else
    python="$release.dev$count+g${hash:0:7}"
fi

case $mode in
    debian) debian "$python" ;;
    python) echo "$python" ;;
    release) debian "$release" ;;
    commit) echo "$time $hash" ;;
esac
