"""Client ID Metadata Documents: gantry named to an authorization server by an https URL.

The operator publishes a small JSON document (docs/mcp.md, "OAuth") and puts its address in the
manifest (`oauth_client_metadata_url`); an authorization server that advertises
`client_id_metadata_document_supported` fetches it and takes the URL as gantry's client_id, so
nothing is registered. The flow itself is the SDK's (`client_metadata_url` of
`OAuthClientProvider`); here are the checks of the address and the document it must hold.
Pure: nothing here imports `mcp`.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

MAX_URL = 2048  # characters; an address longer than this is no one's client_id
APPLICATION_TYPE: Final = "native"  # OIDC Registration §2: a CLI/daemon, not a web server


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a client_id (draft-ietf-oauth-client-id-metadata-document), or
    None: https, a host, a path other than `/`, no `.`/`..` segments, no login, no #fragment,
    no spaces."""
    if len(url) > MAX_URL:
        return f"longer than {MAX_URL} characters"
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return f"{url[:200]!r} is not a URL"
    if parts.scheme != "https" or not parts.hostname:
        return f"{url[:200]!r} must be an https URL (the authorization server fetches it)"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password"
    if parts.path in ("", "/"):
        return "must have a path (the document's address, e.g. https://example.com/gantry.json)"
    if any(seg in (".", "..") for seg in parts.path.split("/")):
        return "must not have . or .. path segments"
    if parts.fragment or url.endswith("#"):
        return "must not have a #fragment"
    return None


def document(url: str, redirect_uri: str, client_name: str, scope: str | None = None
             ) -> dict[str, Any]:
    """The document to publish at `url`: what gantry's login asks for must match it."""
    doc: dict[str, Any] = {
        "client_id": url,
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": APPLICATION_TYPE,
    }
    if scope:
        doc["scope"] = scope
    return doc


def reusable(client_id: str, metadata_url: str | None) -> bool:
    """Whether a stored registration may be used again: not when it is a metadata address the
    manifest no longer names (an https client_id is taken for one; a registration server
    issuing such ids gets a new registration, which costs only that)."""
    if client_id == metadata_url:
        return True
    return not client_id.startswith("https://")
