"""Which authorization server a login belongs to, and noticing that a server moved to another.

Tokens and a registration are good only at the issuer that gave them. The row's authorization
server metadata (gantry/mcp/tokens.py, `as_metadata`) says which issuer that was; when the
server's protected-resource metadata names other authorization servers, what is stored is
never sent there: a new login (and registration) is asked for. Pure: no `mcp` import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit


def stored(as_metadata: str | None) -> str | None:
    """The issuer of the authorization server metadata a login stored, if any."""
    if not as_metadata:
        return None
    try:
        value = json.loads(as_metadata).get("issuer")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def same(a: str, b: str) -> bool:
    """RFC 8414 §3.3 simple string comparison, a root issuer with or without its `/` alike."""
    if a == b:
        return True
    shorter, longer = sorted((a, b), key=len)
    parts = urlsplit(shorter)
    return longer == f"{shorter}/" and shorter == f"{parts.scheme}://{parts.netloc}"


def moved(old: str, advertised: Iterable[str]) -> str | None:
    """Why what is stored for `old` is not used: the server now names other authorization
    servers (`advertised`, from its protected-resource metadata); None if `old` is among them
    or nothing is advertised."""
    now = [a for a in advertised if a]
    if not now or any(same(old, a) for a in now):
        return None
    return (f"the server's authorization server changed from {old} to {now[0]}: the login "
            "for the old one is not sent to the new one")
