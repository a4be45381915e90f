"""One MCP server process: spawn, newline-JSON transport, stderr to logs, teardown.

Our own spawn rather than the SDK's `stdio_client`, to decide three things it does not let us:
the child's exact environment (only what the manifest grants), its stderr (log records, not
our stderr), and noticing its death at once (so calls in flight fail without waiting).
The child leads its own process group; teardown signals the whole group, so grandchildren go
too, and every wait is bounded.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gantry.mcp import wire
from gantry.mcp.manifest import ServerSpec

log = logging.getLogger("gantry.mcp")

INHERITED = ("PATH", "HOME", "LANG", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR")
TERM_GRACE = 2.0  # SIGTERM → SIGKILL
STDIN_GRACE = 0.5  # after closing stdin, before SIGTERM
LINE_MAX = 1000  # chars kept of one stderr line
STDERR_RATE = 20.0  # lines per second, steady
STDERR_BURST = 100
TAIL_LINES = 20
MAX_MESSAGE = 64 * 1024 * 1024  # a stdout line longer than this is a broken server
EXIT_POLL = 1.0
# Outgoing messages queued for the stdin writer. Never 0: the SDK starts a request's timeout
# only once its write is accepted, so a writer stuck on a child that stopped reading must not
# hold the next request's write (and so its timeout) back.
WRITE_BUFFER = 256


def child_env(environ: Mapping[str, str], granted: Mapping[str, str]) -> dict[str, str]:
    """The minimal environment plus what the manifest grants; nothing else leaks through."""
    env = {k: environ[k] for k in INHERITED if environ.get(k)}
    env.update({k: v for k, v in environ.items() if k.startswith("LC_") and v})
    env.update(granted)
    return env


@dataclass
class StderrLog:
    """stderr lines → log records tagged with the server: capped, rate-limited, tail kept."""

    server: str
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    tokens: float = STDERR_BURST
    stamp: float = field(default_factory=time.monotonic)
    dropped: int = 0

    def line(self, raw: str) -> None:
        text = raw.rstrip("\r\n")
        if len(text) > LINE_MAX:
            text = text[:LINE_MAX] + f"… [{len(text) - LINE_MAX} chars cut]"
        self.tail.append(text)
        now = time.monotonic()
        self.tokens = min(STDERR_BURST, self.tokens + (now - self.stamp) * STDERR_RATE)
        self.stamp = now
        if self.tokens < 1:
            self.dropped += 1
            return
        if self.dropped:
            log.warning("mcp server stderr lines dropped (rate limit)",
                        extra={"server": self.server, "dropped": self.dropped})
            self.dropped = 0
        self.tokens -= 1
        log.info("mcp server stderr", extra={"server": self.server, "line": text})


@dataclass
class Child:
    """A running server process and what the supervisor needs to know about it."""

    spec: ServerSpec
    process: Process
    stderr: StderrLog
    closed: anyio.Event = field(default_factory=anyio.Event)  # stdout ended or process exited
    reason: str = ""
    warned: set[str] = field(default_factory=set)  # kinds of wire trouble already logged
    renew: bool = False  # a child never merely loses its session (gantry/mcp/link.py)

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self) -> str:
        return "\n".join(self.stderr.tail)

    def ended(self) -> str | None:
        code = self.process.returncode
        return None if code is None else f"it exited with code {code}"

    def mark_closed(self, reason: str) -> None:
        if not self.closed.is_set():
            self.reason = reason
            self.closed.set()


def _signal_group(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _stop(child: Child) -> None:
    """Close stdin, then SIGTERM the group, then SIGKILL it; reap. Bounded, shielded."""
    proc = child.process
    with anyio.CancelScope(shield=True):
        if proc.stdin is not None:
            with suppress(Exception):
                await proc.stdin.aclose()
        with anyio.move_on_after(STDIN_GRACE):
            while proc.returncode is None:
                await anyio.sleep(0.02)
        # The leader may be gone while grandchildren in its group live on: signal the group
        # whatever the leader did.
        _signal_group(proc.pid, signal.SIGTERM)
        with anyio.move_on_after(TERM_GRACE):
            while proc.returncode is None:
                await anyio.sleep(0.02)
        _signal_group(proc.pid, signal.SIGKILL)
        with anyio.move_on_after(TERM_GRACE):
            while proc.returncode is None:
                await anyio.sleep(0.02)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with suppress(Exception):
                    await stream.aclose()
        transport = getattr(getattr(proc, "_process", None), "_transport", None)
        close = getattr(transport, "close", None)
        if callable(close):
            with suppress(Exception):
                close()


INVALID_MESSAGE = "the server sent an invalid message"
UNENCODABLE = "gantry could not encode the request"


def warn_once(child: Child, kind: str, message: str, **extra: Any) -> None:
    """One warning per kind of wire trouble per server (the set outlives restarts); then debug."""
    level = logging.DEBUG if kind in child.warned else logging.WARNING
    child.warned.add(kind)
    log.log(level, message, extra={"server": child.spec.name, **extra})


@functools.cache
def _session_message() -> Any:
    """The SDK's SessionMessage class, imported on the first line (not once per line)."""
    from mcp.shared.message import SessionMessage

    return SessionMessage


