# SPDX-License-Identifier: Apache-2.0
"""Cut a patch series out of a mailing-list text file or an mbox, as `git am`
or b4 would take it: the patches named `[PATCH vN k/n]` (any order of
RFC/PATCH and the version; a lone `[PATCH]` or `[PATCH vN]` is 1/1), each
one's diff read hunk by hunk by the line counts in its hunk headers, so a
`-- ` signature, quoted copies of the patch inside review replies
(`> diff --git`) and the cover letter are never taken for the patch.

An mbox (`git format-patch --stdout`, b4's .mbx, a lore.kernel.org
t.mbox, mboxo or mboxrd) is read message by message: the Subject header
unfolded and decoded, the body's text parts decoded from quoted-printable
or base64 (patches attached as text/x-diff included), as `git am` does.

    python3 -m lab.mailing_list FILE VERSION [OUT_DIR]

lists (or writes as NNNN.patch) the patches of VERSION (e.g. v3) in FILE.
"""
from __future__ import annotations

import email
import email.policy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# A patch's subject: "[PATCH v8 4/9] mm: ...", "[RFC PATCH v3 2/3] ...",
# "[PATCH RFC v2 1/3] ..."; in an mbox, behind "Subject: ". Replies ("Re: [...")
# and quoted lines ("> [...") do not match.
SUBJECT_RE = re.compile(r"^(?:Subject:\s*)?\[(?P<tags>[^\]]*?\bPATCH\b[^\]]*)\]\s*(?P<title>.+)$")
NUMBER_RE = re.compile(r"\b(?P<k>\d+)/(?P<n>\d+)\b")
# an mbox's message separator: "From <sender or sha> <date>" (git: "From <sha> Mon Sep 17 00:00:00 2001")
MBOX_FROM_RE = re.compile(r"^From \S+ .*\d{4}$")
VERSION_RE = re.compile(r"\bv(?P<v>\d+)\b")
HUNK_RE = re.compile(r"^@@ -(?P<os>\d+)(?:,(?P<ol>\d+))? \+(?P<ns>\d+)(?:,(?P<nl>\d+))? @@")


class SeriesError(ValueError):
    """The file does not hold the series asked for, or a diff in it is cut short."""


@dataclass(frozen=True)
class Patch:
    version: str      # "v3"; "v1" when the subject names none
    number: int       # k of k/n
    total: int        # n of k/n
    title: str
    diff: str         # what `patch -p1` takes
    source_line: int  # 1-based line of the subject in the file

    @property
    def files(self) -> list[str]:
        return re.findall(r"^diff --git a/(\S+) ", self.diff, flags=re.M)


def _read_diff(lines: list[str], i: int) -> tuple[str, int]:
    """The diff starting at lines[i] ("diff --git ..."): every file section
    that follows, each hunk taken by its header's counts. Returns the text and
    the index of the first line after it."""
    out: list[str] = []
    while i < len(lines) and lines[i].startswith("diff --git "):
        out.append(lines[i])
        i += 1
        # extended header lines up to the first hunk
        while i < len(lines) and not lines[i].startswith("@@") and not lines[i].startswith("diff --git "):
            if not re.match(r"(index |--- |\+\+\+ |new file|deleted file|old mode|new mode|similarity|rename |copy )",
                            lines[i]):
                break
            out.append(lines[i])
            i += 1
        while i < len(lines) and (m := HUNK_RE.match(lines[i])):
            old = int(m["ol"]) if m["ol"] is not None else 1
            new = int(m["nl"]) if m["nl"] is not None else 1
            out.append(lines[i])
            i += 1
            while old > 0 or new > 0:
                if i >= len(lines):
                    raise SeriesError(f"diff cut short at line {i + 1}: a hunk wants {old} old/{new} new lines more")
                line = lines[i]
                tag = line[:1]
                if line == "":            # a blank context line whose space was stripped by a mailer
                    tag, line = " ", " "
                if tag == " ":
                    old, new = old - 1, new - 1
                elif tag == "-":
                    old -= 1
                elif tag == "+":
                    new -= 1
                elif tag == "\\":         # "\ No newline at end of file"
                    pass
                else:
                    raise SeriesError(f"line {i + 1} is not part of the hunk it is in: {lines[i]!r}")
                if old < 0 or new < 0:
                    raise SeriesError(f"line {i + 1}: a hunk holds more lines than its header says")
                out.append(line)
                i += 1
            if i < len(lines) and lines[i].startswith("\\"):
                out.append(lines[i])
                i += 1
    return "\n".join(out) + "\n", i


