"""Telegram's side of elicitation: a server's questions as messages with inline-keyboard
buttons (choices) or a typed reply, answered only by the turn's author.

The poller hands each callback_query (a button press) and each message to this module
before anything else: an answer to an open question is taken here, in memory, and never
becomes a stored update or a turn; every press is answered with answerCallbackQuery so the
user's client stops its spinner. One question per chat is open at a time (a round's
concurrent calls wait their turn). docs/mcp.md#elicitation, docs/telegram.md.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import anyio

from gantry.elicit import Caller, Question

log = logging.getLogger("gantry.channel.telegram")

PREFIX = "el"  # callback_data: el:<nonce>:<choice index>
NOT_YOURS = "Only the person whose message started this can answer."
CLOSED = "This question is closed."
TAP = "Tap a button, or type your answer."
TAP_ONLY = "Tap a button."
TEXT_MAX = 3500  # of a server's text in one question (a Telegram message holds 4096)


@dataclass
class _Open:
    """The chat's open question and, once answered, the answer."""

    user: int
    nonce: str
    question: Question
    message_id: int = 0
    answer: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def resolve(self, answer: str) -> None:
        if not self.done.is_set():
            self.answer = answer
            self.done.set()


def parse_data(data: str) -> tuple[str, int] | None:
    """(nonce, choice index) from a button's callback_data, or None if not ours."""
    parts = data.split(":")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[2].isdecimal():
        return None
    return parts[1], int(parts[2])


class TelegramDialog:
    """Questions through the channel's bot; answers arrive through `take_*` from the poller."""

    def __init__(self, bot: Any) -> None:
        self.bot = bot
        self._open: dict[int, _Open] = {}
        self._locks: dict[int, anyio.Lock] = {}
        self._tg: Any = None  # the channel's task group, for answering presses

    def start(self, tg: Any) -> None:
        self._tg = tg

    async def ask(self, caller: Caller, question: Question) -> str:
        chat, user = int(caller.chat_id), int(caller.user_id)
        lock = self._locks.setdefault(chat, anyio.Lock())
        async with lock:
            op = _Open(user, secrets.token_hex(6), question)
            # Open before the send: the user's answer can be polled while sendMessage's
            # response is still on its way back.
            self._open[chat] = op
            try:
                op.message_id = await self._send(chat, op)
                await op.done.wait()
            finally:
                del self._open[chat]
                with anyio.CancelScope(shield=True):
                    await self._close_keyboard(chat, op)
            assert op.answer is not None
            return op.answer

    async def tell(self, caller: Caller, text: str) -> None:
        await self.bot.send_message(chat_id=int(caller.chat_id), text=text[:TEXT_MAX],
                                    parse_mode=None)

    async def _send(self, chat: int, op: _Open) -> int:
        from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

        q = op.question
        markup = None
        if q.choices:
            markup = InlineKeyboardMarkup(inline_keyboard=[
                [InlineKeyboardButton(text=c[:64], callback_data=f"{PREFIX}:{op.nonce}:{i}")]
                for i, c in enumerate(q.choices)])
        hint = (TAP if q.typed else TAP_ONLY) if q.choices else ""
        body = q.text if len(q.text) <= TEXT_MAX else q.text[:TEXT_MAX] + "…"
        text = f"{body}\n\n{hint}" if hint else body
        msg = await self.bot.send_message(chat_id=chat, text=text, reply_markup=markup,
                                          parse_mode=None)
        return int(msg.message_id)

    async def _close_keyboard(self, chat: int, op: _Open) -> None:
        """The buttons of an answered question go, so an old one cannot be pressed again."""
        if not op.question.choices or not op.message_id:
            return
        try:
            await self.bot.edit_message_reply_markup(chat_id=chat, message_id=op.message_id,
                                                     reply_markup=None)
        except Exception as exc:  # cosmetic: a stale button is answered with CLOSED anyway
            log.debug("could not remove a question's buttons", extra={"error": str(exc)})

    # ------------------------------------------------------------------ from the poller

    def take_message(self, chat: int, user: int, text: str, bot_username: str = "") -> bool:
        """Whether a message answers the chat's open question (then it is no turn). /stop
        cancels the question and still stops the turn, so it is not taken. A leading
        @mention of the bot (how a group message addresses it) is no part of the answer."""
        op = self._open.get(chat)
        if op is None or op.user != user:
            return False
        mention = f"@{bot_username}".casefold()
        if bot_username and text.strip().casefold().startswith(mention):
            text = text.strip()[len(mention):].strip()
        word = text.strip().split(maxsplit=1)[0].split("@", 1)[0].lower() if text.strip() else ""
        if word == "/stop":
            op.resolve("/cancel")
            return False
        op.resolve(text)
        return True

    def take_button(self, query: Any) -> None:
        """A button press: the answer if it is this question's and its author's; every press
        is answered (answerCallbackQuery), a stale or foreign one with a short notice."""
        parsed = parse_data(query.data or "")
        op = next((o for o in self._open.values() if parsed and o.nonce == parsed[0]), None)
        if op is None or parsed is None or parsed[1] >= len(op.question.choices):
            notice: str | None = CLOSED
        elif query.from_user is None or query.from_user.id != op.user:
            notice = NOT_YOURS
        else:
            notice = op.question.choices[parsed[1]]
            op.resolve(notice)
        if self._tg is not None:
            self._tg.start_soon(self._answer_query, query.id, notice)

    async def _answer_query(self, query_id: str, text: str | None) -> None:
        try:
            await self.bot.answer_callback_query(callback_query_id=query_id,
                                                 text=(text or "")[:200] or None)
        except Exception as exc:  # the spinner stops by itself after a while
            log.debug("answerCallbackQuery failed", extra={"error": str(exc)})
