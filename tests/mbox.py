# SPDX-License-Identifier: Apache-2.0
"""Mailing-list text for the tests: patches as an mboxrd such as `git format-patch
--stdout` or lore's t.mbox gives."""
from __future__ import annotations


def mbox(patches, cte: str | None, attach: bool = False) -> str:
    """An mboxrd such as `git format-patch --stdout` or lore's t.mbox gives:
    long subjects folded, bodies in the transfer encoding given (or the diff
    attached as base64 text/x-diff), body lines "From " quoted as ">From "."""
    import email.message
    import email.policy
    out = []
    for p in patches:
        m = email.message.EmailMessage(policy=email.policy.SMTP.clone(linesep="\n"))
        m["From"] = "A U Thor <a@example.org>"
        m["Subject"] = f"[RFC PATCH {p.version} {p.number}/{p.total}] {p.title}, with words enough to fold the header"
        body = "From the commit message.\n\nSigned-off-by: A U Thor <a@example.org>\n---\n"
        if attach:
            m.set_content(body)
            m.add_attachment(p.diff, subtype="x-diff", cte="base64", filename=f"{p.number:04d}.patch")
        else:
            m.set_content(body + p.diff + "-- \n2.43.0\n", cte=cte)
        lines = [(">" + ln) if ln.lstrip(">").startswith("From ") else ln for ln in m.as_string().split("\n")]
        out.append("From mboxrd@z Thu Jan  1 00:00:00 1970\n" + "\n".join(lines) + "\n")
    return "\n".join(out)
