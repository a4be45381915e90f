"""A per-server circuit breaker: stop hammering a server that keeps failing.

closed → (THRESHOLD failures in a row) → open → (cool-down) → half-open: one probe is let
through; its success closes the breaker, its failure opens it again for a longer cool-down.
Pure state with an injected clock, so tests drive it without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

THRESHOLD = 5
COOLDOWN = 30.0
MAX_COOLDOWN = 300.0


@dataclass
class Breaker:
    threshold: int = THRESHOLD
    cooldown: float = COOLDOWN
    max_cooldown: float = MAX_COOLDOWN
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    current_cooldown: float = 0.0
    probing: bool = field(default=False)

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.clock() - self.opened_at >= self.current_cooldown else "open"

    def remaining(self) -> float:
        """Seconds until a probe is allowed (0 when closed or half-open)."""
        if self.opened_at is None:
            return 0.0
        return max(0.0, self.opened_at + self.current_cooldown - self.clock())

    def allow(self) -> bool:
        """May a call (or restart) go ahead now? In half-open, only one probe at a time."""
        if self.opened_at is None:  # closed: the usual answer, without reading the clock
            return True
        state = self.state
        if state == "closed":
            return True
        if state == "open" or self.probing:
            return False
        self.probing = True
        return True

    def settle(self) -> None:
        """End a call with no verdict (cancelled, or an error that says nothing of the
        server's health): a half-open probe in flight is released so the next call probes,
        instead of every later call being refused until a restart."""
        self.probing = False

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.current_cooldown = 0.0
        self.probing = False

    def failure(self) -> None:
        self.failures += 1
        if self.opened_at is not None:  # a failed probe: open again, for longer
            self.current_cooldown = min(self.max_cooldown, self.current_cooldown * 2)
            self.opened_at = self.clock()
        elif self.failures >= self.threshold:
            self.current_cooldown = self.cooldown
            self.opened_at = self.clock()
        self.probing = False
