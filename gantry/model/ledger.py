"""The usage ledger's writing side: one `usage` row per model call (migration 0015_usage.sql).

A row is opened, and committed, before the request goes out, so a call that happened is never
lost; the reply's tokens ride on its Completion as a Charge and are written by whoever stores
what the reply became, inside that same transaction (`settle`), so a kill -9 never counts
it twice. A failed attempt is closed at once; a row still open at boot was cut by a kill and
is closed `lost`, billed once with its estimate (`settle_lost`). Reading is gantry.model.spend.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, NamedTuple

from gantry.model.wire import Usage
from gantry.prices import Price, cost

__all__ = [
    "CHAT",
    "SOURCE",
    "Charge",
    "Meter",
    "Tab",
    "attributed",
    "count_as",
    "estimate",
    "settle",
    "settle_lost",
    "start",
    "uncount",
]

log = logging.getLogger("gantry.usage")

SOURCE: ContextVar[str] = ContextVar("gantry_usage_source", default="chat")
"""What a model call is for: chat, cron:<job>, watch:<id>, consolidation, summary,
transcription. Set by each caller around its calls (`attributed`); read per call."""
CHAT: ContextVar[str | None] = ContextVar("gantry_usage_chat", default=None)
"""The session (`<channel>:<chat>`) a call belongs to, when it is a chat's."""

MAX_SOURCE = 120  # a job id or watch id is short; the column is never a dump of text


def estimate(chars: int) -> int:
    """Tokens for `chars` characters (or bytes) of text: about four each, rounded up."""
    return (max(0, chars) + 3) // 4


Attribution = tuple[Token[str], Token[str | None]]


def count_as(source: str, chat: str | None = None) -> Attribution:
    """From now on in this context, calls are counted under `source` (and `chat`);
    `uncount` with what it returns ends that."""
    return SOURCE.set(source[:MAX_SOURCE]), CHAT.set(chat)


def uncount(attribution: Attribution) -> None:
    """Undo one `count_as`."""
    CHAT.reset(attribution[1])
    SOURCE.reset(attribution[0])


@contextmanager
def attributed(source: str, chat: str | None = None) -> Iterator[None]:
    """Calls made inside are counted under `source` (and `chat`)."""
    attribution = count_as(source, chat)
    try:
        yield
    finally:
        uncount(attribution)


class Charge(NamedTuple):
    """What closes one open row: the tokens of a complete reply and their cost."""

    id: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    estimated: bool
    cost: float | None
    reply_id: str | None


_SETTLE = (
    "UPDATE usage SET state = 'done', ended_at = ?, prompt_tokens = ?, completion_tokens = ?, "
    "cached_tokens = ?, estimated = ?, cost = ?, reply_id = ? WHERE id = ? AND state = 'open'"
)


def settle(conn: Any, charge: Charge | None, now: float | None = None) -> None:
    """Close `charge`'s row as done. Call it inside the transaction that stores what the
    reply became; a row already closed is left as it is."""
    if charge is None:
        return
    conn.execute(_SETTLE, (time.time() if now is None else now, charge.prompt_tokens,
                           charge.completion_tokens, charge.cached_tokens, int(charge.estimated),
                           charge.cost, charge.reply_id, charge.id))


def settle_lost(conn: Any, prices: Mapping[str, Price], now: float | None = None) -> int:
    """At boot: rows still open were cut by a kill between the call and its transaction.
    Each is closed `lost`, billed once with its prompt estimate. Returns how many."""
    rows = list(conn.execute("SELECT id, model, prompt_estimate FROM usage WHERE state = 'open'"))
    if not rows:
        return 0
    ended = time.time() if now is None else now
    with conn:
        for row_id, model, prompt in rows:
            conn.execute(
                "UPDATE usage SET state = 'lost', ended_at = ?, prompt_tokens = ?, "
                "estimated = 1, cost = ? WHERE id = ? AND state = 'open'",
                (ended, prompt, cost(prices.get(model), prompt, 0, 0), row_id))
    return len(rows)


