"""A reply streamed into Telegram as it is written: a placeholder, then throttled edits."""

from __future__ import annotations

import logging

import gantry.channel.telegram.lazy_aiogram  # noqa: F401  # isort: skip  (before aiogram: lazy models)
from aiogram.exceptions import TelegramBadRequest, TelegramRetryAfter

from gantry.channel.telegram.delivery import EDIT_GAP, Delivery
from gantry.channel.telegram.format import TELEGRAM_LIMIT, Rendered, utf16_len
from gantry.channel.telegram.retry import not_modified, permanent
from gantry.channel.telegram.split import split_text
from gantry.channel.telegram.store import Pending

log = logging.getLogger("gantry.channel.telegram")

PLACEHOLDER = "…"


class TelegramStream:
    """Edit-in-place streaming: a placeholder, then throttled edits as tokens arrive."""

    def __init__(self, out: Delivery, row: Pending) -> None:
        self.out = out
        self.row = row
        self.message_ids: list[int] = list(row.stream_msgs)
        self.text = ""  # text of the current (last) message
        self.shown = ""
        self.dead = False

    async def write(self, delta: str) -> None:
        self.text += delta
        if self.dead:
            return
        try:
            await self._write()
        except Exception as exc:
            self._failed(exc)

    async def _write(self) -> None:
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
        if self.message_ids and self.shown and not self.dead:
            try:
                await self._show(PLACEHOLDER, force=True)
            except Exception as exc:
                self._failed(exc)

    async def restart(self) -> None:
        """The reply starts over: the first message goes back to the placeholder, to be
        edited to the new text; any message the old text overflowed into is deleted."""
        self.text = ""
        if self.dead or not self.message_ids:
            return
        extra = self.message_ids[1:]
        if extra:
            del self.message_ids[1:]
            self.out.store.set_stream_msgs(self.row.update_id, self.message_ids)
            self.shown = ""  # the first message shows the old head: edit it whatever it holds
            for message_id in extra:
                await self.out.quiet_delete(self.row.chat_id, message_id)
        try:
            await self._show(PLACEHOLDER, force=True)
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """Showing progress is cosmetic: a failure never reaches the turn. After a final
        refusal (bot blocked, chat gone) the stream stops trying; delivery decides."""
        if permanent(exc):
            self.dead = True
        log.debug("stream update failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    async def finish(self, final_text: str) -> None:
        """Final delivery happens in Delivery.attempt (tracked for exactly-once)."""

    async def _new_message(self) -> None:
        try:
            mid = await self.out.send(self.row.chat_id, Rendered(self.text or PLACEHOLDER, []))
        except Exception as exc:
            log.warning("could not send the streaming placeholder", extra={"error": str(exc)})
            self.dead = self.dead or permanent(exc)
            return
        self.message_ids.append(mid)
        self.shown = self.text or PLACEHOLDER
        self.out.edit_later(self.row.chat_id, EDIT_GAP)  # a new message counts as an edit
        self.out.store.set_stream_msgs(self.row.update_id, self.message_ids)

    async def _show(self, text: str, force: bool = False) -> None:
        """Edit the current message, at most once per EDIT_GAP per chat (forced ones wait)."""
        chat = self.row.chat_id
        if not self.message_ids or not text.strip() or text == self.shown:
            return
        if not await self.out.edit_slot(chat, skip_if_busy=not force):
            return
        try:
            await self.out.bot.edit_message_text(text=text, chat_id=chat,
                                                message_id=self.message_ids[-1], parse_mode=None)
            self.shown = text
        except TelegramRetryAfter as exc:
            self.out.edit_later(chat, exc.retry_after)
        except TelegramBadRequest as exc:
            if not_modified(exc):
                self.shown = text
            else:
                log.debug("stream edit rejected", extra={"error": exc.message[:200]})
        except Exception as exc:  # 403 blocked, network, an HTML error page…
            self._failed(exc)
