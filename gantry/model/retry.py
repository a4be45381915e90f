"""Retrying a model call through transient failures: the backoff policy and its deadline."""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec

from gantry.model.errors import ProviderError

__all__ = ["RetryPolicy", "with_retries"]

log = logging.getLogger("gantry.provider")

T = TypeVar("T")


class RetryPolicy(msgspec.Struct, frozen=True):
    """Backoff for transient failures: attempt n waits base*2^(n-1) (≤ max) plus up to 25%.

    `deadline` bounds the whole call in seconds — every attempt and every wait between
    them: an attempt still running when it passes is cut, no retry is scheduled past it,
    and a Retry-After longer than what is left ends the call at once. For a stream it bounds
    everything up to the first body byte (the last point where a retry is safe); after that
    the read timeout governs each chunk.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if min(self.base_delay, self.max_delay, self.deadline) < 0:
            raise ValueError("RetryPolicy delays and deadline must not be negative")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Delay before retry number `attempt` (1-based), jitter included."""
        delay = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return delay + rng.uniform(0.0, delay * 0.25)


async def with_retries(
    attempt_once: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[Any]],
    rng: random.Random,
    error: Callable[..., ProviderError],
) -> T:
    """Run `attempt_once` until it succeeds, fails for good, or the policy runs out.

    `error` makes the client's own errors (scrubbed of its key), here the deadline's cut.
    """
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        remaining = policy.deadline - (clock() - start)
        try:
            with anyio.move_on_after(max(0.0, remaining)) as bound:
                return await attempt_once()
        except ProviderError as err:
            if not err.retryable:
                raise
            if attempt >= policy.max_attempts:
                raise _gave_up(err, attempt, clock() - start, "attempts exhausted") from None
            remaining = policy.deadline - (clock() - start)
            delay = err.retry_after if err.retry_after is not None else policy.backoff(attempt, rng)
            if delay > remaining:
                raise _gave_up(err, attempt, clock() - start, "deadline reached") from None
            log.warning(
                "provider call failed; retrying",
                extra={
                    "attempt": attempt,
                    "max_attempts": policy.max_attempts,
                    "status": err.status,
                    "delay": round(delay, 3),
                    "reason": err.message,
                },
            )
            await sleep(delay)
            continue
        if bound.cancelled_caught:  # only the deadline gets here: the attempt was cut
            cut = error(
                f"no answer within the {policy.deadline:g}s deadline",
                hint="the provider is slow or not answering; try again later",
                retryable=True,
            )
            raise _gave_up(cut, attempt, clock() - start, "deadline reached")


def _gave_up(err: ProviderError, attempts: int, elapsed: float, why: str) -> ProviderError:
    return ProviderError(
        f"gave up after {attempts} attempt(s) in {elapsed:.1f}s ({why}): {err.message}",
        status=err.status,
        hint=err.hint,
        retryable=True,
        retry_after=err.retry_after,
        endpoint_fault=err.endpoint_fault,
    )
