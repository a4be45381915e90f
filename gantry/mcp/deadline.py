"""One tools/call's deadline: `timeout` of silence, moved on by each progress report, never
past a cap, and stopped while the call waits on a person (an elicitation relayed to the user:
the server is not the one being slow then). A question the user answered moves the cap on by
its time; one nobody answered does not (a server re-asking cannot outlive its cap). Nothing
moves a call past `ceiling` (MAX_CALL_SECONDS from its start)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio

MAX_CALL_SECONDS = 3600.0  # no tools/call outlives this, progress and questions included


class Deadline:
    """Drives `scope.deadline` (the call runs in `with deadline.scope:`); counts the questions
    the call's server asked (elicitation). The scope is made with its first deadline, which
    arms its timer once, as it is entered, on every tools/call."""

    def __init__(self, timeout: float, cap: float, ceiling: float = MAX_CALL_SECONDS) -> None:
        now = anyio.current_time()
        self.timeout = timeout
        self.ceiling = now + ceiling
        self.cap = min(now + cap, self.ceiling)
        self.scope = anyio.CancelScope(deadline=min(now + timeout, self.cap))
        self.questions = 0  # elicitations relayed to the user during this call
        self._holds = 0
        self._left = 0.0
        self._held_at = 0.0
        self._unanswered = False

    def alive(self) -> None:
        """The server reported progress: `timeout` more, within the cap."""
        if not self._holds:
            self.scope.deadline = min(self.cap, anyio.current_time() + self.timeout)

    def hold(self) -> None:
        """A question is open: no deadline but the ceiling until it ends."""
        if not self._holds:
            now = anyio.current_time()
            self._held_at = now
            self._left = max(0.0, self.scope.deadline - now)
            self._unanswered = False
            self.scope.deadline = self.ceiling
        self._holds += 1

    def release(self, answered: bool) -> None:
        """The question ended: the clock runs on with what was left, within the cap, which
        moves on by the time held only if every question of the spell was answered."""
        self._holds -= 1
        self._unanswered |= not answered
        if not self._holds:
            now = anyio.current_time()
            if not self._unanswered:
                self.cap = min(self.ceiling, self.cap + now - self._held_at)
            self.scope.deadline = min(self.cap, now + self._left)

    @property
    def capped(self) -> bool:
        """Whether the deadline that ended the call was the cap (or the ceiling)."""
        return self.scope.deadline >= self.cap


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
