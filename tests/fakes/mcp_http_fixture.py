"""A small MCP server over Streamable HTTP (official SDK, uvicorn on 127.0.0.1) for gantry's
remote-server tests. Run as `python -m tests.fakes.mcp_http_fixture PORT`.

Tools: `echo`, `count` (appends to a file, so a test sees how often it really ran), `die`
(appends to a file, then the process exits mid-call), `slow` (reports progress every `every`
seconds, `steps` times, then answers), `forever` (reports progress and never answers),
`header` (the value of one request header it received, or ""), `forget` (the server forgets
the caller's session: every later request naming it is answered HTTP 400 with a JSON-RPC
error without an id, as server-everything answers after a restart; its open event stream
stays open, so only the next request can notice), `tally` / `peek` (read-only): each appends
a line to a file (the server's own count of executions); the first time for that file, the
server cuts the HTTP response carrying the answer (the connection is dropped mid-response,
the server stays up), so the client's stream breaks after the tool ran.

FIXTURE_TLS_CERT / FIXTURE_TLS_KEY: serve HTTPS with that certificate (tests/fakes/pki.py).
FIXTURE_LEAK=1: every request is answered HTTP 401 with a JSON-RPC error that quotes the
request's Authorization header back (a careless server), to show gantry never repeats it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("http-fixture", instructions="A remote fixture server for gantry's tests.")
forgotten: set[str] = set()


def _append(path: str) -> int:
    with open(path, "a") as fh:
        fh.write("ran\n")
    with open(path) as fh:
        return sum(1 for _ in fh)


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def count(path: str) -> str:
    """Append one line to the file at path and return how many lines it has."""
    return str(_append(path))


@server.tool()
def die(path: str) -> str:
    """Append one line to the file at path, then exit the whole server mid-call."""
    _append(path)
    sys.stderr.flush()
    os._exit(1)


@server.tool()
async def slow(steps: int, every: float, ctx: Context) -> str:
    """Report progress `steps` times, `every` seconds apart, then answer."""
    for step in range(steps):
        await anyio.sleep(every)
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
    return f"done after {steps} steps"


@server.tool()
async def forever(every: float, ctx: Context) -> str:
    """Report progress every `every` seconds and never answer."""
    step = 0
    while True:
        await anyio.sleep(every)
        step += 1
        await ctx.report_progress(step)


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of request header `name` as this server received it ("" if absent)."""
    request: Any = ctx.request_context.request
    return str(request.headers.get(name, "")) if request is not None else ""


@server.tool()
def forget(ctx: Context) -> str:
    """Forget the caller's session (see the module docstring)."""
    request: Any = ctx.request_context.request
    forgotten.add(str(request.headers.get("mcp-session-id", "")))
    return "forgotten"


@server.tool()
def tally(path: str) -> str:
    """Count one execution (not idempotent); the first answer's stream is cut."""
    return f"ran {_append(path)} times"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(path: str) -> str:
    """Count one execution (annotated read-only); the first answer's stream is cut."""
    return f"ran {_append(path)} times"


class _Cut(Exception):
    """Raised into uvicorn after the response started: it drops the connection."""


def _cutting(app: Any) -> Any:
    """Cut the response that carries the first answer of `tally`/`peek` for each file."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[dict[str, Any]] = []
        while True:
            message = await receive()
            chunks.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        try:
            body = json.loads(b"".join(c.get("body", b"") for c in chunks) or b"{}")
        except ValueError:
            body = {}
        params = body.get("params") or {} if isinstance(body, dict) else {}
        path = str((params.get("arguments") or {}).get("path", ""))
        cut = (body.get("method") == "tools/call" and params.get("name") in ("tally", "peek")
               and path and not os.path.exists(path + ".broke"))
        replay = iter(chunks)

        async def replayed() -> dict[str, Any]:
            return next(replay, None) or await receive()

        async def sending(message: dict[str, Any]) -> None:
            if cut and message["type"] == "http.response.body" and b'"result"' in message.get(
                    "body", b""):
                open(path + ".broke", "w").close()
                raise _Cut
            await send(message)

        await app(scope, replayed, sending)

    return asgi


def _forgetful(app: Any) -> Any:
    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        session = dict(scope.get("headers", [])).get(b"mcp-session-id", b"").decode()
        if scope["type"] != "http" or session not in forgotten:
            await app(scope, receive, send)
            return
        body = json.dumps({"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32000, "message": "Bad Request: No valid session"}})
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})

    return asgi


def _leaky(app: Any) -> Any:
    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        body = json.dumps({"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32001, "message": f"token {auth} refused"}})
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})

    return asgi


def main() -> None:
    import uvicorn

    port = int(sys.argv[1])
    app: Any = _cutting(_forgetful(server.streamable_http_app()))
    if os.environ.get("FIXTURE_LEAK") == "1":
        app = _leaky(app)
    tls = {"ssl_certfile": os.environ["FIXTURE_TLS_CERT"],
           "ssl_keyfile": os.environ["FIXTURE_TLS_KEY"]} if "FIXTURE_TLS_CERT" in os.environ else {}
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", **tls)


if __name__ == "__main__":
    main()
