"""The Telegram channel (aiogram 3): outbound long-polling, allowlist, exactly-once replies.

The poller records each accepted update and the next offset in SQLite *before* asking
Telegram for more (which confirms the batch), so a crash never loses a message. One worker
per chat answers its chat's updates in arrival order from that table; chats run
concurrently. The delivery bookkeeping is described in docs/telegram.md.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

import gantry.channel.aiogram_lazy  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, Update

from gantry.channel.base import Inbound, Responder, TurnAborted
from gantry.channel.telegram_store import Accepted, Pending, TelegramStore
from gantry.channel.tgformat import (
    TELEGRAM_LIMIT,
    Rendered,
    render_markdown,
    split_message,
    split_text,
    to_aiogram,
    utf16_len,
)

log = logging.getLogger("gantry.channel.telegram")

POLL_TIMEOUT = 25
ALLOWED_UPDATES = ["message"]  # edited messages, reactions, etc. are never delivered
COMMANDS = [("new", "start a new conversation"), ("status", "uptime, model, history size"),
            ("help", "what I can do")]
NON_TEXT_REPLY = "I can only read text messages for now."
TYPING_EVERY = 4.0
EDIT_GAP = 1.0
STRANGER_LOG_EVERY = 3600.0
DELIVERY_GRACE = 10.0
PLACEHOLDER = "…"


class _Session(AiohttpSession):
    """aiogram's session, verifying Telegram against the CA certificates gantry chose
    (gantry.tls); aiogram itself always uses certifi's bundle."""

    def __init__(self, ssl_context: ssl.SSLContext | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if ssl_context is not None:
            self._connector_init["ssl"] = ssl_context


class BotTokenRejected(Exception):
    """Telegram said 401: the token is wrong or revoked. Fatal at boot."""


def _not_modified(exc: TelegramBadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def _bad_entities(exc: TelegramBadRequest) -> bool:
    return "can't parse entities" in exc.message.lower() or "entit" in exc.message.lower()


def parts_for(reply: str) -> list[Rendered]:
    """The messages a reply is sent as: rendered Markdown split at 4096 UTF-16 units."""
    parts = [p for p in split_message(render_markdown(reply)) if p.text.strip()]
    return parts or [Rendered(reply.strip() or "(empty reply)", [])]


class Backoff:
    """Exponential backoff for the poller: 1, 2, 4 … 30 s; reset on success."""

    def __init__(self, first: float = 1.0, cap: float = 30.0) -> None:
        self.first, self.cap, self.delay = first, cap, 0.0

    def next(self) -> float:
        self.delay = self.first if self.delay == 0 else min(self.cap, self.delay * 2)
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0


class TelegramChannel:
    name = "telegram"

    def __init__(
        self,
        token: str,
        allowed_users: tuple[int, ...],
        conn: object,
        *,
        api_url: str = "https://api.telegram.org",
        stream_replies: bool = False,
        poll_timeout: int = POLL_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.allowed = frozenset(allowed_users)
        self.store = TelegramStore(conn)
        self.stream_replies = stream_replies
        self.poll_timeout = poll_timeout
        session = _Session(ssl_context, api=TelegramAPIServer.from_base(api_url.rstrip("/")))
        self.bot = Bot(token, session=session)
        self._active: set[int] = set()
        self._edit_at: dict[int, float] = {}  # chat → earliest time the next edit may go
        self._strangers: dict[int, float] = {}
        self._tg: Any = None
        self._respond: Responder | None = None

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, respond: Responder, ready: Callable[[], None]) -> None:
        self._respond = respond
        try:
            await self._start()
            self.store.prune()
            ready()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for chat in self.store.pending_chats():
                    self._kick(chat)
                await self._poll()
        finally:
            with anyio.CancelScope(shield=True):
                await self.bot.session.close()

    async def _start(self) -> None:
        """getMe (a bad token is fatal), drop any webhook, publish the command menu."""
        backoff = Backoff()
        while True:
            try:
                me = await self.bot.get_me()
                await self.bot.delete_webhook(drop_pending_updates=False)
                await self.bot.set_my_commands([BotCommand(command=c, description=d)
                                                for c, d in COMMANDS])
                log.info("telegram connected", extra={"bot": me.username, "bot_id": me.id})
                return
            except TelegramUnauthorizedError:
                raise BotTokenRejected(
                    "Telegram rejected TELEGRAM_BOT_TOKEN (401 Unauthorized): check the token "
                    "from @BotFather"
                ) from None
            except TelegramRetryAfter as exc:
                await anyio.sleep(exc.retry_after)
            except (TelegramNetworkError, TelegramServerError, TelegramAPIError) as exc:
                delay = backoff.next()
                log.warning("telegram not reachable at start; retrying",
                            extra={"error": str(exc), "retry_in_s": delay})
                await anyio.sleep(delay)

    # ------------------------------------------------------------------ polling

    async def _poll(self) -> None:
        backoff = Backoff()
        while True:
            offset = self.store.next_offset()
            try:
                updates = await self.bot.get_updates(
                    offset=offset or None,
                    timeout=self.poll_timeout,
                    allowed_updates=ALLOWED_UPDATES,
                    request_timeout=self.poll_timeout + 15,
                )
            except TelegramConflictError:
                delay = max(5.0, backoff.next())
                log.error(
                    "another process is polling this bot (409 Conflict): only one gantry may "
                    "run per bot token, and no webhook may be set; retrying",
                    extra={"retry_in_s": delay},
                )
                await anyio.sleep(delay)
                continue
            except TelegramRetryAfter as exc:
                log.warning("telegram rate limit on getUpdates",
                            extra={"retry_in_s": exc.retry_after})
                await anyio.sleep(exc.retry_after)
                continue
            except TelegramUnauthorizedError:
                log.error("telegram rejected the bot token (401); was it revoked? retrying")
                await anyio.sleep(60)
                continue
            except (TelegramNetworkError, TelegramServerError, TelegramAPIError) as exc:
                delay = backoff.next()
                log.warning("getUpdates failed; retrying",
                            extra={"error": str(exc), "retry_in_s": delay})
                await anyio.sleep(delay)
                continue
            backoff.reset()
            if updates:
                self._accept(updates)

    def _accept(self, updates: list[Update]) -> None:
        accepted: list[Accepted] = []
        for upd in updates:
            msg = upd.message
            if msg is None:
                continue
            user = msg.from_user.id if msg.from_user else 0
            if user not in self.allowed:
                self._stranger(user)
                continue
            text = msg.text
            accepted.append(Accepted(
                update_id=upd.update_id, chat_id=msg.chat.id, user_id=user,
                message_id=msg.message_id, text=text or "",
                reply=None if text is not None else NON_TEXT_REPLY,
            ))
        self.store.accept(accepted, max(u.update_id for u in updates) + 1)
        for chat in dict.fromkeys(a.chat_id for a in accepted):
            self._kick(chat)

    def _stranger(self, user: int) -> None:
        now = time.monotonic()
        if now - self._strangers.get(user, -STRANGER_LOG_EVERY) >= STRANGER_LOG_EVERY:
            self._strangers[user] = now
            log.warning("ignored a message from a user not in TELEGRAM_ALLOWED_USERS",
                        extra={"user_id": user})

    # ------------------------------------------------------------------ per-chat workers

    def _kick(self, chat: int) -> None:
        if chat not in self._active and self._tg is not None:
            self._active.add(chat)
            self._tg.start_soon(self._worker, chat)

    async def _worker(self, chat: int) -> None:
        backoff = Backoff(cap=60.0)
        try:
            while True:
                await anyio.lowlevel.checkpoint()  # stop here once shutdown has begun
                row = self.store.next_pending(chat)
                if row is None:
                    return
                if row.reply is None:
                    try:
                        row.reply = await self._answer(row)
                    except TurnAborted:
                        return
                    self.store.set_reply(row.update_id, row.reply)
                done = False
                with anyio.CancelScope(shield=True) as grace:
                    grace.deadline = anyio.current_time() + DELIVERY_GRACE
                    done = await self._deliver(row)
                if not done:
                    await anyio.sleep(backoff.next())
                else:
                    backoff.reset()
        finally:
            self._active.discard(chat)

    async def _answer(self, row: Pending) -> str:
        assert self._respond is not None
        inbound = Inbound(channel=self.name, chat_id=str(row.chat_id), user_id=str(row.user_id),
                          text=row.text, message_id=str(row.message_id))
        stream = TelegramStream(self, row) if self.stream_replies else None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._typing, row.chat_id)
            try:
                reply = await self._respond(inbound, stream)
            finally:
                tg.cancel_scope.cancel()
        if stream is not None:
            row.stream_msgs = stream.message_ids
        return reply

    async def _typing(self, chat: int) -> None:
        while True:
            try:
                await self.bot.send_chat_action(chat_id=chat, action="typing")
            except TelegramAPIError as exc:
                log.debug("typing indicator failed", extra={"error": str(exc)})
            await anyio.sleep(TYPING_EVERY)

    # ------------------------------------------------------------------ delivery

    async def _deliver(self, row: Pending) -> bool:
        """Send the parts not yet sent (editing streamed messages in place). True when done."""
        assert row.reply is not None
        parts = parts_for(row.reply)
        for i in range(row.sent_parts, len(parts)):
            existing = row.stream_msgs[i] if i < len(row.stream_msgs) else None
            try:
                if existing is not None:
                    await self._edit_final(row.chat_id, existing, parts[i])
                else:
                    await self._send(row.chat_id, parts[i])
            except (TelegramAPIError, OSError) as exc:
                log.warning("reply delivery failed; will retry",
                            extra={"chat_id": row.chat_id, "part": i, "error": str(exc)})
                return False
            row.sent_parts = i + 1
            self.store.mark_sent(row.update_id, row.sent_parts, len(parts))
        for extra in row.stream_msgs[len(parts):]:  # streamed text outgrew the final reply
            await self._quiet_delete(row.chat_id, extra)
        if row.sent_parts >= len(parts):
            self.store.mark_sent(row.update_id, len(parts), len(parts))
        return True

    async def _send(self, chat: int, part: Rendered) -> int:
        """sendMessage with entities, falling back to plain text if Telegram rejects them."""
        for attempt in range(5):
            try:
                try:
                    msg = await self.bot.send_message(
                        chat_id=chat, text=part.text, entities=to_aiogram(part.entities) or None,
                        parse_mode=None)
                except TelegramBadRequest as exc:
                    if not part.entities or not _bad_entities(exc):
                        raise
                    log.warning("telegram rejected the formatting; sending plain text")
                    msg = await self.bot.send_message(chat_id=chat, text=part.text,
                                                      parse_mode=None)
                return msg.message_id
            except TelegramRetryAfter as exc:
                if attempt == 4:
                    raise
                await anyio.sleep(exc.retry_after)
        raise AssertionError("unreachable")

    async def _edit_final(self, chat: int, message_id: int, part: Rendered) -> None:
        """Edit a streamed message into its final form; send anew only if the edit failed."""
        try:
            await self._edit(chat, message_id, part.text, part.entities)
        except TelegramBadRequest as exc:
            if _not_modified(exc):
                return
            if part.entities and _bad_entities(exc):
                try:
                    await self._edit(chat, message_id, part.text, [])
                    return
                except TelegramBadRequest as exc2:
                    if _not_modified(exc2):
                        return
            log.warning("final edit failed; sending the reply as a new message",
                        extra={"error": exc.message[:200]})
            await self._send(chat, part)

    async def _edit_slot(self, chat: int, *, skip_if_busy: bool = False) -> bool:
        """Take the chat's next edit slot (Telegram allows about one edit per second per chat):
        wait for it, or return False at once when `skip_if_busy` and it is not free yet."""
        wait = self._edit_at.get(chat, 0.0) - anyio.current_time()
        if wait > 0:
            if skip_if_busy:
                return False
            await anyio.sleep(wait)
        self._edit_at[chat] = anyio.current_time() + EDIT_GAP
        return True

    def _edit_later(self, chat: int, seconds: float) -> None:
        """Telegram said retry_after: no edit in this chat before then."""
        self._edit_at[chat] = anyio.current_time() + seconds

    async def _edit(self, chat: int, message_id: int, text: str, entities: list[Any]) -> None:
        """editMessageText; edits are idempotent, so transient failures are simply retried."""
        for attempt in range(4):
            await self._edit_slot(chat)
            try:
                await self.bot.edit_message_text(
                    text=text, chat_id=chat, message_id=message_id,
                    entities=to_aiogram(entities) or None, parse_mode=None)
                return
            except TelegramRetryAfter as exc:
                if attempt == 3:
                    raise
                self._edit_later(chat, exc.retry_after)
            except (TelegramNetworkError, TelegramServerError):
                if attempt == 3:
                    raise
                await anyio.sleep(0.5 * 2**attempt)

    async def _quiet_delete(self, chat: int, message_id: int) -> None:
        with contextlib.suppress(TelegramAPIError):
            await self.bot.delete_message(chat_id=chat, message_id=message_id)

    # ------------------------------------------------------------------ push (cron)

    async def push(self, chat_id: str, text: str) -> None:
        """An unsolicited message; only to allowlisted users' private chats."""
        chat = int(chat_id)
        if chat not in self.allowed:
            raise PermissionError(f"chat {chat} is not in TELEGRAM_ALLOWED_USERS")
        for part in parts_for(text):
            await self._send(chat, part)


class TelegramStream:
    """Edit-in-place streaming: a placeholder, then throttled edits as tokens arrive."""

    def __init__(self, channel: TelegramChannel, row: Pending) -> None:
        self.ch = channel
        self.row = row
        self.message_ids: list[int] = list(row.stream_msgs)
        self.text = ""  # text of the current (last) message
        self.shown = ""

    async def write(self, delta: str) -> None:
        self.text += delta
        if utf16_len(self.text) > TELEGRAM_LIMIT:
            head, *rest = split_text(self.text, TELEGRAM_LIMIT - 1)
            await self._show(head, force=True)
            self.text, self.shown = "".join(rest), ""
            await self._new_message()
        if not self.message_ids:
            await self._new_message()
        await self._show(self.text)

    async def discard(self) -> None:
        """A tool round: the preamble goes; the placeholder stays for the answer."""
        self.text = ""
        if self.message_ids and self.shown:
            await self._show(PLACEHOLDER, force=True)

    async def finish(self, final_text: str) -> None:
        """Final delivery happens in the channel's _deliver (tracked for exactly-once)."""

    async def _new_message(self) -> None:
        try:
            mid = await self.ch._send(self.row.chat_id, Rendered(self.text or PLACEHOLDER, []))
        except (TelegramAPIError, OSError) as exc:
            log.warning("could not send the streaming placeholder", extra={"error": str(exc)})
            return
        self.message_ids.append(mid)
        self.shown = self.text or PLACEHOLDER
        self.ch._edit_later(self.row.chat_id, EDIT_GAP)  # a new message counts as an edit
        self.ch.store.set_stream_msgs(self.row.update_id, self.message_ids)

    async def _show(self, text: str, force: bool = False) -> None:
        """Edit the current message, at most once per EDIT_GAP per chat (forced ones wait)."""
        chat = self.row.chat_id
        if not self.message_ids or not text.strip() or text == self.shown:
            return
        if not await self.ch._edit_slot(chat, skip_if_busy=not force):
            return
        try:
            await self.ch.bot.edit_message_text(text=text, chat_id=chat,
                                                message_id=self.message_ids[-1], parse_mode=None)
            self.shown = text
        except TelegramRetryAfter as exc:
            self.ch._edit_later(chat, exc.retry_after)
        except TelegramBadRequest as exc:
            if _not_modified(exc):
                self.shown = text
            else:
                log.debug("stream edit rejected", extra={"error": exc.message[:200]})
        except (TelegramNetworkError, TelegramServerError) as exc:
            log.debug("stream edit failed", extra={"error": str(exc)})
