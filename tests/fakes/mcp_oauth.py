"""An OAuth-protected MCP server on 127.0.0.1, built from the SDK's own server auth modules.

The SDK's MCPServer with `auth_server_provider` serves both halves on one origin: the
authorization server (metadata, /register, /authorize, /token, /revoke) from
`mcp.server.auth`, and the resource server (/mcp, bearer tokens checked, protected-resource
metadata). Only the provider's storage is ours: in memory, consenting at once (the authorize
endpoint redirects straight to the client's redirect_uri with a code, which a test follows
with httpx instead of a person with a browser).

Run `python -m tests.fakes.mcp_oauth [--access-ttl S] [--no-registration CLIENT_ID] [--sse]
[--port P] [--issuer-host HOST] [--cimd-ca PEM] [--iss right|wrong]`; it prints its base URL
on stdout's first line and serves until killed. `--issuer-host localhost` names the
authorization server `http://localhost:P/` (another issuer on the same socket: restarted on the
same `--port`, it is a server whose authorization server changed). `--cimd-ca PEM`: the
authorization server advertises Client ID Metadata Documents and fetches an https `client_id`
(trusting that CA). `--iss`: the authorize redirect carries RFC 9207 `iss` (the right one, or
another); `--metadata-issuer URL`: the metadata names another issuer than its own.
`GET /test/registrations` lists the registration requests' bodies as sent.
`POST /test/revoke` forgets every token (refresh tokens included), `POST /test/forget-access`
only the access tokens, `POST /test/token-down` (`-up`) makes /token answer 503;
`GET /test/stats` counts grants. Test-only routes, unauthenticated: never anything but loopback.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import sys
import time
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

PRE_REGISTERED_REDIRECT = "http://127.0.0.1/callback"


class MemoryProvider:
    """OAuthAuthorizationServerProvider in memory: consents at once, rotates refresh tokens."""

    def __init__(self, access_ttl: int, cimd_ca: str | None = None,
                 iss: str | None = None) -> None:
        self.access_ttl = access_ttl
        self.cimd_ca = cimd_ca  # fetch an https client_id's metadata document, trusting this
        self.iss = iss  # what the authorize redirect says in `iss`, if anything
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats = {"registered": 0, "authorized": 0, "code_grants": 0, "refresh_grants": 0,
                      "refresh_refused": 0, "cimd_fetches": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if self.cimd_ca is not None and client_id.startswith("https://"):
            return await self._metadata_document(client_id)
        return self.clients.get(client_id)

    async def _metadata_document(self, url: str) -> OAuthClientInformationFull | None:
        """The client is what the document at its client_id says, if it names itself."""
        import httpx

        self.stats["cimd_fetches"] += 1
        async with httpx.AsyncClient(verify=self.cimd_ca, timeout=5) as client:
            response = await client.get(url)
        if response.status_code != 200:
            return None
        doc = OAuthClientMetadata.model_validate_json(response.content)
        if response.json().get("client_id") != url:
            return None
        return OAuthClientInformationFull(
            client_id=url, redirect_uris=doc.redirect_uris, token_endpoint_auth_method="none",
            grant_types=doc.grant_types, application_type=doc.application_type,
            client_name=doc.client_name)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.stats["registered"] += 1
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull,
                        params: AuthorizationParams) -> str:
        self.stats["authorized"] += 1
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource, subject="operator")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state,
                                      iss=self.iss)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.stats["code_grants"] += 1
        return self._issue(client.client_id, authorization_code.scopes,
                           authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        if found is None or found.client_id != client.client_id:
            self.stats["refresh_refused"] += 1
            return None
        return found

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotated: each refresh token works once
        self.stats["refresh_grants"] += 1
        return self._issue(client.client_id, scopes or refresh_token.scopes,
                           refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    async def exchange_identity_assertion(self, client: Any, params: Any) -> OAuthToken:
        raise NotImplementedError

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes,
            expires_at=int(time.time()) + self.access_ttl, resource=resource, subject="operator")
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                             resource=resource, subject="operator")
        return OAuthToken(access_token=access, expires_in=self.access_ttl,
                          scope=" ".join(scopes) or None, refresh_token=refresh)

    def revoke_all(self) -> None:
        self.access.clear()
        self.refresh.clear()


def build(base: str, provider: MemoryProvider, *, registration: bool,
          path: str = "/mcp", issuer: str | None = None) -> MCPServer:
    server = MCPServer(
        "oauth-fixture",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=issuer or base, resource_server_url=f"{base}{path}",
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(enabled=registration),
            revocation_options=RevocationOptions(enabled=True)),
    )

    @server.tool()
    def whoami() -> str:
        """Say who the bearer token belongs to."""
        return "operator"

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.custom_route("/test/revoke", methods=["POST"])
    async def revoke(request: Request) -> Response:
        provider.revoke_all()
        return JSONResponse({"revoked": True})

    @server.custom_route("/test/forget-access", methods=["POST"])
    async def forget_access(request: Request) -> Response:
        provider.access.clear()  # as after a restart of a server that keeps refresh tokens
        return JSONResponse({"forgotten": True})

    @server.custom_route("/test/stats", methods=["GET"])
    async def stats(request: Request) -> Response:
        return JSONResponse(provider.stats)

    return server


class TokenSwitch:
    """ASGI wrapper: `POST /test/token-down` makes /token answer 503 (an authorization server
    that is down) until `POST /test/token-up`; the registration requests are kept as sent;
    with `cimd`, the authorization server metadata says it takes Client ID Metadata
    Documents (the SDK's server has no such setting)."""

    def __init__(self, app: Any, cimd: bool = False, metadata_issuer: str | None = None) -> None:
        self.app = app
        self.down = False
        self.patch: dict[str, Any] = {}  # what the metadata says besides the SDK's
        if cimd:
            self.patch["client_id_metadata_document_supported"] = True
        if metadata_issuer:
            self.patch["issuer"] = metadata_issuer
        self.registrations: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path") if scope["type"] == "http" else None
        if path in ("/test/token-down", "/test/token-up"):
            self.down = path == "/test/token-down"
            await JSONResponse({"down": self.down})(scope, receive, send)
        elif path == "/test/registrations":
            await JSONResponse(self.registrations)(scope, receive, send)
        elif path == "/token" and self.down:
            await JSONResponse({"error": "temporarily_unavailable"},
                               status_code=503)(scope, receive, send)
        elif path == "/register":
            await self.app(scope, await self._kept(receive), send)
        elif self.patch and path == "/.well-known/oauth-authorization-server":
            await self.app(scope, receive, _patched(send, self.patch))
        else:
            await self.app(scope, receive, send)

    async def _kept(self, receive: Any) -> Any:
        """Read the whole request body, keep it, and hand it on unchanged."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            self.registrations.append(json.loads(body))
        except ValueError:
            self.registrations.append(body.decode(errors="replace"))
        sent = False

        async def again() -> Any:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return again


def _patched(send: Any, patch: dict[str, Any]) -> Any:
    """`send` for the metadata response, with `patch`'s members set in the document."""
    start: dict[str, Any] = {}
    body = b""

    async def patched(message: Any) -> None:
        nonlocal body
        if message["type"] == "http.response.start":
            start.update(message)
            return
        body += message.get("body", b"")
        if message.get("more_body"):
            return
        doc = json.loads(body)
        doc.update(patch)
        out = json.dumps(doc).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})

    return patched


