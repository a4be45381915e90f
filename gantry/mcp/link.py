"""What the supervisor (supervise.py) holds of a server while it is connected: a child over
stdio or a remote server over HTTP, behind one small interface, so one supervision loop
(backoff, breaker, ping on a suspected hang, re-listing tools) serves both. The two implement
it (child.py, remote.py); supervise.py's open_link picks one.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

import anyio


class Link(Protocol):
    """One connection to a server, from open to close."""

    closed: anyio.Event  # set once the connection is gone (`reason` says why)
    reason: str
    # Closed because the server dropped the session, not because it failed: reconnect at
    # once, and charge the breaker nothing.
    renew: bool

    def mark_closed(self, reason: str) -> None: ...

    def tail(self) -> str:
        """What to show after a failed start: a child's last stderr lines, a remote's last
        HTTP trouble ("" if none)."""
        ...

    def ended(self) -> str | None:
        """Why it is gone, if that is known for certain ("it exited with code 3"), else None."""
        ...


class Ticket:
    """One request's delivery, as a remote server's HTTP client saw it (remote.py); entered,
    it is the one that client finds (a class with slots: one is made on every tools/call)."""

    __slots__ = ("_token", "undelivered")

    def __init__(self) -> None:
        self.undelivered = False  # provably never reached the server: safe to send again

    def __enter__(self) -> Ticket:
        self._token = TICKET.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        TICKET.reset(self._token)


TICKET: ContextVar[Ticket | None] = ContextVar("gantry_mcp_ticket", default=None)


def delivery() -> Ticket:
    """A Ticket for the request sent in this block. The SDK's HTTP transports send each
    message in its sender's context, which is how the HTTP client below finds it; a child's
    tickets stay blank (a line written to its stdin may always have been read)."""
    return Ticket()
