"""Replies out, exactly once: each part sent (or a streamed one edited), recorded in order.

Also the per-chat edit slot (about one edit a second) and the grace deliveries get at shutdown.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import anyio

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram import Bot
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)

from gantry.channel.reply import Attachment, Reply, image_urls, unpack
from gantry.channel.telegram.files_out import send_attachment
from gantry.channel.telegram.format import Rendered, render_markdown, to_aiogram
from gantry.channel.telegram.reactions import Reactions
from gantry.channel.telegram.retry import TRANSIENT, bad_entities, not_modified, permanent
from gantry.channel.telegram.split import split_message
from gantry.channel.telegram.store import Pending, TelegramStore
from gantry.channel.telegram.voice import Spoken, Step, VoiceOut, with_voice

log = logging.getLogger("gantry.channel.telegram")

EDIT_GAP = 1.0
DELIVERY_GRACE = 10.0  # how long a delivery may still run once shutdown has begun


def parts_for(reply: str) -> list[Rendered]:
    """The messages a reply is sent as: rendered Markdown split at 4096 UTF-16 units."""
    parts = [p for p in split_message(render_markdown(reply)) if p.text.strip()]
    return parts or [Rendered(reply.strip() or "(empty reply)", [])]


def delivery_parts(reply: Reply) -> tuple[list[Rendered], list[Attachment | str]]:
    """A stored reply's parts: its text's messages, then (each one more part) its
    attachments and the https images its Markdown shows (sent by URL). A reply of files
    alone sends no "(empty reply)" text."""
    extras: list[Attachment | str] = [*reply.attachments, *image_urls(reply.text)]
    return (parts_for(reply.text) if reply.text.strip() or not extras else []), extras


class Delivery:
    """Sending and editing for one TelegramChannel; the worker decides when, this how."""

    def __init__(self, bot: Bot, store: TelegramStore, voice: VoiceOut | None = None,
                 reactions: Reactions | None = None) -> None:
        self.bot = bot
        self.store = store
        self.voice = voice or VoiceOut(None)
        self.reactions = reactions or Reactions(bot, store.conn, enabled=False)
        self.edit_at: dict[int, float] = {}  # chat → earliest time the next edit may go
        self._closing = False
        self._deliveries: set[anyio.CancelScope] = set()

    async def attempt(self, row: Pending) -> bool:
        """One delivery attempt of a row with a reply; False means "back off"."""
        with anyio.CancelScope(shield=True) as scope:
            self._deliveries.add(scope)
            if self._closing:
                scope.deadline = anyio.current_time() + DELIVERY_GRACE
            try:
                await self._deliver(row)
                return True
            except Exception as exc:
                return self._failed(row, exc)
            finally:
                self._deliveries.discard(scope)
        self.store.undo_attempt(row.update_id)  # cut by the shutdown grace: resumed next start
        return False

    def _failed(self, row: Pending, exc: Exception) -> bool:
        where = {"update_id": row.update_id, "chat_id": row.chat_id, "part": row.sent_parts}
        if permanent(exc):
            log.error("Telegram refused the reply for good; marked undeliverable",
                      extra={**where, "error": f"{type(exc).__name__}: {exc}"})
            self.store.finish(row.update_id, "undeliverable", f"{type(exc).__name__}: {exc}")
            return True
        if isinstance(exc, TRANSIENT):
            log.warning("reply delivery failed; will retry",
                        extra={**where, "error": f"{type(exc).__name__}: {exc}"})
            self.store.undo_attempt(row.update_id)
            return False
        failures = self.store.fail_attempt(row.update_id)
        log.error("reply delivery failed unexpectedly; will retry",
                  extra={**where, "failures": failures}, exc_info=exc)
        return False

    def begin_grace(self) -> None:
        """Shutdown has begun: deliveries in flight (and any still starting) get
        DELIVERY_GRACE seconds more, then give way. Before this, they have no limit of
        ours (aiogram's request timeout governs): cutting a slow send that Telegram then
        completes would send the reply twice."""
        self._closing = True
        limit = anyio.current_time() + DELIVERY_GRACE
        for scope in self._deliveries:
            scope.deadline = min(scope.deadline, limit)

    async def _deliver(self, row: Pending) -> None:
        """Send the parts not yet sent (editing streamed messages in place), then the voice
        note of a spoken reply (voice.py), then the reply's attachments, each one more part;
        raises what Telegram raised (the worker judges whether it is transient or final)."""
        steps = self.steps(row)
        total = len(steps)
        for i in range(row.sent_parts, total):
            sent = await self._step(row, i, steps[i])
            row.sent_parts = i + 1
            self.store.mark_sent(row.update_id, row.sent_parts, total)
            if sent is not None:
                self.reactions.sent(row.chat_id, sent, row.update_id)
        texts = sum(isinstance(s, Rendered) for s in steps)
        for extra in row.stream_msgs[texts:]:  # streamed text outgrew the final reply
            await self.quiet_delete(row.chat_id, extra)
        if row.sent_parts >= total:
            self.store.mark_sent(row.update_id, total, total)

    def steps(self, row: Pending) -> list[Step]:
        """The parts of a row's reply, in order; the same on every attempt (sent_parts counts
        them): what the reply says, whether it is spoken, and what was streamed are stored."""
        assert row.reply is not None
        reply = unpack(row.reply)
        parts, extras = delivery_parts(reply)
        if row.voice and parts:
            return with_voice(parts, extras, reply.text, self.voice.max_chars or 1000,
                              len(row.stream_msgs))
        return [*parts, *extras]

    async def _step(self, row: Pending, i: int, step: Step) -> int | None:
        """One part out; the message id of a reply message it sent, if any."""
        if isinstance(step, Spoken):
            sent = await self.voice.send(self.bot, row.chat_id, step)
            if sent is None and step.caption is not None:  # no voice: the text as it was
                return await self.send(row.chat_id, step.caption)
            return sent
        if not isinstance(step, Rendered):
            await self.send_file(row.chat_id, step)
            return None
        if i < len(row.stream_msgs):
            await self._edit_final(row.chat_id, row.stream_msgs[i], step)
            return row.stream_msgs[i]
        return await self.send(row.chat_id, step)

    async def send_file(self, chat: int, file: Attachment | str) -> None:
        """One attachment (sendPhoto, or sendDocument) or image URL, following a group's
        migration like text. A file gone from the outbox (pruned) is said in a line instead."""
        try:
            await send_attachment(self.bot, chat, file)
        except TelegramMigrateToChat as exc:
            await send_attachment(self.bot, exc.migrate_to_chat_id, file)

    async def send(self, chat: int, part: Rendered) -> int:
        """sendMessage with entities, falling back to plain text if Telegram rejects them,
        and following a group's migration to a supergroup."""
        try:
            return await self._send_to(chat, part)
        except TelegramMigrateToChat as exc:
            log.info("the group became a supergroup; replying there",
                     extra={"chat_id": chat, "new_chat_id": exc.migrate_to_chat_id})
            return await self._send_to(exc.migrate_to_chat_id, part)

    async def _send_to(self, chat: int, part: Rendered) -> int:
        for attempt in range(5):
            try:
                try:
                    msg = await self.bot.send_message(
                        chat_id=chat, text=part.text, entities=to_aiogram(part.entities) or None,
                        parse_mode=None)
                except TelegramBadRequest as exc:
                    if not part.entities or not bad_entities(exc):
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
            if not_modified(exc):
                return
            if part.entities and bad_entities(exc):
                try:
                    await self._edit(chat, message_id, part.text, [])
                    return
                except TelegramBadRequest as exc2:
                    if not_modified(exc2):
                        return
            log.warning("final edit failed; sending the reply as a new message",
                        extra={"error": exc.message[:200]})
            await self.send(chat, part)

    async def edit_slot(self, chat: int, *, skip_if_busy: bool = False) -> bool:
        """Take the chat's next edit slot (Telegram allows about one edit per second per chat):
        wait for it, or return False at once when `skip_if_busy` and it is not free yet."""
        wait = self.edit_at.get(chat, 0.0) - anyio.current_time()
        if wait > 0:
            if skip_if_busy:
                return False
            await anyio.sleep(wait)
        self.edit_at[chat] = anyio.current_time() + EDIT_GAP
        return True

    def edit_later(self, chat: int, seconds: float) -> None:
        """Telegram said retry_after: no edit in this chat before then."""
        self.edit_at[chat] = anyio.current_time() + seconds

    async def _edit(self, chat: int, message_id: int, text: str, entities: list[Any]) -> None:
        """editMessageText; edits are idempotent, so transient failures are simply retried."""
        for attempt in range(4):
            await self.edit_slot(chat)
            try:
                await self.bot.edit_message_text(
                    text=text, chat_id=chat, message_id=message_id,
                    entities=to_aiogram(entities) or None, parse_mode=None)
                return
            except TelegramRetryAfter as exc:
                if attempt == 3:
                    raise
                self.edit_later(chat, exc.retry_after)
            except (TelegramNetworkError, TelegramServerError):
                if attempt == 3:
                    raise
                await anyio.sleep(0.5 * 2**attempt)

    async def quiet_delete(self, chat: int, message_id: int) -> None:
        with contextlib.suppress(Exception):  # a leftover streamed message: cosmetic
            await self.bot.delete_message(chat_id=chat, message_id=message_id)
