"""OAuth for remote MCP servers on the SDK's `OAuthClientProvider` (mcp.client.auth).

Two providers over the same storage (gantry.db, gantry/mcp/tokens.py):
- `LoginProvider` (`gantry mcp login NAME`): the SDK's whole flow — discovery, a Client ID
  Metadata Document where the manifest names one and the authorization server takes it, else
  dynamic client registration (or the manifest's client_id), authorization code with PKCE and
  the RFC 9207 `iss` check, token exchange —
  with a redirect handler that prints the URL and a callback handler that reads the pasted
  redirect (gantry/mcp/login.py).
- `RuntimeProvider` (the daemon, `tools list`, `check`): the SDK's flow for sending the token
  and refreshing it, never an interactive authorization. Where the SDK would start one (a 401),
  the request fails and `Gate` says why, so the server shows "run gantry mcp login NAME".

A server whose protected-resource metadata names another authorization server than the one
the row's login is for gets no refresh and no token from the row (gantry/mcp/issuer.py): a
new login is asked for.

Three things the SDK does not keep across processes are kept in the row: the access token's
absolute expiry (its `expires_in` is relative; the SDK does not load an expiry with stored
tokens), and the authorization server and protected-resource metadata found at login (a
refresh posts to the discovered token endpoint, with the resource the tokens are for).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthTokenError
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    handle_protected_resource_response,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)

from gantry.mcp import issuer
from gantry.mcp.cimd import APPLICATION_TYPE
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.tokens import LOGIN_HINT, Record, TokenStore, problem

log = logging.getLogger("gantry.mcp")

# Where the authorization server sends the browser after consent. Nothing listens there: the
# page fails to load, and the operator copies its address (docs/mcp.md, "OAuth").
DEFAULT_REDIRECT = "http://127.0.0.1/callback"
LOGIN_POLL = 5.0  # seconds between looks at the row while a server waits for a login
CLIENT_NAME = "gantry"


def redirect_uri(spec: ServerSpec) -> str:
    return spec.redirect_uri or DEFAULT_REDIRECT


def client_metadata(spec: ServerSpec) -> OAuthClientMetadata:
    """What gantry registers as (dynamic registration), and the scope it asks for."""
    return OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[redirect_uri(spec)],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=" ".join(spec.scopes) if spec.scopes else None,
        application_type=APPLICATION_TYPE,
    )


def manifest_client(spec: ServerSpec) -> OAuthClientInformationFull | None:
    """The client registered in advance that the manifest names (client_id), if any."""
    if spec.client_id is None:
        return None
    return OAuthClientInformationFull(
        client_id=spec.client_id,
        client_secret=spec.client_secret,
        redirect_uris=[redirect_uri(spec)],  # type: ignore[list-item]
        token_endpoint_auth_method="client_secret_post" if spec.client_secret else "none",
        grant_types=["authorization_code", "refresh_token"],
        scope=" ".join(spec.scopes) if spec.scopes else None,
    )


def expires_at(token: OAuthToken, now: float) -> float | None:
    return now + token.expires_in if token.expires_in is not None else None


def token_json(token: OAuthToken) -> str:
    return token.model_dump_json(exclude_none=True)


def hide(token: OAuthToken | None, replaces: OAuthToken | None = None) -> None:
    """Make the log redactor hide `token`'s values (and forget the ones it replaces)."""
    from gantry.log import share_secrets, unshare_secrets

    if replaces is not None:
        unshare_secrets(*(v for v in (replaces.access_token, replaces.refresh_token) if v))
    if token is not None:
        share_secrets(*(v for v in (token.access_token, token.refresh_token) if v))


class DbTokenStorage:
    """The SDK's `TokenStorage` protocol over one server's `mcp_oauth` row.

    Tokens are returned with `expires_in` counted from now (from the stored absolute expiry),
    so an expired access token is refreshed before it is sent. A manifest `client_id` wins
    over a stored registration: the operator changed it on purpose.
    """

    def __init__(self, store: TokenStore, spec: ServerSpec,
                 clock: Callable[[], float] = time.time) -> None:
        assert spec.url is not None
        self.store = store
        self.spec = spec
        self.url = spec.url
        self.clock = clock
        self.loaded: Record | None = None  # the row as last read or written here

    def __repr__(self) -> str:
        return f"DbTokenStorage(server={self.spec.name!r})"

    def _record(self) -> Record | None:
        record = self.store.get(self.spec.name)
        self.loaded = record
        return record if record is not None and record.url == self.url else None

    async def get_tokens(self) -> OAuthToken | None:
        record = self._record()
        if record is None or not record.tokens or record.login_required:
            return None
        token = OAuthToken.model_validate_json(record.tokens)
        hide(token)
        if record.expires_at is not None:
            token.expires_in = max(0, int(record.expires_at - self.clock()))
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        old = self.loaded.tokens if self.loaded is not None else None
        hide(tokens, OAuthToken.model_validate_json(old) if old else None)
        text = token_json(tokens)
        at = expires_at(tokens, self.clock())
        if not self.store.save_tokens(self.spec.name, self.url, text, at):
            log.warning("mcp oauth: new tokens not stored: the server's login row changed "
                        "meanwhile (a login or logout)", extra={"server": self.spec.name})
        self._record()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        pinned = manifest_client(self.spec)
        if pinned is not None:
            return pinned
        record = self.loaded if self.loaded is not None else self._record()
        if record is None or record.url != self.url or not record.client_info:
            return None
        info = OAuthClientInformationFull.model_validate_json(record.client_info)
        if info.issuer is None:  # registered before the SDK stamped it: the login's issuer
            info.issuer = issuer.stored(record.as_metadata)
        if info.client_secret:
            from gantry.log import share_secrets

            share_secrets(info.client_secret)
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.store.save_client(self.spec.name, self.url, client_info.model_dump_json(
            exclude_none=True))