def start(conn: Any, prices: Mapping[str, Price]) -> Meter:
    """At boot: calls a kill cut are closed as lost (logged), then the Meter of this run."""
    lost = settle_lost(conn, prices)
    if lost:
        log.warning("model calls cut by a stop were counted as billed, with estimated tokens",
                    extra={"calls": lost})
    return Meter(conn, prices)


class Meter:
    """The Provider's side of the ledger: opens a row per HTTP attempt and prices replies."""

    def __init__(self, conn: Any, prices: Mapping[str, Price] | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.prices: Mapping[str, Price] = prices or {}
        self.clock = clock
        self.gate: Callable[[str, str | None], None] | None = None
        """Set by gantry.model.budget: asked (source, chat) before each call is opened; it
        raises to refuse the call (BudgetReached)."""

    def open(self, model: str, endpoint: str, prompt_chars: int, *, gated: bool = True) -> int:
        """A row for a call about to be sent, committed at once; its id. `gated`: the
        budget is asked first, in the same step, so no call slips between check and row."""
        if gated and self.gate is not None:
            self.gate(SOURCE.get(), CHAT.get())
        with self.conn:
            self.conn.execute(
                "INSERT INTO usage (started_at, source, chat, model, endpoint, state, "
                "prompt_estimate) VALUES (?, ?, ?, ?, ?, 'open', ?)",
                (self.clock(), SOURCE.get(), CHAT.get(), model, endpoint, estimate(prompt_chars)))
            return int(self.conn.last_insert_rowid())

    def fail(self, row_id: int, text_chars: int = 0) -> None:
        """Close a failed attempt at once: no tokens, unless the server had streamed some
        text (then an estimate of it and of the prompt, marked as one)."""
        with self.conn:
            self.conn.execute(
                "UPDATE usage SET state = 'failed', ended_at = ?, "
                "prompt_tokens = CASE WHEN ? > 0 THEN prompt_estimate ELSE 0 END, "
                "completion_tokens = ?, estimated = ? WHERE id = ? AND state = 'open'",
                (self.clock(), text_chars, estimate(text_chars), int(text_chars > 0), row_id))

    def charge(self, row_id: int, model: str, usage: Usage | None, prompt_chars: int,
               completion_chars: int, reply_id: str | None = None) -> Charge:
        """What closes `row_id` for a complete reply: the reported tokens, else estimates
        of what was sent and received (marked estimated)."""
        prompt = usage.prompt_tokens if usage else None
        completion = usage.completion_tokens if usage else None
        estimated = prompt is None or completion is None
        prompt = estimate(prompt_chars) if prompt is None else max(0, prompt)
        completion = estimate(completion_chars) if completion is None else max(0, completion)
        cached = min(prompt, max(0, (usage.cached_tokens if usage else None) or 0))
        return Charge(row_id, prompt, completion, cached, estimated,
                      cost(self.prices.get(model), prompt, cached, completion),
                      reply_id[:100] if reply_id else None)

    def record_call(self, model: str, endpoint: str, *, usage: Usage | None = None,
                    prompt_chars: int = 0, completion_chars: int = 0, ok: bool = True,
                    source: str | None = None) -> None:
        """One whole call made outside the Provider (transcription, speech), in one row:
        done with what the server reported (estimated when nothing), or failed."""
        token = SOURCE.set(source) if source else None
        try:
            row_id = self.open(model, endpoint, prompt_chars, gated=False)  # made already
        finally:
            if token is not None:
                SOURCE.reset(token)
        if not ok:
            self.fail(row_id)
            return
        with self.conn:
            settle(self.conn, self.charge(row_id, model, usage, prompt_chars, completion_chars),
                   self.clock())


class Tab:
    """The charges of one turn's replies not yet written: `settle` inside the transaction
    that stores a round, `close` (in a finally) for replies whose product was dropped."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._open: list[Charge] = []

    def add(self, charge: Charge | None) -> None:
        if charge is not None:
            self._open.append(charge)

    def settle(self) -> None:
        """Close every charge held; the caller holds the transaction."""
        now = time.time()
        for charge in self._open:
            settle(self.conn, charge, now)
        self._open.clear()

    def close(self) -> None:
        """Close what is left in a transaction of its own: those calls happened too."""
        if self._open:
            with self.conn:
                self.settle()
