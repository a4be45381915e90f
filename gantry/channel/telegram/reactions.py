"""Reactions on Telegram, both ways: 👀 on a message gantry has started on (cleared once the
answer is out), and a user's reaction to one of gantry's replies kept as light feedback for
the model's next turn in that chat ("the user reacted 👎 to your previous reply").

A reaction never starts a turn or a model call. It counts only from an allowlisted user, in a
chat gantry answers in, on a message gantry sent as a reply within REACTION_MAX_AGE; anything
else is ignored. Marking is cosmetic: a failed setMessageReaction is logged at debug level and
never touches the turn.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import anyio

from gantry.channel.reply import text_of
from gantry.clip import clip

log = logging.getLogger("gantry.channel.telegram")

WORKING = "👀"  # one of the reactions Telegram allows bots to set
MARK_TIMEOUT = 5.0  # seconds a setMessageReaction may take before it is let go
REACTION_MAX_AGE = 2 * 86400  # a reaction to an older reply of gantry's is stale
CONTEXT_MAX = 5  # reactions shown to one turn, newest first
KEEP_SECONDS = 7 * 86400
QUOTE_CHARS = 120
UPDATE = "message_reaction"


def allowed_updates(base: Sequence[str], enabled: bool) -> list[str]:
    """getUpdates' allowed_updates: Telegram sends reactions only to a bot that names them."""
    return [*base, UPDATE] if enabled else list(base)


def emojis(reaction: Sequence[Any]) -> str:
    """A reaction list (ReactionTypeEmoji, …CustomEmoji, …Paid) as text: "👍", "👍🔥"."""
    out = []
    for r in reaction:
        kind = getattr(r, "type", "")
        if kind == "emoji":
            out.append(str(getattr(r, "emoji", "")))
        elif kind == "custom_emoji":
            out.append("(a custom emoji)")
        elif kind == "paid":
            out.append("⭐")
    return "".join(out)[:64]


def feedback_line(emoji: str, latest: bool, reply: str | None) -> str:
    """One reaction as the model reads it."""
    if latest:
        return f"The user reacted {emoji} to your previous reply."
    quoted = f": «{clip(reply, QUOTE_CHARS)}»" if reply else ""
    return f"The user reacted {emoji} to an earlier reply of yours{quoted}."


