# SPDX-License-Identifier: Apache-2.0
"""Test certificates made with the openssl command: a CA, server
certificates for 127.0.0.1 and client certificates signed by a CA."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@dataclass
class Pair:
    cert: Path
    key: Path


def ca(d: Path, name: str) -> Pair:
    p = Pair(d / f"{name}.crt", d / f"{name}.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(p.key), "-out", str(p.cert), "-days", "2", "-subj", f"/CN={name}")
    return p


def signed(d: Path, name: str, by: Pair, server: bool, san: str | None = None) -> Pair:
    """A leaf certificate signed by `by`: a server one for 127.0.0.1, or a
    client one (with `san` as its URI SAN, if given)."""
    p = Pair(d / f"{name}.crt", d / f"{name}.key")
    csr = d / f"{name}.csr"
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(p.key),
         "-out", str(csr), "-subj", f"/CN={name}")
    ext = d / f"{name}.ext"
    if server:
        ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    else:
        ext.write_text((f"subjectAltName={san}\n" if san else "") + "extendedKeyUsage=clientAuth\n")
    _run("x509", "-req", "-in", str(csr), "-CA", str(by.cert), "-CAkey", str(by.key), "-CAcreateserial",
         "-out", str(p.cert), "-days", "2", "-extfile", str(ext))
    return p