def _incoming(child: Child, line: bytes) -> Any:
    """The SessionMessage for one stdout line, or None to drop it; see gantry/mcp/wire.py."""
    decoded = wire.decode(line)
    SessionMessage = _session_message()  # the class, imported once
    if decoded.message is not None:
        if decoded.repaired:
            warn_once(child, "repaired", "mcp server sent text that is not valid Unicode; "
                      "each bad character became U+FFFD", repaired=list(decoded.repaired))
        return SessionMessage(decoded.message)
    snippet = line[:200].decode("utf-8", "replace")
    if decoded.reply_to is None:
        warn_once(child, "not-json-rpc", "mcp server wrote a line that is not JSON-RPC; "
                  "dropped", line=snippet)
        return None
    from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError

    warn_once(child, "invalid", "mcp server sent an invalid message; its request fails",
              id=decoded.reply_to, line=snippet)
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=decoded.reply_to,
                                       error=ErrorData(code=PARSE_ERROR, message=INVALID_MESSAGE)))


async def _read_stdout(
    child: Child, send: MemoryObjectSendStream[Any], replies: MemoryObjectSendStream[Any]
) -> None:
    """stdout lines → the session; `replies` (the writer's clone of `send`) is closed here
    too, so the session's read stream ends the moment stdout does."""
    stdout = child.process.stdout
    assert stdout is not None
    buf = bytearray()
    try:
        async with send:
            while True:
                try:
                    chunk = await stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                buf += chunk
                if len(buf) > MAX_MESSAGE:
                    child.mark_closed(f"a message over {MAX_MESSAGE} bytes")
                    break
                while (nl := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    if not line or line.isspace():  # (strip() without the copy)
                        continue
                    if (item := _incoming(child, line)) is not None:
                        await send.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        replies.close()
        child.mark_closed(child.reason or "its stdout closed")


async def _refuse(child: Child, message: Any, exc: ValueError,
                  replies: MemoryObjectSendStream[Any]) -> None:
    """A message that cannot be encoded is not written; a request among them fails at once."""
    from mcp.shared.message import SessionMessage
    from mcp_types import INVALID_PARAMS, ErrorData, JSONRPCError, JSONRPCRequest

    rpc = message.message
    warn_once(child, "unencodable", "mcp message not sent: it cannot be encoded",
              method=getattr(rpc, "method", None), error=str(exc)[:200])
    if isinstance(rpc, JSONRPCRequest):
        error = ErrorData(code=INVALID_PARAMS, message=f"{UNENCODABLE}: {str(exc)[:200]}")
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await replies.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=rpc.id,
                                                           error=error)))


async def _write_stdin(child: Child, receive: MemoryObjectReceiveStream[Any],
                       replies: MemoryObjectSendStream[Any]) -> None:
    stdin = child.process.stdin
    assert stdin is not None
    try:
        async with receive:
            async for message in receive:
                try:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                except ValueError as exc:  # PydanticSerializationError: e.g. a lone surrogate
                    await _refuse(child, message, exc, replies)
                    continue
                await stdin.send(data.encode() + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        child.mark_closed("its stdin closed")


async def _read_stderr(child: Child) -> None:
    stream = child.process.stderr
    assert stream is not None
    buf = b""
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        while True:
            buf += await stream.receive()
            *lines, buf = buf.split(b"\n")
            for line in lines:
                child.stderr.line(line.decode("utf-8", "replace"))
            if len(buf) > 4 * LINE_MAX:  # an endless line: log what we have
                child.stderr.line(buf.decode("utf-8", "replace"))
                buf = b""
    if buf:
        child.stderr.line(buf.decode("utf-8", "replace"))


async def _watch_exit(child: Child) -> None:
    """A leader that exits while a grandchild holds its stdout open still counts as dead."""
    while child.process.returncode is None:
        await anyio.sleep(EXIT_POLL)
    await anyio.sleep(0.1)  # let the stdout reader deliver what the server wrote last
    child.mark_closed(f"it exited with code {child.process.returncode}")


@asynccontextmanager
async def open_child(
    spec: ServerSpec, environ: Mapping[str, str], warned: set[str] | None = None
) -> AsyncIterator[tuple[Child, MemoryObjectReceiveStream[Any], MemoryObjectSendStream[Any]]]:
    """Spawn `spec` and yield (child, read stream, write stream) for a ClientSession.

    The read stream ends as soon as the child's stdout closes, which makes the SDK fail every
    request in flight with "connection closed" instead of letting it run to its timeout.
    `warned`: the server's kinds of wire trouble already logged, kept across its restarts.
    """
    assert spec.command is not None, "a remote server has no child (gantry/mcp/remote.py)"
    process = await anyio.open_process(
        [spec.command, *spec.args],
        env=child_env(environ, spec.env),
        cwd=spec.cwd,
        start_new_session=True,  # its own process group: teardown reaches grandchildren
    )
    child = Child(spec, process, StderrLog(spec.name), warned=set() if warned is None else warned)
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    replies = read_send.clone()  # the writer's answers for requests it cannot send
    write_send, write_recv = anyio.create_memory_object_stream[Any](WRITE_BUFFER)
    log.info("mcp server started", extra={"server": spec.name, "pid": process.pid})
    tg: TaskGroup
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_stdout, child, read_send, replies)
            tg.start_soon(_write_stdin, child, write_recv, replies)
            tg.start_soon(_read_stderr, child)
            tg.start_soon(_watch_exit, child)
            try:
                yield child, read_recv, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(child)
                    for s in (read_send, replies, read_recv, write_send, write_recv):
                        await s.aclose()
                tg.cancel_scope.cancel()
    finally:
        log.info("mcp server stopped",
                 extra={"server": spec.name, "pid": process.pid, "code": process.returncode})
