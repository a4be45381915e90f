"""Which Telegram failures pass and which are final, and the backoff between tries."""

from __future__ import annotations

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)

BACKOFF_FIRST = 1.0  # first retry delay of the poller, the chat workers and the command menu

# Errors that say nothing about the message: Telegram or the network is down for a while.
TRANSIENT = (TelegramNetworkError, TelegramServerError, TelegramRetryAfter, ClientDecodeError,
             TelegramUnauthorizedError, TelegramConflictError, OSError, TimeoutError)
# Errors that will never go away for this chat: blocked, kicked, deleted, invalid.
PERMANENT = (TelegramForbiddenError, TelegramNotFound, TelegramBadRequest,
             TelegramEntityTooLarge)


def not_modified(exc: TelegramBadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def bad_entities(exc: TelegramBadRequest) -> bool:
    return "can't parse entities" in exc.message.lower() or "entit" in exc.message.lower()


def permanent(exc: BaseException) -> bool:
    return isinstance(exc, PERMANENT) and not isinstance(exc, TelegramMigrateToChat)


def expected(exc: BaseException) -> bool:
    """A failure Telegram or the network explains (logged without a traceback)."""
    return isinstance(exc, (*TRANSIENT, TelegramAPIError))


class Backoff:
    """Exponential backoff for the poller: 1, 2, 4 … 30 s; reset on success."""

    def __init__(self, first: float = 1.0, cap: float = 30.0) -> None:
        self.first, self.cap, self.delay = first, cap, 0.0

    def next(self) -> float:
        self.delay = self.first if self.delay == 0 else min(self.cap, self.delay * 2)
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0
