"""The per-server circuit breaker and the restart backoff."""

from __future__ import annotations

import random

from gantry.mcp.breaker import Breaker
from gantry.mcp.supervise import BACKOFF_CAP, backoff


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_threshold_probes_after_cooldown_and_closes_on_success() -> None:
    clock = Clock()
    b = Breaker(threshold=3, cooldown=10, clock=clock)
    for _ in range(2):
        b.failure()
    assert b.state == "closed" and b.allow()
    b.failure()
    assert b.state == "open" and not b.allow() and b.remaining() == 10
    clock.now = 10
    assert b.state == "half-open"
    assert b.allow()  # the one probe
    assert not b.allow()  # no second probe while the first runs
    b.success()
    assert b.state == "closed" and b.allow() and b.failures == 0


def test_a_failed_probe_reopens_for_longer_capped() -> None:
    clock = Clock()
    b = Breaker(threshold=1, cooldown=10, max_cooldown=25, clock=clock)
    b.failure()
    for expected in (20, 25, 25):
        clock.now += b.remaining()
        assert b.allow()
        b.failure()
        assert b.state == "open" and b.remaining() == expected


def test_backoff_grows_is_jittered_and_capped() -> None:
    rng = random.Random(7)
    steps = [backoff(a, rng) for a in range(12)]
    assert 0.25 <= steps[0] <= 0.5
    assert all(s <= BACKOFF_CAP for s in steps)
    assert steps[-1] >= BACKOFF_CAP / 2
    assert len({round(backoff(3, rng), 6) for _ in range(5)}) > 1  # jitter


def test_a_probe_that_ends_without_a_verdict_lets_the_next_call_probe() -> None:
    clock = Clock()
    b = Breaker(threshold=1, cooldown=10, clock=clock)
    b.failure()
    clock.now = 10
    assert b.allow() and not b.allow()
    b.settle()  # cancelled, or failed in a way that says nothing of the server
    assert b.state == "half-open" and b.allow()
    b.success()
    b.settle()
    assert b.state == "closed" and b.allow()