def is_mbox(text: str) -> bool:
    first = text.lstrip("\n").split("\n", 1)[0].rstrip("\r")
    return bool(MBOX_FROM_RE.match(first))


def _messages(text: str) -> list[tuple[int, str, str]]:
    """(line of the separator, subject, decoded text body) for each message of an mbox."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if MBOX_FROM_RE.match(ln.rstrip("\r\n"))
              and (i == 0 or lines[i - 1].strip() == "")]
    out = []
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        # mboxrd quotes body lines ">From " (and ">>From "...) with one more ">"
        raw = "".join(re.sub(r"^>(>*From )", r"\1", ln) for ln in lines[a + 1:b])
        msg = email.message_from_string(raw, policy=email.policy.default)
        subject = " ".join(str(msg.get("Subject", "")).split())
        parts = []
        for part in msg.walk():
            if part.is_multipart() or part.get_content_maintype() != "text":
                continue
            if part.get_content_subtype() == "html":
                continue
            try:
                parts.append(part.get_content())
            except (LookupError, ValueError):      # an unknown charset: take the bytes as Latin-1
                parts.append(part.get_payload(decode=True).decode("latin-1"))
        out.append((a + 1, subject, "\n".join(parts)))
    return out


def patches(text: str) -> list[Patch]:
    """Every patch (a subject with its number, followed by a diff) in the text
    or mbox, in file order."""
    if is_mbox(text):
        found = []
        for line, subject, body in _messages(text):
            for p in _text_patches(f"Subject: {subject}\n\n{body}", one_subject=True):
                found.append(Patch(p.version, p.number, p.total, p.title, p.diff, source_line=line))
        return found
    return _text_patches(text)


def _text_patches(text: str, one_subject: bool = False) -> list[Patch]:
    lines = text.splitlines()
    found: list[Patch] = []
    current = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = SUBJECT_RE.match(line) if not (one_subject and i) else None
        if m:
            num = NUMBER_RE.search(m["tags"])
            ver = VERSION_RE.search(m["tags"])
            k, n = (int(num["k"]), int(num["n"])) if num else (1, 1)
            current = (f"v{ver['v']}" if ver else "v1", k, n, m["title"].strip(), i + 1)
            i += 1
            continue
        if line.startswith("diff --git ") and current is not None:
            diff, i = _read_diff(lines, i)
            found.append(Patch(*current[:4], diff=diff, source_line=current[4]))
            current = None
            continue
        i += 1
    return found


def series(path: Path, version: str, numbers: list[int] | None = None) -> list[Patch]:
    """Patches 1..n of `version` from the file, in order, each once. Raises
    SeriesError naming what is missing."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise SeriesError(f"cannot read {path}: {exc.strerror}") from None
    mine = [p for p in patches(text) if p.version == version]
    if not mine:
        have = sorted({p.version for p in patches(text)})
        raise SeriesError(f"{path}: no {version} patches (the file has {', '.join(have) or 'none'})")
    total = mine[0].total
    by_number: dict[int, Patch] = {}
    for p in mine:
        if p.total != total:
            raise SeriesError(f"{path}: {version} patches disagree on the series length ({p.total} vs {total})")
        by_number.setdefault(p.number, p)
    wanted = numbers or list(range(1, total + 1))
    missing = [k for k in wanted if k not in by_number]
    if missing:
        raise SeriesError(f"{path}: {version} lacks patch(es) {', '.join(f'{k}/{total}' for k in missing)}")
    return [by_number[k] for k in wanted]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    try:
        ps = series(Path(argv[0]), argv[1])
    except SeriesError as exc:
        print(f"mailing_list: {exc}", file=sys.stderr)
        return 2
    for p in ps:
        print(f"{p.version} {p.number}/{p.total} (line {p.source_line}) {p.title}: {', '.join(p.files)}")
        if len(argv) == 3:
            out = Path(argv[2])
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{p.number:04d}.patch").write_text(p.diff)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
