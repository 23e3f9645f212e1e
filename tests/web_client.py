# SPDX-License-Identifier: Apache-2.0
"""A client of the daemon's web endpoint, for the tests: bcrypt hashes of
each prefix, a basic-auth header, and a GET of /metrics over TLS that
answers with its status or why the connection was refused."""
import base64
import ssl
import urllib.error
import urllib.request

import bcrypt


def bhash(password: str, prefix: str = "$2b$", cost: int = 4) -> str:
    h = bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()
    return prefix + h[4:]


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def fetch(port: int, ctx: ssl.SSLContext, headers: dict) -> int | str:
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ssl.SSLError, ConnectionError, OSError) as e:
        return f"refused: {getattr(e, 'reason', e)}"
