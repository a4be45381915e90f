"""Fallback models: the primary and the operator's alternatives behind one complete/stream.

A call fails over to the next endpoint on what will not fix itself in time (unreachable,
timed out, 5xx, 429 after the retry budget, a missing model or a refused key), never on
what the request caused (a 400 for its schema, a refused image, a too-long prompt). A
failed endpoint cools down (gantry.model.cooldown) so later calls skip it. A stream cut
mid-reply is resumed on the next endpoint: `Restart` tells the caller to take back what
it showed. Every attempt is one Provider call, so each is logged (and metered) on its own.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

import msgspec

from gantry.model.assemble import Completion
from gantry.model.client import Done, Provider, StreamEvent, TextDelta
from gantry.model.cooldown import Cooldown
from gantry.model.errors import ProviderError
from gantry.model.messages import Message, ToolDef
from gantry.model.retry import RetryPolicy

if TYPE_CHECKING:
    from gantry.config import Endpoint

__all__ = ["SHORT_RETRY", "Fallback", "Restart", "build", "fails_over", "model_missing"]

log = logging.getLogger("gantry.provider")

# The retry budget of an endpoint that has an alternative after it: what a dead one costs a
# turn (once per cooldown). Refused: ~0.6 s; unreachable: 2 connects of ≤ 10 s; hung: 60 s.
SHORT_RETRY = RetryPolicy(max_attempts=2, base_delay=0.5, max_delay=2.0, deadline=60.0)

# "model not found" as endpoints word it, seen with 404 and, from some, 400:
#   OpenAI   404 "The model `x` does not exist or you do not have access to it." (model_not_found)
#   Ollama   404 "model \"x\" not found, try pulling it first" / "model 'x' not found"
#   vLLM     404 "The model `x` does not exist."
#   llama.cpp (router) 400 "model not found";  LiteLLM 400 "Invalid model name passed in …"
_MODEL_MISSING = re.compile(
    r"model_not_found|\b(?:unknown|invalid|no such) model\b"
    r"|\bmodel\b[^.\n]{0,120}?\b(?:not found|does(?: not|n't) exist|is not available)",
    re.IGNORECASE,
)


class Restart(msgspec.Struct, frozen=True):
    """A stream broke after text was yielded and goes on from another endpoint: what was
    shown must be taken back; the text that follows is the whole reply afresh."""

    label: str  # the endpoint the reply now comes from ("fallback 1")


def model_missing(message: str) -> bool:
    """Whether an error text says the model is not served there."""
    return bool(_MODEL_MISSING.search(message))


def fails_over(err: ProviderError) -> bool:
    """Whether another endpoint may answer what this one failed: the endpoint is at fault
    (unreachable, out of retries, a broken reply, a missing model, a refused key), not the
    request. A 400/413/422 the request caused would fail the same everywhere."""
    if err.endpoint_fault or err.retryable:
        return True
    if err.status in (401, 403, 404):
        return True
    return err.status in (400, 422) and model_missing(err.message)


def _labels(endpoints: Sequence[Endpoint]) -> list[str]:
    """What /status calls each endpoint: its model, with the host when models repeat."""
    import httpx

    models = [e.model for e in endpoints]
    return [e.model if models.count(e.model) == 1 else
            f"{e.model} at {httpx.URL(e.base_url).host}" for e in endpoints]


def _minutes(seconds: float) -> str:
    """A wait as /status shows it: "45s" under a minute, else whole minutes ("3m")."""
    whole = round(seconds)
    return f"{whole}s" if whole < 60 else f"{round(whole / 60)}m"


class Fallback:
    """The endpoints in order, with the one Provider interface the agent, consolidation and
    vision retries use. `model` is the primary's name; `last` who answered last."""

    def __init__(
        self,
        providers: Sequence[Provider],
        labels: Sequence[str],
        *,
        names: Sequence[str] | None = None,
        cooldown: Cooldown | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not providers or len(providers) != len(labels):
            raise ValueError("Fallback needs one label per provider, and at least one")
        self.providers = list(providers)
        self.labels = list(labels)  # /status: the model name (with host if it repeats)
        self.names = list(names or [f"fallback {i}" if i else "primary"
                                    for i in range(len(providers))])
        self.cooldown = cooldown or Cooldown()
        self.clock = clock
        self.model = self.providers[0].model
        self.meter = self.providers[0].meter  # the usage ledger every attempt is a row of
        self.last: int | None = None  # index of the endpoint that answered last

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()

    # ------------------------------------------------------------------ calls

    def _order(self) -> list[int]:
        """Endpoints to try: those not cooling in the operator's order, then the cooling ones,
        soonest back first (with every endpoint cooling, a call is still made)."""
        if len(self.providers) == 1:
            return [0]
        now = self.clock()
        waits = [self.cooldown.remaining(self._key(i), now) for i in range(len(self.providers))]
        ready = [i for i, w in enumerate(waits) if w <= 0]
        cooling = sorted((i for i, w in enumerate(waits) if w > 0), key=lambda i: waits[i])
        return ready + cooling

    def _key(self, i: int) -> str:
        return str(i)

    def _give_up(self, i: int, err: ProviderError, next_i: int | None) -> None:
        """Endpoint `i` failed with `err`: re-raise it unless `next_i` may answer instead;
        an endpoint at fault cools down (when there is another to use meanwhile)."""
        if not fails_over(err):
            raise err
        if len(self.providers) > 1:
            self._failed(i, err, next_i)
        if next_i is None:
            raise err

    def _failed(self, i: int, err: ProviderError, next_i: int | None) -> None:
        wait = self.cooldown.failed(self._key(i), self.clock())
        log.warning(
            "model endpoint failed; trying the next" if next_i is not None else
            "model endpoint failed; no endpoint left",
            extra={"endpoint": self.names[i], "model": self.providers[i].model,
                   "status": err.status, "error": str(err), "cooldown_s": round(wait),
                   "next": self.names[next_i] if next_i is not None else None},
        )

    def _answered(self, i: int, completion: Completion, failed: int) -> None:
        """`failed`: endpoints that failed this call before `i` answered it."""
        self.cooldown.answered(self._key(i))
        self.last = i
        if i:
            log.info("model call answered by a fallback",
                     extra={"endpoint": self.names[i], "model": completion.model,
                            "failed_endpoints": failed})

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolDef] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> Completion:
        """One non-streamed turn from the first endpoint that answers."""
        order = self._order()
        for n, i in enumerate(order):
            try:
                completion = await self.providers[i].complete(messages, tools,
                                                              max_tokens=max_tokens)
            except ProviderError as err:
                self._give_up(i, err, order[n + 1] if n + 1 < len(order) else None)
                continue
            self._answered(i, completion, n)
            return completion
        raise AssertionError("unreachable: the last endpoint's failure is raised")

    async def stream(
        self,
        messages: list[Message],
        tools: list[ToolDef] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent | Restart]:
        """A streamed turn from the first endpoint that answers. A stream that broke after
        text was yielded goes on from the next endpoint after one `Restart`."""
        order = self._order()
        for n, i in enumerate(order):
            shown = False
            try:
                opened = self.providers[i].stream(messages, tools, max_tokens=max_tokens)
                async with aclosing(cast(AsyncGenerator[StreamEvent, None], opened)) as events:
                    async for event in events:
                        if isinstance(event, Done):
                            self._answered(i, event.completion, n)
                        elif isinstance(event, TextDelta):
                            shown = True
                        yield event
                return
            except ProviderError as err:
                self._give_up(i, err, order[n + 1] if n + 1 < len(order) else None)
            if shown:
                yield Restart(self.names[order[n + 1]])

    # ------------------------------------------------------------------ shown

    def status(self) -> str:
        """The /status model line: the primary, and when fallbacks exist who answered last
        and which endpoints are cooling down."""
        head = self.labels[0]
        if len(self.providers) == 1:
            return head
        now = self.clock()
        notes: list[str] = []
        if self.last is not None and self.last != 0:
            notes.append(f"last answer: {self.labels[self.last]}")
        for i in range(len(self.providers)):
            wait = self.cooldown.remaining(self._key(i), now)
            if wait > 0:
                notes.append(f"{self.names[i]} cooling down {_minutes(wait)}")
        if not notes:
            notes.append("fallbacks: " + ", ".join(self.labels[1:]))
        return f"{head} ({', '.join(notes)})"

    def notice(self, completion: Completion) -> str:
        """A line for a reply a fallback wrote ("" for the primary's): LLM_FALLBACK_NOTICE."""
        if not completion.model or not completion.endpoint:
            return ""
        first = self.providers[0]
        if (completion.model, completion.endpoint) == (first.model, first.shown_url):
            return ""
        return f"(Answered by the fallback model {completion.model}: {self.labels[0]} is " \
               "not answering right now.)"


def build(endpoints: Sequence[Endpoint], *, short: RetryPolicy = SHORT_RETRY,
          **provider_args: Any) -> Fallback:
    """The Fallback for the configured endpoints (config.Config.endpoints): each but the last
    with the `short` retry budget, the last with the full one."""
    providers = [
        Provider(e.base_url, e.api_key, e.model,
                 retry=short if i + 1 < len(endpoints) else None, **provider_args)
        for i, e in enumerate(endpoints)
    ]
    return Fallback(providers, _labels(endpoints), names=[e.label for e in endpoints])