class Reactions:
    """Both directions for one TelegramChannel; `enabled` False (TELEGRAM_REACTIONS=false)
    makes every method a no-op, as before reactions existed."""

    def __init__(self, bot: Any, conn: Any, enabled: bool) -> None:
        self.bot = bot
        self.conn = conn
        self.enabled = enabled
        self._marked: set[tuple[int, int]] = set()

    # ------------------------------------------------------------------ gantry's own

    async def mark(self, chat: int, message_id: int) -> None:
        """👀 on a message whose turn begins."""
        if (self.enabled and (chat, message_id) not in self._marked
                and await self._set(chat, message_id, WORKING)):
            self._marked.add((chat, message_id))

    async def clear(self, chat: int, message_id: int) -> None:
        """The answer is out: the 👀 goes."""
        if self.enabled and (chat, message_id) in self._marked:
            self._marked.discard((chat, message_id))
            await self._set(chat, message_id, None)

    async def _set(self, chat: int, message_id: int, emoji: str | None) -> bool:
        from aiogram.types import ReactionTypeEmoji

        reaction = [ReactionTypeEmoji(emoji=emoji)] if emoji else []
        try:
            with anyio.fail_after(MARK_TIMEOUT):
                await self.bot.set_message_reaction(chat_id=chat, message_id=message_id,
                                                    reaction=reaction)
            return True
        except Exception as exc:  # cosmetic: never the turn's concern
            log.debug("setMessageReaction failed", extra={
                "chat_id": chat, "error": f"{type(exc).__name__}: {exc}"})
            return False

    def sent(self, chat: int, message_id: int, update_id: int) -> None:
        """Record a message gantry sent as the reply to `update_id` (reactions to it count).
        After the part is recorded as sent, and never raising: a failure here (a full disk)
        only means a reaction to this message will be ignored."""
        if not self.enabled:
            return
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT OR REPLACE INTO telegram_sent (chat_id, message_id, update_id, "
                    "sent_at) VALUES (?, ?, ?, ?)", (chat, message_id, update_id, time.time()))
        except Exception as exc:
            log.debug("could not record a sent message", extra={
                "chat_id": chat, "error": f"{type(exc).__name__}: {exc}"})

    # ------------------------------------------------------------------ users'

    def take(self, update: Any, *, chat_ok: bool) -> str | None:
        """Store one message_reaction update from an allowlisted user in an accepted chat
        (`chat_ok`, decided by the poller as for messages); why it was ignored, else None.
        Idempotent: a batch taken again after a crash stores the same rows."""
        if not self.enabled:
            return "reactions are off"
        user = getattr(update, "user", None)
        if not chat_ok or user is None:
            return "not from an allowlisted user in a chat gantry answers in"
        chat, message_id = int(update.chat.id), int(update.message_id)
        rows = list(self.conn.execute(
            "SELECT sent_at FROM telegram_sent WHERE chat_id = ? AND message_id = ?",
            (chat, message_id)))
        if not rows:
            return "not a reply of gantry's"
        if time.time() - float(rows[0][0]) > REACTION_MAX_AGE:
            return "a reaction to an old reply"
        emoji = emojis(update.new_reaction or [])
        with self.conn:
            if not emoji:  # taken back before a turn saw it: nothing to tell
                self.conn.execute(
                    "DELETE FROM telegram_reaction WHERE chat_id = ? AND message_id = ? AND "
                    "user_id = ? AND seen = 0", (chat, message_id, user.id))
                return None
            self.conn.execute(
                "INSERT INTO telegram_reaction (chat_id, message_id, user_id, emoji, at, seen) "
                "VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (chat_id, message_id, user_id) DO UPDATE "
                "SET emoji = excluded.emoji, at = excluded.at, seen = 0",
                (chat, message_id, user.id, emoji, time.time()))
        return None

    def context(self, chat: int, user: int) -> tuple[str, list[tuple[int, int]]]:
        """The unseen reactions of `user` in `chat` as lines for the turn's context, and the
        keys to mark seen once the turn's answer is stored."""
        if not self.enabled:
            return "", []
        rows = list(self.conn.execute(
            "SELECT r.message_id, r.emoji, s.update_id, u.reply FROM telegram_reaction r "
            "JOIN telegram_sent s USING (chat_id, message_id) "
            "LEFT JOIN telegram_update u ON u.update_id = s.update_id "
            "WHERE r.chat_id = ? AND r.user_id = ? AND r.seen = 0 ORDER BY r.at DESC LIMIT ?",
            (chat, user, CONTEXT_MAX)))
        if not rows:
            return "", []
        latest = next(iter(self.conn.execute(
            "SELECT max(update_id) FROM telegram_sent WHERE chat_id = ?", (chat,))))[0]

        lines = [feedback_line(str(emoji), update_id == latest,
                               text_of(str(reply)) if reply is not None else None)
                 for _mid, emoji, update_id, reply in reversed(rows)]
        return "\n".join(lines), [(chat, int(r[0])) for r in rows]

    def seen(self, keys: Sequence[tuple[int, int]], user: int) -> None:
        """Inside the transaction that stores the turn's answer: shown once, never again."""
        for chat, message_id in keys:
            self.conn.execute(
                "UPDATE telegram_reaction SET seen = 1 WHERE chat_id = ? AND message_id = ? "
                "AND user_id = ?", (chat, message_id, user))

    def prune(self, keep_seconds: float = KEEP_SECONDS) -> None:
        """Forget sent messages and reactions older than a week (beside the updates')."""
        cutoff = time.time() - keep_seconds
        with self.conn:
            self.conn.execute("DELETE FROM telegram_sent WHERE sent_at < ?", (cutoff,))
            self.conn.execute("DELETE FROM telegram_reaction WHERE at < ?", (cutoff,))
