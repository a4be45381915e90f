"""The Bot and its session (gantry's TLS), reaching Telegram at start, and the command menu."""

from __future__ import annotations

import logging
import ssl
from typing import Any

import anyio
from aiohttp import TCPConnector

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.base import BaseSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramRetryAfter, TelegramUnauthorizedError
from aiogram.types import BotCommand, User

from gantry.channel.telegram import retry
from gantry.channel.telegram.files_out import typed_form
from gantry.channel.telegram.retry import Backoff, expected

log = logging.getLogger("gantry.channel.telegram")

COMMANDS = [("new", "start a new conversation"), ("status", "uptime, model, history size"),
            ("usage", "model calls, tokens and cost"),
            ("stop", "stop the reply being written"), ("cancel", "same as /stop"),
            ("decline", "decline an MCP server's question"), ("skills", "the persona's skills"),
            ("prompts", "the MCP servers' prompts"), ("prompt", "run an MCP server's prompt"),
            ("help", "what I can do")]
VOICE_COMMAND = ("voice", "voice replies: /voice on or /voice off")
SESSION_LIMIT = 100  # aiogram's defaults for its aiohttp connector (see _Session)
SESSION_DNS_TTL = 3600
MENU_ATTEMPTS = 5  # setMyCommands tries before the menu is given up (one warning)


class _Session(AiohttpSession):
    """aiogram's session, verifying Telegram against the CA certificates gantry chose
    (gantry.tls); aiogram itself always uses certifi's bundle.

    Given gantry's context, it sets up what AiohttpSession.__init__ sets up, minus the certifi
    context that __init__ would build and gantry would throw away (~50 ms of every start).
    tests/test_telegram.py checks the attributes match stock aiogram's, so an aiogram that
    sets up more fails there, not at run time.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None, **kwargs: Any) -> None:
        if ssl_context is None:
            super().__init__(**kwargs)
            return
        BaseSession.__init__(self, **kwargs)
        self._session = None
        self._connector_type = TCPConnector
        self._connector_init = {"ssl": ssl_context, "limit": SESSION_LIMIT,
                                "ttl_dns_cache": SESSION_DNS_TTL}
        self._should_reset_connector = True
        self._proxy = None

    def build_form_data(self, bot: Bot, method: Any) -> Any:
        """aiogram's form, with each attachment's type on its part (a PNG as image/png)."""
        return typed_form(super().build_form_data(bot, method), method)


class BotTokenRejected(Exception):
    """Telegram said 401: the token is wrong or revoked. Fatal at boot."""


def make_bot(token: str, api_url: str, ssl_context: ssl.SSLContext | None) -> Bot:
    """The channel's Bot, talking to `api_url` through gantry's session."""
    session = _Session(ssl_context, api=TelegramAPIServer.from_base(api_url.rstrip("/")))
    return Bot(token, session=session)


async def connect(bot: Bot) -> User:
    """getMe (a bad token is fatal) and drop any webhook: what polling needs first."""
    backoff = Backoff()
    while True:
        try:
            me = await bot.get_me()
            await bot.delete_webhook(drop_pending_updates=False)
            log.info("telegram connected", extra={"bot": me.username, "bot_id": me.id})
            return me
        except TelegramUnauthorizedError:
            raise BotTokenRejected(
                "Telegram rejected TELEGRAM_BOT_TOKEN (401 Unauthorized): check the token "
                "from @BotFather"
            ) from None
        except TelegramRetryAfter as exc:
            await anyio.sleep(exc.retry_after)
        except Exception as exc:  # an HTML error page, a reset, a 5xx: all worth a retry
            delay = backoff.next()
            log.warning("telegram not reachable at start; retrying",
                        extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                        exc_info=None if expected(exc) else exc)
            await anyio.sleep(delay)


async def publish_commands(bot: Bot, voice: bool = False) -> None:
    """The command menu beside the poller, not before it: it is only a convenience (the
    commands work without it), so a slow or failing setMyCommands never delays receiving.
    A few tries with backoff, then one warning. `voice`: /voice is in it (speech is set up)."""
    backoff = Backoff(first=retry.BACKOFF_FIRST)
    commands = [*COMMANDS[:3], VOICE_COMMAND, *COMMANDS[3:]] if voice else COMMANDS
    for attempt in range(1, MENU_ATTEMPTS + 1):
        try:
            await bot.set_my_commands([BotCommand(command=c, description=d)
                                       for c, d in commands])
            log.debug("telegram command menu published", extra={"attempt": attempt})
            return
        except TelegramRetryAfter as exc:
            error: BaseException = exc
            delay = float(exc.retry_after)
        except Exception as exc:  # an error boundary: the menu never takes the channel down
            error, delay = exc, backoff.next()
        if attempt < MENU_ATTEMPTS:
            await anyio.sleep(delay)
    log.warning("telegram command menu not published; the commands still work",
                extra={"attempts": MENU_ATTEMPTS, "error": f"{type(error).__name__}: {error}"},
                exc_info=None if expected(error) else error)