@dataclass(repr=False)
class Gate:
    """Whether one OAuth server can be used now, as the supervisor and `/status` see it.

    `reason` is a sentence ending in "run `gantry mcp login NAME`", or None. It is set from the
    row before each connection, and by the provider when the server or the authorization
    server refuses what is stored.
    """

    store: TokenStore
    spec: ServerSpec
    clock: Callable[[], float] = time.time
    reason: str | None = None
    said: set[str] = field(default_factory=set)
    # Called when the server or its authorization server refuses what is stored (the host
    # closes the connection, so the next one starts from the row).
    on_refused: Callable[[], None] | None = None
    refused: tuple[str | None, str] | None = None  # (the row's tokens, why) when refused

    def __repr__(self) -> str:
        return f"Gate(server={self.spec.name!r}, reason={self.reason!r})"

    def check(self) -> str | None:
        """Read the row; the reason it cannot be used (logged once per reason), or None."""
        assert self.spec.url is not None
        record = self.store.get(self.spec.name)
        self.reason = problem(record, self.spec.name, self.spec.url, self.clock())
        if self.reason is None and self.refused is not None and record is not None \
                and record.tokens == self.refused[0]:
            self.reason = self.refused[1]  # a read-only store (check) cannot mark the row
        self._say()
        return self.reason

    def refuse(self, reason: str) -> None:
        """What was stored stopped working: remember why, here and in the row."""
        assert self.spec.url is not None
        full = f"{reason}; {LOGIN_HINT.format(name=self.spec.name)}"
        self.reason = full
        record = self.store.get(self.spec.name)
        self.refused = (record.tokens if record is not None else None, full)
        if record is not None and not self.store.read_only:
            self.store.require_login(self.spec.name, self.spec.url, reason,
                                     tokens=record.tokens)
        self._say()
        if self.on_refused is not None:
            self.on_refused()

    async def wait(self) -> None:
        """Until the row is usable again (a `gantry mcp login` in another process)."""
        import anyio

        while self.check() is not None:
            await anyio.sleep(LOGIN_POLL)

    def _say(self) -> None:
        if self.reason and self.reason not in self.said:
            self.said.add(self.reason)
            log.warning("mcp server needs an OAuth login",
                        extra={"server": self.spec.name, "reason": self.reason})


def _challenged(response: httpx2.Response) -> bool:
    """A response after which the SDK would start an interactive authorization."""
    if response.status_code == 401:
        return True
    return response.status_code == 403 and "insufficient_scope" in response.headers.get(
        "www-authenticate", "")