def main() -> None:
    import anyio
    import uvicorn

    p = argparse.ArgumentParser()
    p.add_argument("--access-ttl", type=int, default=3600)
    p.add_argument("--no-registration", metavar="CLIENT_ID",
                   help="no dynamic registration; CLIENT_ID is registered in advance (public, "
                   f"redirect URI {PRE_REGISTERED_REDIRECT})")
    p.add_argument("--sse", action="store_true", help="legacy SSE at /sse instead of /mcp")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--issuer-host", default="127.0.0.1", choices=("127.0.0.1", "localhost"))
    p.add_argument("--cimd-ca", metavar="PEM")
    p.add_argument("--iss", choices=("right", "wrong"))
    p.add_argument("--metadata-issuer", metavar="URL",
                   help="the authorization server metadata names this issuer (a wrong one)")
    args = p.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    issuer = f"http://{args.issuer_host}:{port}"
    iss = {"right": issuer, "wrong": "http://wrong.invalid/", None: None}[args.iss]
    provider = MemoryProvider(args.access_ttl, args.cimd_ca, iss)
    if args.no_registration:
        provider.clients[args.no_registration] = OAuthClientInformationFull(
            client_id=args.no_registration, redirect_uris=[PRE_REGISTERED_REDIRECT],  # type: ignore[list-item]
            token_endpoint_auth_method="none", grant_types=["authorization_code",
                                                            "refresh_token"])
    server = build(base, provider, registration=not args.no_registration,
                   path="/sse" if args.sse else "/mcp", issuer=issuer)
    app = TokenSwitch(server.sse_app() if args.sse else server.streamable_http_app(),
                      cimd=args.cimd_ca is not None, metadata_issuer=args.metadata_issuer)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(base, flush=True)
    sys.stdout.close()
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    main()
