"""One tools/call's deadline: `timeout` of silence, moved on by each progress report, never
past an absolute cap, and stopped while the call waits on a person (an elicitation relayed to
the user: the server is not the one being slow then)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import anyio


class Deadline:
    """Drives `scope.deadline`; the cap moves on by the time spent waiting on a person."""

    def __init__(self, scope: anyio.CancelScope, timeout: float, cap: float) -> None:
        self.scope = scope
        self.timeout = timeout
        self.cap = anyio.current_time() + cap
        self.scope.deadline = anyio.current_time() + timeout
        self._holds = 0
        self._left = 0.0
        self._held_at = 0.0

    def alive(self) -> None:
        """The server reported progress: `timeout` more, within the cap."""
        if not self._holds:
            self.scope.deadline = min(self.cap, anyio.current_time() + self.timeout)

    def hold(self) -> None:
        if not self._holds:
            now = anyio.current_time()
            self._held_at = now
            self._left = max(0.0, self.scope.deadline - now)
            self.scope.deadline = math.inf
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        if not self._holds:
            now = anyio.current_time()
            self.cap += now - self._held_at
            self.scope.deadline = now + self._left

    @property
    def capped(self) -> bool:
        """Whether the deadline that ended the call was the cap."""
        return self.scope.deadline >= self.cap


@contextmanager
def held(deadlines: set[Deadline]) -> Iterator[None]:
    """Stop the clocks of `deadlines` (a server's calls in flight) while the block runs."""
    taken = list(deadlines)
    for d in taken:
        d.hold()
    try:
        yield
    finally:
        for d in taken:
            d.release()
