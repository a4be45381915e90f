"""The SDK side of elicitation: which turn a server's `elicitation/create` belongs to, the
call clock that stops while a person answers, and the callback the ClientSession gets.

A server's request carries no link to the tools/call it serves (not on stdio), so each
server keeps its calls in flight with their turns' callers: when they all belong to one
person, that person is asked; otherwise (two people's calls at once, or none) the request is
declined at once rather than shown to someone it may not be meant for.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from gantry import elicit
from gantry.elicit import Caller, Dialog

log = logging.getLogger("gantry.mcp")


class Clock:
    """A call's timeout as a budget spent only while the clock runs: it stops while the
    server waits for a person (an elicitation), so the user's answering time never counts
    against `timeout_seconds`."""

    def __init__(self, scope: anyio.CancelScope, timeout: float | None) -> None:
        self.scope = scope
        self._budget = math.inf if timeout is None else timeout
        self._pauses = 0
        scope.deadline = anyio.current_time() + self._budget

    def pause(self) -> None:
        if not self._pauses:
            self._budget = max(0.0, self.scope.deadline - anyio.current_time())
            self.scope.deadline = math.inf
        self._pauses += 1

    def resume(self) -> None:
        self._pauses -= 1
        if not self._pauses:
            self.scope.deadline = anyio.current_time() + self._budget


@dataclass
class InFlight:
    """One server's tool calls in flight: their turns' callers and clocks."""

    calls: dict[int, tuple[Caller | None, Clock]] = field(default_factory=dict)
    _next: int = 0

    @contextmanager
    def running(self, caller: Caller | None, clock: Clock) -> Iterator[None]:
        self._next += 1
        key = self._next
        self.calls[key] = (caller, clock)
        try:
            yield
        finally:
            del self.calls[key]

    def owner(self) -> tuple[Caller | None, list[Clock]]:
        """The one caller behind every call in flight (else None), and their clocks."""
        entries = list(self.calls.values())
        caller = elicit.unanimous([c for c, _ in entries])
        return caller, [clock for _, clock in entries] if caller is not None else []


@dataclass
class Elicitor:
    """Relays a server's elicitation to the turn's user through the channel's Dialog."""

    timeout: float = elicit.DEFAULT_TIMEOUT
    dialogs: dict[str, Dialog] = field(default_factory=dict)
    # One conversation per chat at a time: two calls of one round asking at once would
    # otherwise interleave their questions.
    _chats: dict[tuple[str, str], anyio.Lock] = field(default_factory=dict)

    def attach(self, channel: Any) -> None:
        """Ask through `channel` if it can (it has a `dialog`)."""
        dialog = getattr(channel, "dialog", None)
        if dialog is not None:
            self.dialogs[channel.name] = dialog

    async def answer(self, server: str, inflight: InFlight, params: Any) -> Any:
        """The ElicitResult for one request; every path ends in one (never an exception)."""
        from mcp_types import ElicitRequestURLParams, ElicitResult

        caller, clocks = inflight.owner()
        if caller is None and inflight.calls:
            dialog, why = None, "tool calls of more than one chat are running on the server"
        else:
            dialog, why = elicit.who_answers(caller, self.dialogs)
        if dialog is None or caller is None:
            log.info("elicitation declined: nobody can answer", extra={"server": server,
                                                                       "why": why})
            return ElicitResult(action="decline")
        log.info("elicitation relayed to the user",
                 extra={"server": server, "channel": caller.channel, "chat_id": caller.chat_id,
                        "mode": getattr(params, "mode", "form")})
        for clock in clocks:
            clock.pause()
        lock = self._chats.setdefault((caller.channel, caller.chat_id), anyio.Lock())
        try:
            async with lock:
                if isinstance(params, ElicitRequestURLParams):
                    outcome = await elicit.converse_url(dialog, caller, server, params.message,
                                                        params.url, self.timeout)
                else:
                    outcome = await elicit.converse_form(dialog, caller, server, params.message,
                                                         params.requested_schema, self.timeout)
        except Exception as exc:  # the channel failed to ask (Telegram down): nobody answered
            log.warning("elicitation failed; cancelled", extra={
                "server": server, "error": f"{type(exc).__name__}: {exc}"[:300]})
            return ElicitResult(action="cancel")
        finally:
            for clock in clocks:
                clock.resume()
        log.info("elicitation answered", extra={"server": server, "action": outcome.action})
        if outcome.action != "accept" or isinstance(params, ElicitRequestURLParams):
            return ElicitResult(action=outcome.action)
        return ElicitResult(action="accept", content=dict(outcome.content or {}))
