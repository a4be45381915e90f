"""A remote MCP server: Streamable HTTP (or legacy SSE) through the SDK's client transports.

The SDK speaks the protocol; gantry adds around its HTTP client what the SDK does not do:
* a lost session is noticed: a 4xx to a request that carries a session id (server-everything
  answers a session it forgot after a restart with HTTP 400 and a JSON-RPC error without an
  id; the spec says 404) closes the link with `renew`, and the supervisor re-initialises at
  once; the SDK alone would turn it into a generic error and, on the event stream, give up;
* which requests provably never reached the server (no connection was made, or the server
  refused their session before reading them): link.delivery() hands the caller a Ticket that
  says so, and only such a call is sent again (never a tool call that may have run);
* a failed event stream (the GET that carries list_changed) closes the link, so the
  supervisor reconnects instead of the stream silently stopping after two retries;
* TLS trust from gantry/tls.py, proxies from HTTPS_PROXY/NO_PROXY (httpx's trust_env), the
  manifest's headers on every request, never logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gantry.mcp.link import TICKET
from gantry.mcp.manifest import SSE, ServerSpec

log = logging.getLogger("gantry.mcp")

CONNECT_TIMEOUT = 10.0
IO_TIMEOUT = 30.0  # write and pool; reads have none: our calls carry their own timeouts
_SESSION_LOST = (400, 404, 410)
_NO_EVENT_STREAM = 405  # a server without a GET stream says so; nothing is lost


@dataclass
class Remote:
    """The link to one remote server (see gantry/mcp/link.py)."""

    spec: ServerSpec
    closed: anyio.Event = field(default_factory=anyio.Event)
    reason: str = ""
    renew: bool = False
    trouble: str = ""  # the last HTTP-level problem, for a failed start's message

    def mark_closed(self, reason: str, *, renew: bool = False) -> None:
        if not self.closed.is_set():
            self.reason = reason
            self.renew = renew
            self.closed.set()

    def tail(self) -> str:
        return self.trouble

    def ended(self) -> str | None:
        return self.trouble or None


def _carries_session(request: httpx2.Request) -> bool:
    """Streamable HTTP names the session in a header, legacy SSE in the POST URL's query."""
    if "mcp-session-id" in request.headers:
        return True
    query = request.url.params
    return "sessionId" in query or "session_id" in query


async def _session_lost(response: httpx2.Response) -> bool:
    """Whether a 4xx to a request with a session id means the server lost the session. A
    JSON-RPC error carrying the request's id is an answer instead (a spec-correct server may
    send INVALID_PARAMS at 400)."""
    if response.status_code not in _SESSION_LOST:
        return False
    if response.status_code != 400:
        return True
    try:
        body = json.loads(await response.aread())
    except (ValueError, httpx2.HTTPError):
        return True
    return not (isinstance(body, dict) and body.get("id") is not None)


class _Client(httpx2.AsyncClient):
    """httpx2's client, watching each exchange for a lost session or a failed stream."""

    remote: Remote

    async def send(self, request: httpx2.Request, *args: Any, **kwargs: Any) -> httpx2.Response:
        ticket = TICKET.get()
        where = self.remote.spec.where
        try:
            response = await super().send(request, *args, **kwargs)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            if ticket is not None:
                ticket.undelivered = True
            from gantry.tls import handshake_hint

            hint = handshake_hint(str(exc))
            self.remote.trouble = (f"cannot connect to {where}: {type(exc).__name__}: "
                                   f"{str(exc)[:300]}" + (f" ({hint})" if hint else ""))
            if request.method == "GET":
                self.remote.mark_closed(f"its event stream could not reconnect ({exc})"[:300])
            raise
        except httpx2.TransportError as exc:
            if request.method == "GET":
                self.remote.mark_closed(f"its event stream broke ({type(exc).__name__})")
            raise
        status = response.status_code
        if status < 400 or request.method == "DELETE":
            return response
        self.remote.trouble = f"HTTP {status} {response.reason_phrase} from {where}"
        if _carries_session(request) and await _session_lost(response):
            if ticket is not None:
                ticket.undelivered = True
            self.remote.mark_closed(f"the server no longer knows the session (HTTP {status})",
                                    renew=True)
        elif request.method == "GET" and status != _NO_EVENT_STREAM:
            self.remote.mark_closed(f"its event stream was refused (HTTP {status})")
        return response


def _factory(spec: ServerSpec, environ: Mapping[str, str], remote: Remote) -> Any:
    """The SDK's McpHttpClientFactory shape, making our client: gantry's CA trust, env
    proxies, the manifest's headers, no read timeout (event streams idle for hours)."""
    from gantry.tls import ca_context

    verify = ca_context(environ)

    def make(headers: dict[str, str] | None = None, timeout: Any = None,
             auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        client = _Client(
            headers={**spec.headers, **(headers or {})},
            timeout=httpx2.Timeout(IO_TIMEOUT, connect=CONNECT_TIMEOUT, read=None),
            auth=auth, verify=verify, trust_env=True,
        )
        client.remote = remote
        return client

    return make


async def _forward(source: Any, sink: MemoryObjectSendStream[Any], remote: Remote) -> None:
    """The transport's messages → the session; when the transport's stream ends (legacy SSE
    ends it when its event stream does), the link is closed."""
    try:
        async with sink:
            async for item in source:
                await sink.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        pass
    finally:
        remote.mark_closed(remote.reason or "its event stream ended")


@asynccontextmanager
async def open_remote(
    spec: ServerSpec, environ: Mapping[str, str], auth: httpx2.Auth | None = None
) -> AsyncIterator[tuple[Remote, MemoryObjectReceiveStream[Any], Any]]:
    """Connect to `spec.url` and yield (remote, read stream, write stream) for a
    ClientSession. `auth`: an httpx2.Auth for every request (OAuth, say), or None."""
    remote = Remote(spec)
    make = _factory(spec, environ, remote)
    log.info("mcp server connecting", extra={"server": spec.name, "url": spec.where,
                                             "transport": spec.transport})
    try:
        async with _transport(spec, make, auth) as (read, write):
            sink, source = anyio.create_memory_object_stream[Any](0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_forward, read, sink, remote)
                try:
                    yield remote, source, write
                finally:
                    tg.cancel_scope.cancel()
                    source.close()
    finally:
        log.info("mcp server disconnected", extra={"server": spec.name,
                                                   "reason": remote.reason or remote.trouble})


@asynccontextmanager
async def _transport(spec: ServerSpec, make: Any,
                     auth: httpx2.Auth | None) -> AsyncIterator[tuple[Any, Any]]:
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    assert spec.url is not None
    if spec.transport == SSE:
        async with sse_client(spec.url, httpx_client_factory=make, auth=auth) as streams:
            yield streams
        return
    async with make(auth=auth) as client, streamable_http_client(
        spec.url, http_client=client
    ) as streams:
        yield streams
