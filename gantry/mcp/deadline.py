"""One tools/call's deadline: `timeout` of silence, moved on by each progress report, never
past a cap, and stopped while the call waits on a person (an elicitation relayed to the user:
the server is not the one being slow then). A question the user answered moves the cap on by
its time; one nobody answered does not (a server re-asking cannot outlive its cap). Nothing
moves a call past `ceiling` (MAX_CALL_SECONDS from its start)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio

MAX_CALL_SECONDS = 3600.0  # no tools/call outlives this, progress and questions included


class _Watch:
    """One timer for every deadline in flight on an event loop, armed at the earliest of
    them. A call made after the one before it ends no earlier, so it arms nothing: unlike a
    CancelScope with a deadline, which arms and cancels a timer of its own on every call.
    When the timer fires, the deadlines that have come are cancelled and it is armed again
    at the earliest left (progress and holds only ever move a deadline later than its
    timer, or arm it again)."""

    __slots__ = ("active", "at", "handle", "loop", "scope")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # The running backend's CancelScope class: anyio.CancelScope() looks the backend up
        # anew for every scope it makes.
        self.scope: type[anyio.CancelScope] = type(anyio.CancelScope())
        self.active: set[Deadline] = set()
        self.at = math.inf  # when the timer fires (inf: not armed)
        self.handle: asyncio.TimerHandle | None = None

    def arm(self, when: float) -> None:
        """A deadline in flight is now `when`: fire then, if that is before the timer."""
        if when < self.at:
            if self.handle is not None:
                self.handle.cancel()
            self.at = when
            self.handle = self.loop.call_at(when, self.fire)

    def fire(self) -> None:
        self.handle, self.at = None, math.inf
        now = self.loop.time()
        left = math.inf
        for d in list(self.active):
            if d.due <= now:
                self.active.discard(d)
                d.scope.cancel()
            elif d.due < left:
                left = d.due
        if left < math.inf:
            self.arm(left)


_WATCHES: dict[asyncio.AbstractEventLoop, _Watch] = {}


def _watch() -> _Watch:
    """The running loop's watch (gantry runs anyio on asyncio)."""
    loop = asyncio.get_running_loop()
    watch = _WATCHES.get(loop)
    if watch is None:
        for old in [lp for lp in _WATCHES if lp.is_closed()]:
            del _WATCHES[old]
        watch = _WATCHES[loop] = _Watch(loop)
    return watch


class Deadline:
    """The deadline of one call, which runs in `with deadline:` (a cancel scope, `scope`,
    cancelled when `due` comes); counts the questions the call's server asked
    (elicitation). Its timer is the loop's one watch (_Watch), not one of its own."""

    __slots__ = ("_held_at", "_holds", "_left", "_unanswered", "_watch", "cap", "ceiling",
                 "due", "questions", "scope", "timeout")

    def __init__(self, timeout: float, cap: float, ceiling: float = MAX_CALL_SECONDS) -> None:
        self._watch = watch = _watch()
        now = watch.loop.time()  # anyio.current_time() on asyncio
        self.timeout = timeout
        self.ceiling = now + ceiling
        self.cap = min(now + cap, self.ceiling)
        self.due = min(now + timeout, self.cap)
        self.scope = watch.scope()
        self.questions = 0  # elicitations relayed to the user during this call
        self._holds = 0
        self._left = 0.0
        self._held_at = 0.0
        self._unanswered = False

    def __enter__(self) -> Deadline:
        self.scope.__enter__()
        self._watch.active.add(self)
        self._watch.arm(self.due)
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        self._watch.active.discard(self)
        return self.scope.__exit__(*exc)

    def _move(self, when: float) -> None:
        self.due = when
        if self in self._watch.active:
            self._watch.arm(when)

    def alive(self) -> None:
        """The server reported progress: `timeout` more, within the cap."""
        if not self._holds:
            self._move(min(self.cap, self._watch.loop.time() + self.timeout))

    def hold(self) -> None:
        """A question is open: no deadline but the ceiling until it ends."""
        if not self._holds:
            now = self._watch.loop.time()
            self._held_at = now
            self._left = max(0.0, self.due - now)
            self._unanswered = False
            self._move(self.ceiling)
        self._holds += 1

    def release(self, answered: bool) -> None:
        """The question ended: the clock runs on with what was left, within the cap, which
        moves on by the time held only if every question of the spell was answered."""
        self._holds -= 1
        self._unanswered |= not answered
        if not self._holds:
            now = self._watch.loop.time()
            if not self._unanswered:
                self.cap = min(self.ceiling, self.cap + now - self._held_at)
            self._move(min(self.cap, now + self._left))

    @property
    def capped(self) -> bool:
        """Whether the deadline that ended the call was the cap (or the ceiling)."""
        return self.due >= self.cap


@dataclass
class Hold:
    """Whether the user answered the question a `held` block asked (else its time counts)."""

    answered: bool = False


@contextmanager
def held(deadlines: Iterable[Deadline]) -> Iterator[Hold]:
    """Stop the clocks of `deadlines` (a server's calls in flight) while the block runs; set
    the Hold's `answered` when the user answered."""
    taken = list(deadlines)
    hold = Hold()
    for d in taken:
        d.hold()
    try:
        yield hold
    finally:
        for d in taken:
            d.release(hold.answered)
