"""Turn scopes: each turn shielded from the receive side's cancellation, and stoppable.

Shutdown cuts a turn only at the drain deadline (TurnAborted: its message stays pending).
A user's stop (Telegram's /stop, the REPL's Ctrl-C) ends a turn at once during a model
call, and cancels its MCP tool calls (the SDK sends the server notifications/cancelled; the
agent records each as cancelled, and a result that still comes is dropped). A built-in
tool's call is local and short: it finishes and is recorded. Nothing runs after either. A
turn whose final answer is recorded is past stopping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from gantry.channel.base import Inbound, TurnAborted, TurnStopped

log = logging.getLogger("gantry.turns")


class _Turn:
    """One running turn as its stopper sees it."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.answered = False  # the final answer is recorded: too late to stop
        self.stopping = False
        self.tools = 0  # tool calls running now
        self.cancellable: set[anyio.CancelScope] = set()  # those a stop cancels

    def stop(self) -> None:
        self.stopping = True
        for scope in self.cancellable:
            scope.cancel()
        if not self.tools:
            self.scope.cancel()

    def tool_done(self) -> None:
        self.tools -= 1
        if self.stopping and not self.tools:
            self.scope.cancel()  # delivered at the turn's next checkpoint: before the model


_CURRENT: ContextVar[_Turn | None] = ContextVar("gantry_turn", default=None)
# The recorded tool call running here, (session id, tool call id): what a call made as an
# MCP task is keyed by in gantry.db (gantry/mcp/tasks.py), so a restart finds its task.
_CALL: ContextVar[tuple[str, str] | None] = ContextVar("gantry_call", default=None)


def current_call() -> tuple[str, str] | None:
    return _CALL.get()


def stopped_by_user() -> bool:
    """Whether the running turn is being stopped by its user (not cut by a shutdown: a
    turn cut so is retried after the restart, and its MCP tasks with it)."""
    turn = _CURRENT.get()
    return turn is not None and turn.stopping


@contextmanager
def recorded_call(session_id: str, call_id: str) -> Iterator[None]:
    """Mark the block as running the tool call `call_id` of the conversation `session_id`."""
    token = _CALL.set((session_id, call_id))
    try:
        yield
    finally:
        _CALL.reset(token)


@contextmanager
def tool_call(cancellable: bool = False) -> Iterator[anyio.CancelScope]:
    """Around one tool call and the recording of its result: a stop cancels a `cancellable`
    call (the scope's `cancelled_caught` tells), waits for the others, then ends the turn
    before the next model call."""
    turn = _CURRENT.get()
    scope = anyio.CancelScope()
    if turn is None:
        with scope:
            yield scope
        return
    if cancellable:
        if turn.stopping:
            scope.cancel()
        turn.cancellable.add(scope)
    turn.tools += 1
    try:
        with scope:  # exited before the turn may be cancelled: it catches only its own
            yield scope
    finally:
        turn.cancellable.discard(scope)
        turn.tool_done()


@dataclass
class Turns:
    """The in-flight turns, for the shutdown drain.

    Once closing, no new turn starts; a turn cut at the drain deadline raises TurnAborted
    so the channel leaves its message pending rather than answering it. A turn the user
    stops (`Shielded.stop`) raises TurnStopped after `settle(session_id, text)` has closed
    it in the history.
    """

    scopes: set[anyio.CancelScope] = field(default_factory=set)
    closing: bool = False
    settle: Callable[[str, str], object] | None = None

    def wrap(self, respond: Any) -> Shielded:
        return Shielded(self, respond)

    def cancel_all(self) -> None:
        for scope in list(self.scopes):
            scope.cancel()


class Shielded:
    """`respond` with each turn in a shielded scope of `turns`; stoppable turn by turn."""

    def __init__(self, turns: Turns, respond: Any) -> None:
        self.turns = turns
        self.respond = respond
        self._running: dict[int, _Turn] = {}  # id(msg) → its turn

    async def __call__(self, msg: Inbound, stream: Any) -> str:
        if self.turns.closing:
            raise TurnAborted
        with anyio.CancelScope(shield=True) as scope:
            turn = _Turn(scope)
            self.turns.scopes.add(scope)
            self._running[id(msg)] = turn
            token = _CURRENT.set(turn)
            try:
                return str(await self.respond(_watched(msg, turn), stream))
            finally:
                _CURRENT.reset(token)
                self.turns.scopes.discard(scope)
                del self._running[id(msg)]
        if not turn.stopping:
            raise TurnAborted
        if self.turns.settle is not None:
            try:
                self.turns.settle(msg.session_id, msg.text)
            except Exception:
                log.exception("could not close the stopped turn in the history")
        log.info("turn stopped by the user", extra={"session": msg.session_id})
        raise TurnStopped

    def running(self, msg: Inbound) -> bool:
        """Whether `stop(msg)` would stop a turn: it runs and has no final answer yet."""
        turn = self._running.get(id(msg))
        return turn is not None and not turn.answered

    def stop(self, msg: Inbound) -> bool:
        if not self.running(msg):
            return False
        self._running[id(msg)].stop()
        return True


def _watched(msg: Inbound, turn: _Turn) -> Inbound:
    """`msg` with an `on_answer` that marks the turn answered (in the answer's transaction),
    so a stop that comes after the final answer is recorded leaves the turn alone."""
    inner = msg.on_answer

    def answered(reply: str) -> None:
        if inner is not None:
            inner(reply)
        turn.answered = True

    return msgspec.structs.replace(msg, on_answer=answered)
