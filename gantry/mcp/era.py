"""Which MCP protocol era a connection speaks: the 2026-07-28 revision (stateless: every
request carries its own `_meta` envelope, no session id) or the 2025-11-25 handshake.

The SDK does the wire work (`server/discover`, `adopt`, the per-request envelope, the
auto-negotiation policy); gantry picks the policy from the manifest's `protocol` key, names
the era for /status, `gantry tools list` and `gantry check`, and decides which broken calls
may be sent again (a 2026 stream cannot be resumed).
"""

from __future__ import annotations

from typing import Any

from gantry.mcp.manifest import SSE, ServerSpec

MODERN = "2026"
HANDSHAKE = "2025"
ERA_TIMEOUT = 10.0  # the SDK's own bound on one server/discover probe


class EraRefused(Exception):
    """The server does not speak the era the manifest pins."""


async def negotiate(session: Any, spec: ServerSpec) -> None:
    """Open `session` in the era `spec.protocol` asks for: "2025" is the initialize
    handshake, "2026" is server/discover (failing if the server does not offer it), "auto"
    is the SDK's policy (discover; anything but positive 2026 evidence falls back to
    initialize). Legacy SSE predates 2026, so "auto" there goes straight to the handshake."""
    if spec.protocol == HANDSHAKE or (spec.protocol == "auto" and spec.remote
                                      and spec.transport == SSE):
        await session.initialize()
        return
    if spec.protocol == MODERN:
        from mcp.shared.exceptions import MCPError

        try:
            await session.discover()
        except (MCPError, RuntimeError) as exc:
            raise EraRefused(
                f"it does not speak the 2026-07-28 protocol that protocol = \"2026\" pins "
                f"(server/discover: {str(exc)[:200]}); set protocol = \"auto\" or \"2025\""
            ) from None
        return
    from mcp.client._probe import negotiate_auto

    await negotiate_auto(session)


async def probe(session: Any) -> None:
    """Is the server alive? `ping` at 2025; 2026 has no ping, and a stateless
    server/discover is as cheap."""
    if modern(session):
        await session.send_discover(session.protocol_version)
    else:
        await session.send_ping()


def modern(session: Any) -> bool:
    """Whether `session` speaks a 2026-era (stateless) revision."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return getattr(session, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS


def describe(version: str | None) -> str:
    """The era as /status and the CLI show it: "MCP 2026-07-28 (stateless)"."""
    if not version:
        return ""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    kind = "stateless" if version in MODERN_PROTOCOL_VERSIONS else "handshake"
    return f"MCP {version} ({kind})"


def reissue_safe(tool: Any) -> bool:
    """Whether a listed MCP tool says running it twice does no harm: annotated read-only
    or idempotent (hints from the server; gantry trusts them for this one decision)."""
    notes = getattr(tool, "annotations", None)
    return bool(getattr(notes, "read_only_hint", False) or getattr(notes, "idempotent_hint", False))


def broke(session: Any, exc: BaseException) -> bool:
    """Whether `exc` is a 2026-era request whose stream broke before its answer: the SDK
    resolves it CONNECTION_CLOSED (a cut POST stream, a child that died). A 2026 stream
    cannot be resumed, so the call may or may not have run."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    return modern(session) and isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


UNSAFE = "unsafe"  # a broken call not sent again: the tool is not read-only or idempotent
TWICE = "twice"  # sent again once (safe), and that broke too
GONE = "gone"  # safe to send again, but the server could not be reached again


def broken_text(server: str, tool: str, why: str) -> str:
    """What the model is told of a broken call that was not (or no more) sent again."""
    head = f"the call to {tool!r} on MCP server {server!r} broke off before its answer arrived"
    if why == TWICE:
        return f"{head}, twice (it is read-only or idempotent, so it was sent once more); " \
               "retry later"
    if why == GONE:
        return f"{head}, and the server could not be reached to send it again; retry later"
    return (f"{head}: it may or may not have run, and it was not sent again because the tool "
            "is not marked read-only or idempotent; check its effect before calling it again")
