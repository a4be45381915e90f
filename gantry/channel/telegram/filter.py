"""Which Telegram chats gantry answers in: private chats, and groups only if the operator says.

gantry is one person's agent: its persona, memory and tools are theirs, and a reply in a
group is read by every member. So groups, supergroups and channels are ignored unless
TELEGRAM_GROUPS=mention, and then only messages that address the bot are answered.

Pure functions over aiogram's Message (duck-typed; aiogram is not imported here).
"""

from __future__ import annotations

import time
from typing import Any

GROUP_CHATS = frozenset({"group", "supergroup"})


def _utf16_slice(text: str, offset: int, length: int) -> str:
    """text[offset:offset+length] in UTF-16 units, the unit of Telegram's entity offsets."""
    raw = text.encode("utf-16-le", "surrogatepass")
    return raw[2 * offset : 2 * (offset + length)].decode("utf-16-le", "replace")


def addressed(msg: Any, bot_id: int, bot_username: str) -> bool:
    """True if `msg` mentions the bot (`@username`, a text mention, `/cmd@username`) or
    replies to one of the bot's own messages."""
    reply = getattr(msg, "reply_to_message", None)
    author = getattr(reply, "from_user", None)
    if author is not None and author.id == bot_id:
        return True
    if msg.text is not None:
        text, entities = msg.text, msg.entities
    else:
        text, entities = msg.caption, msg.caption_entities
    if not text or not entities:
        return False
    handle = "@" + bot_username.lower() if bot_username else None
    for e in entities:
        if e.type == "text_mention" and e.user is not None and e.user.id == bot_id:
            return True
        if handle is None or e.type not in ("mention", "bot_command"):
            continue
        piece = _utf16_slice(text, e.offset, e.length).lower()
        if piece == handle or (e.type == "bot_command" and piece.endswith(handle)):
            return True
    return False


class LogOnce:
    """Says when a key (a user or chat id) is due to be logged again: once per `every`
    seconds. At most `cap` keys are remembered, oldest dropped first, so a flood of
    distinct ids cannot grow memory; it can only log a little more often."""

    def __init__(self, every: float = 3600.0, cap: int = 1024) -> None:
        self.every = every
        self.cap = cap
        self._last: dict[int, float] = {}

    def due(self, key: int, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            return False
        self._last.pop(key, None)
        self._last[key] = now  # re-inserted: insertion order stays oldest-first
        while len(self._last) > self.cap:
            del self._last[next(iter(self._last))]
        return True

    def expire(self, now: float | None = None) -> None:
        """Forget keys whose hour is over (they would be logged again anyway)."""
        now = time.monotonic() if now is None else now
        for key, at in list(self._last.items()):
            if now - at >= self.every:
                del self._last[key]

    def __len__(self) -> int:
        return len(self._last)
