"""How a remote server's requests get authenticated: the host's auth hook, and OAuth's.

Above both the token store (tokens.py) and the SDK's OAuth client (oauth.py), so neither
imports the other back; the SDK's client auth is imported only for a manifest that needs it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gantry.mcp.manifest import ServerSpec

# The hook through which a remote server's requests get authenticated: given the spec, an
# `httpx2.Auth` for its HTTP client, or None. Host(auth=...) takes one; nothing else calls it.
AuthHook = Callable[[ServerSpec], Any]


def oauth_hook(specs: Any, db_path: str | os.PathLike[str], *, read_only: bool = False) -> Any:
    """The `Host(auth=...)` hook for the manifest's OAuth servers, or None when it has none
    (then the SDK's client auth is never imported). A missing database is read as empty."""
    if not any(getattr(s, "auth", None) == "oauth" for s in specs):
        return None
    from gantry.mcp.oauth import OAuthHook
    from gantry.mcp.tokens import TokenStore

    path = os.fspath(db_path)
    return OAuthHook(TokenStore(path, read_only=read_only or not os.path.exists(path)))
