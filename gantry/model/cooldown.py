"""How long a failed model endpoint is passed over: 60 s, doubling per failure, at most 10 min.

A dead primary then costs one turn its timeout per cooldown, not every turn; once the
cooldown runs out the endpoint is tried again, and one answer clears its record (pure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BASE_SECONDS", "MAX_SECONDS", "Cooldown", "period"]

BASE_SECONDS = 60.0
MAX_SECONDS = 600.0


def period(failures: int, base: float = BASE_SECONDS, most: float = MAX_SECONDS) -> float:
    """Seconds an endpoint is passed over after its `failures`-th failure in a row (≥ 1)."""
    if failures < 1:
        return 0.0
    return min(most, base * 2 ** min(failures - 1, 32))


@dataclass
class Cooldown:
    """Failures in a row and the end of the cooldown, per endpoint key."""

    base: float = BASE_SECONDS
    most: float = MAX_SECONDS
    _failures: dict[str, int] = field(default_factory=dict)
    _until: dict[str, float] = field(default_factory=dict)

    def failed(self, key: str, now: float) -> float:
        """Record a failure at `now`; return how long `key` is now passed over."""
        count = self._failures.get(key, 0) + 1
        self._failures[key] = count
        wait = period(count, self.base, self.most)
        self._until[key] = now + wait
        return wait

    def answered(self, key: str) -> None:
        """An answer clears the record: the next failure starts from the base again."""
        self._failures.pop(key, None)
        self._until.pop(key, None)

    def remaining(self, key: str, now: float) -> float:
        """Seconds `key` is still passed over (0 when it may be tried)."""
        return max(0.0, self._until.get(key, 0.0) - now)