class RuntimeProvider(OAuthClientProvider):
    """The SDK's provider for sending and refreshing tokens, minus interactive authorization.

    The SDK refreshes a token it knows to be expired before sending it; a 401 on a token that
    looked valid (revoked, or the server forgot it) gets one refresh here and the request is
    sent again. What is left — a refresh the authorization server refuses (4xx), a 401 on a
    freshly refreshed token, a 401 with nothing stored, a 403 for more scope — needs a new
    login: `gate.refuse`, and the 401 goes back to the transport, so the request fails. A
    refresh answered with a 5xx or 429 fails the request the same way (that answer goes back)
    and needs no login: an ordinary failure, retried with backoff and breaker.
    """

    def __init__(self, spec: ServerSpec, storage: DbTokenStorage, gate: Gate) -> None:
        assert spec.url is not None
        super().__init__(server_url=spec.url, client_metadata=client_metadata(spec),
                         storage=storage, redirect_handler=_interactive,
                         callback_handler=_interactive)
        self.gate = gate
        self.db = storage
        self.refused: str | None = None

    def __repr__(self) -> str:
        return f"RuntimeProvider(server={self.gate.spec.name!r})"

    async def _initialize(self) -> None:
        await super()._initialize()
        ctx = self.context
        record = self.db.loaded
        if ctx.current_tokens is not None and record is not None \
                and record.expires_at is not None:
            # Absolute, as the SDK keeps it; at least 1, as it reads 0 as "no expiry".
            ctx.token_expiry_time = max(record.expires_at, 1.0)
        if record is not None and record.as_metadata:
            ctx.oauth_metadata = OAuthMetadata.model_validate_json(record.as_metadata)
        if record is not None and record.resource_metadata:
            prm = ProtectedResourceMetadata.model_validate_json(record.resource_metadata)
            ctx.protected_resource_metadata = prm
            if prm.authorization_servers:
                ctx.auth_server_url = str(prm.authorization_servers[0])

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        status = response.status_code
        if status >= 500 or status == 429:
            raise _RefreshUnavailable(status)
        ok = await super()._handle_refresh_response(response)
        if not ok:
            self.refused = f"the authorization server refused the refresh token (HTTP {status})"
        return ok

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request and _challenged(response):
                    break  # where the SDK would start an interactive authorization
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except _RefreshUnavailable as exc:
            self._unavailable(exc)
            return  # the token endpoint's answer is the response: this request fails
        finally:
            await flow.aclose()
        old = issuer.stored(self.db.loaded.as_metadata) if self.db.loaded is not None else None
        answered = True  # whether `response` is the server's answer to `request`
        if self.refused is None and response.status_code == 401 and old is not None:
            # Before a refresh: is the login still for the server's authorization server?
            for url in build_protected_resource_metadata_discovery_urls(
                    extract_resource_metadata_from_www_auth(response), self.context.server_url):
                found = yield create_oauth_metadata_request(url)
                answered = False
                prm = await handle_protected_resource_response(found)
                if prm is not None:
                    self.refused = issuer.moved(old, [str(a) for a in prm.authorization_servers])
                    break
        # One refresh for a refused token that looked valid; not where nothing may be stored
        # (gantry check), as the refresh token may rotate.
        if self.refused is None and response.status_code == 401 \
                and "authorization" in request.headers and not self.gate.store.read_only:
            async with self.context.lock:
                if self.context.can_refresh_token():
                    refreshed = yield await self._refresh_token()
                    answered = True  # a refused refresh's answer fails the request too
                    try:
                        ok = await self._handle_refresh_response(refreshed)
                    except _RefreshUnavailable as exc:
                        self._unavailable(exc)
                        return
                    if ok:
                        self._add_auth_header(request)
                        response = yield request
                        if not _challenged(response):
                            return
                        self.refused = "the server refused a freshly refreshed access token"
        if not answered:  # the last answer was metadata (200): the request must still fail
            response = yield _without_token(request)
        self._refuse(request, response)

    def _unavailable(self, exc: _RefreshUnavailable) -> None:
        """A refresh the authorization server could not do now: no login is needed, the
        request fails (its answer is the token endpoint's) and is retried like any other."""
        log.warning("mcp oauth: the token refresh failed; the request fails and is retried "
                    "later", extra={"server": self.gate.spec.name, "status": exc.status})

    def _refuse(self, request: httpx2.Request, response: httpx2.Response) -> None:
        if self.refused:
            self.gate.refuse(self.refused)
        elif response.status_code == 403:
            self.gate.refuse("the server asks for more scopes than the login granted")
        elif "authorization" not in request.headers:
            self.gate.refuse("the server asks for a login and none is stored")
        else:
            self.gate.refuse("the server refused the access token")


def _without_token(request: httpx2.Request) -> httpx2.Request:
    """`request` again minus its access token, for the server's own 401 to end a request
    that gets no token."""
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "authorization"]
    return httpx2.Request(request.method, request.url, headers=headers, content=request.content,
                          extensions=request.extensions)


class _RefreshUnavailable(Exception):
    """The token endpoint answered a refresh with a 5xx or 429: try again later."""

    def __init__(self, status: int) -> None:
        super().__init__(f"token refresh answered HTTP {status}")
        self.status = status


async def _interactive(*_: Any) -> Any:
    """Never reached: RuntimeProvider stops at the 401 that would start an authorization."""
    raise OAuthTokenError("an interactive authorization is only for `gantry mcp login`")


class OAuthHook:
    """`Host(auth=...)`: for each connection to an `auth = "oauth"` server, a RuntimeProvider
    over the row as it is now (a login done meanwhile is picked up); None for other servers."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store
        self.gates: dict[str, Gate] = {}

    def __repr__(self) -> str:
        return f"OAuthHook({self.store!r})"

    def gate(self, spec: ServerSpec) -> Gate | None:
        if spec.auth != "oauth" or spec.url is None:
            return None
        gate = self.gates.get(spec.name)
        if gate is None:
            gate = self.gates[spec.name] = Gate(self.store, spec)
        return gate

    def __call__(self, spec: ServerSpec) -> httpx2.Auth | None:
        gate = self.gate(spec)
        if gate is None:
            return None
        return RuntimeProvider(spec, DbTokenStorage(self.store, spec), gate)
