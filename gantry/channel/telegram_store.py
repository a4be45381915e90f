"""SQLite state behind Telegram's exactly-once delivery (see docs/telegram.md).

An update is *accepted* (row written and offset advanced in one transaction) before
Telegram is told it was received, *replied* once the agent's answer is stored, and
*answered* when every part is delivered. A restart resumes whatever is not answered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import msgspec


class Pending(msgspec.Struct):
    update_id: int
    chat_id: int
    user_id: int
    message_id: int
    text: str
    reply: str | None
    sent_parts: int
    stream_msgs: list[int]


class Accepted(msgspec.Struct, frozen=True):
    update_id: int
    chat_id: int
    user_id: int
    message_id: int
    text: str
    reply: str | None = None  # preset for updates answered without the agent (non-text)


class TelegramStore:
    def __init__(self, conn: object) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return list(self.conn.execute(sql, params))  # type: ignore[attr-defined]

    def next_offset(self) -> int:
        rows = self._rows("SELECT next_offset FROM telegram_state WHERE id = 1")
        return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]

    def accept(self, updates: Sequence[Accepted], next_offset: int) -> None:
        """Record accepted updates and the new offset atomically (duplicates ignored)."""
        now = time.time()
        with self.conn:  # type: ignore[attr-defined]
            for u in updates:
                self._rows(
                    "INSERT OR IGNORE INTO telegram_update (update_id, chat_id, user_id, "
                    "message_id, text, state, reply, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (u.update_id, u.chat_id, u.user_id, u.message_id, u.text,
                     "accepted" if u.reply is None else "replied", u.reply, now),
                )
            self._rows(
                "INSERT INTO telegram_state (id, next_offset) VALUES (1, ?) ON CONFLICT (id) "
                "DO UPDATE SET next_offset = max(next_offset, excluded.next_offset)",
                (next_offset,),
            )

    def pending_chats(self) -> list[int]:
        rows = self._rows(
            "SELECT DISTINCT chat_id FROM telegram_update WHERE state != 'answered' ORDER BY 1"
        )
        return [int(r[0]) for r in rows]  # type: ignore[call-overload]

    def next_pending(self, chat_id: int) -> Pending | None:
        """The oldest unanswered update of a chat (per-chat arrival order)."""
        rows = self._rows(
            "SELECT update_id, chat_id, user_id, message_id, text, reply, sent_parts, "
            "stream_msgs FROM telegram_update WHERE chat_id = ? AND state != 'answered' "
            "ORDER BY update_id LIMIT 1",
            (chat_id,),
        )
        if not rows:
            return None
        r = rows[0]
        return Pending(
            int(r[0]), int(r[1]), int(r[2]), int(r[3]), str(r[4]),  # type: ignore[call-overload]
            None if r[5] is None else str(r[5]), int(r[6]),  # type: ignore[call-overload]
            [int(x) for x in json.loads(str(r[7]))],
        )

    def set_reply(self, update_id: int, reply: str) -> None:
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET reply = ?, state = 'replied' WHERE update_id = ?",
                (reply, update_id),
            )

    def set_stream_msgs(self, update_id: int, message_ids: Sequence[int]) -> None:
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET stream_msgs = ? WHERE update_id = ?",
                (json.dumps(list(message_ids)), update_id),
            )

    def mark_sent(self, update_id: int, parts: int, total: int) -> None:
        """Record delivered parts; the update is answered when all `total` are out."""
        state = "answered" if parts >= total else "replied"
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET sent_parts = ?, state = ?, "
                "answered_at = CASE WHEN ? = 'answered' THEN ? ELSE answered_at END "
                "WHERE update_id = ?",
                (parts, state, state, time.time(), update_id),
            )

    def prune(self, keep_seconds: float = 7 * 86400) -> None:
        """Forget answered updates older than a week (offsets make them unreachable)."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "DELETE FROM telegram_update WHERE state = 'answered' AND answered_at < ?",
                (time.time() - keep_seconds,),
            )
