"""The SDK side of elicitation: which turn a server's `elicitation/create` belongs to, the
holding of the calls' deadlines while a person answers, and the callback the ClientSession gets.

A server's request carries no link to the tools/call it serves (not on stdio), so each
server keeps its calls in flight with their turns' callers: when they all belong to one
person, that person is asked; otherwise (two people's calls at once, or none) the request is
declined at once rather than shown to someone it may not be meant for.

A call's server may ask MAX_QUESTIONS questions during it; more are declined without asking,
so a server that re-asks cannot hold the user (nor, with gantry/mcp/deadline.py, the call).
"""

from __future__ import annotations

import logging
import math
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio

from gantry import elicit
from gantry.elicit import Caller, Dialog
from gantry.mcp.deadline import Deadline, held

log = logging.getLogger("gantry.mcp")

MAX_QUESTIONS = 3  # elicitation requests relayed to the user during one tools/call
CUT = "The tool call reached its time limit: the question is closed."


@dataclass
class InFlight:
    """One server's tool calls in flight: their turns' callers and deadlines."""

    calls: dict[int, tuple[Caller | None, Deadline]] = field(default_factory=dict)
    _next: int = 0

    def running(self, caller: Caller | None, deadline: Deadline) -> AbstractContextManager[None]:
        self._next += 1
        return _Running(self.calls, self._next, (caller, deadline))

    def owner(self) -> tuple[Caller | None, list[Deadline]]:
        """The one caller behind every call in flight (else None), and their deadlines."""
        entries = list(self.calls.values())
        caller = elicit.unanimous([c for c, _ in entries])
        return caller, [d for _, d in entries] if caller is not None else []


class _Running:
    """One call's entry in InFlight.calls while its block runs (a class, not a generator:
    it is entered on every tools/call)."""

    __slots__ = ("calls", "entry", "key")

    def __init__(self, calls: dict[int, tuple[Caller | None, Deadline]], key: int,
                 entry: tuple[Caller | None, Deadline]) -> None:
        self.calls = calls
        self.key = key
        self.entry = entry

    def __enter__(self) -> None:
        self.calls[self.key] = self.entry

    def __exit__(self, *exc: object) -> None:
        del self.calls[self.key]


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
        from mcp_types import ElicitResult

        caller, deadlines = inflight.owner()
        if caller is None and inflight.calls:
            log.info("elicitation declined: nobody can answer", extra={
                "server": server,
                "why": "tool calls of more than one chat are running on the server"})
            return ElicitResult(action="decline")
        return await self.ask(server, caller, deadlines, params)

    async def ask(self, server: str, caller: Caller | None, deadlines: list[Deadline],
                  params: Any) -> Any:
        """The ElicitResult for one request known to serve `caller`'s calls (`deadlines`):
        the 2025 path finds them by InFlight.owner, a 2026 input request (mrtr.py) knows."""
        from mcp_types import ElicitRequestURLParams, ElicitResult

        dialog, why = elicit.who_answers(caller, self.dialogs)
        if dialog is None or caller is None:
            log.info("elicitation declined: nobody can answer", extra={"server": server,
                                                                       "why": why})
            return ElicitResult(action="decline")
        if any(d.questions >= MAX_QUESTIONS for d in deadlines):
            log.warning("elicitation declined: the call asked its questions already",
                        extra={"server": server, "limit": MAX_QUESTIONS})
            return ElicitResult(action="decline")
        for d in deadlines:
            d.questions += 1
        log.info("elicitation relayed to the user",
                 extra={"server": server, "channel": caller.channel, "chat_id": caller.chat_id,
                        "mode": getattr(params, "mode", "form")})
        lock = self._chats.setdefault((caller.channel, caller.chat_id), anyio.Lock())
        ceiling = min((d.ceiling for d in deadlines), default=math.inf)
        try:
            with held(deadlines) as hold:  # the user's answering time is not the server's
                outcome = await self._converse(dialog, caller, server, params, lock, ceiling)
                hold.answered = outcome.answered
        except Exception as exc:  # the channel failed to ask (Telegram down): nobody answered
            log.warning("elicitation failed; cancelled", extra={
                "server": server, "error": f"{type(exc).__name__}: {exc}"[:300]})
            return ElicitResult(action="cancel")
        log.info("elicitation answered", extra={"server": server, "action": outcome.action})
        if outcome.action != "accept" or isinstance(params, ElicitRequestURLParams):
            return ElicitResult(action=outcome.action)
        return ElicitResult(action="accept", content=dict(outcome.content or {}))

    async def _converse(self, dialog: Dialog, caller: Caller, server: str, params: Any,
                        lock: anyio.Lock, ceiling: float) -> elicit.Outcome:
        """The conversation, closed (as cancelled) when its calls reach their ceiling."""
        from mcp_types import ElicitRequestURLParams

        with anyio.move_on_at(ceiling) as cut:
            async with lock:
                if isinstance(params, ElicitRequestURLParams):
                    return await elicit.converse_url(
                        dialog, caller, server, params.message, params.url, self.timeout)
                return await elicit.converse_form(
                    dialog, caller, server, params.message, params.requested_schema,
                    self.timeout)
        assert cut.cancelled_caught
        await dialog.tell(caller, CUT)
        return elicit.Outcome("cancel", answered=False)


class Asking:
    """One server's elicitation plumbing: its calls in flight, and its session's callback."""

    def __init__(self, server: str, elicitor: Elicitor | None) -> None:
        self.server = server
        self.elicitor = elicitor  # None: the elicitation capability is not declared
        self.inflight = InFlight()

    def callback(self) -> Any:
        """The ClientSession's elicitation_callback (the SDK's ElicitationFnT); None declares
        no elicitation capability."""
        return self._on_elicit if self.elicitor is not None else None

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        """A server's elicitation/create: asked of the user of the turn whose call it serves."""
        assert self.elicitor is not None
        return await self.elicitor.answer(self.server, self.inflight, params)

    def running(self, deadline: Deadline) -> AbstractContextManager[None]:
        """A call in flight on the server, with the turn that made it (its user is asked)."""
        return self.inflight.running(elicit.TURN.get(), deadline)
