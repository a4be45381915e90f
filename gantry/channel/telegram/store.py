"""SQLite state behind Telegram's exactly-once delivery (see docs/telegram.md).

An update is *accepted* (row written and offset advanced in one transaction) before
Telegram is told it was received, *replied* once the agent's answer is stored, and
*answered* when every part is delivered; a follow-up folded into a running turn ends
*folded* (gantry/steer.py: the reply of the turn it joined answers it). A restart
resumes whatever is still accepted or replied. Two other ends exist, so nothing stays
pending forever: *failed* (processing failed unexpectedly MAX_ATTEMPTS times in a row, or
the process died during it MAX_CRASHES times in a row) and *undeliverable* (Telegram
refused the reply for good: bot blocked, chat gone).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import msgspec

PENDING = "state IN ('accepted', 'replied')"
PENDING_COLUMNS = ("update_id, chat_id, user_id, message_id, text, reply, sent_parts, "
                   "stream_msgs, media, media_group, voice")
MAX_ATTEMPTS = 3  # consecutive attempts ending in an ordinary failure before giving up
MAX_CRASHES = 5  # consecutive attempts the process died during before giving up


class NextAttempt(msgspec.Struct, frozen=True):
    """What the retry policy says before an attempt: wait `delay` s, or give up (`give_up`
    says why, and no attempt is made)."""

    delay: float = 0.0
    give_up: str | None = None


def next_attempt(failures: int, crashes: int, delay_first: float,
                 delay_cap: float) -> NextAttempt:
    """The policy for an update after `failures` failed and `crashes` crashed attempts in a row.

    A failure is the update's own doing, so few are allowed. A crash may be anyone's (an
    operator's kill -9, the OOM killer, a restart storm): more are allowed, and each holds
    the next attempt back longer, so a kill landing at a random moment is unlikely to cut
    the same turn again, while a message that really crashes the process is still given up
    (after delays of delay_first, twice that, … capped at delay_cap).
    """
    if failures >= MAX_ATTEMPTS:
        return NextAttempt(give_up=f"failed {failures} times in a row")
    if crashes >= MAX_CRASHES:
        return NextAttempt(give_up=f"was cut by a crash {crashes} times in a row")
    if crashes <= 0:
        return NextAttempt()
    return NextAttempt(delay=min(delay_cap, delay_first * 2 ** (crashes - 1)))


class Pending(msgspec.Struct):
    update_id: int
    chat_id: int
    user_id: int
    message_id: int
    text: str
    reply: str | None
    sent_parts: int
    stream_msgs: list[int]
    media: str = "[]"  # JSON list of gantry.media.kinds.Media, read when the turn runs
    media_group: str | None = None
    voice: bool = False  # the reply is spoken too (gantry.channel.telegram.voice)


class Accepted(msgspec.Struct, frozen=True):
    update_id: int
    chat_id: int
    user_id: int
    message_id: int
    text: str
    reply: str | None = None  # preset for updates answered without the agent (refused media)
    done: bool = False  # finished on arrival, nothing to send (a /stop, handled at once)
    media: str = "[]"
    media_group: str | None = None
    voice: bool = False


def _pending(r: tuple[object, ...]) -> Pending:
    """A Pending from a row of PENDING_COLUMNS."""
    return Pending(
        int(r[0]), int(r[1]), int(r[2]), int(r[3]), str(r[4]),  # type: ignore[call-overload]
        None if r[5] is None else str(r[5]), int(r[6]),  # type: ignore[call-overload]
        [int(x) for x in json.loads(str(r[7]))], str(r[8]),
        None if r[9] is None else str(r[9]), bool(r[10]),
    )


def _arrival_state(u: Accepted) -> str:
    if u.done:
        return "answered"
    return "accepted" if u.reply is None else "replied"


class TelegramStore:
    def __init__(self, conn: object) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return list(self.conn.execute(sql, params))  # type: ignore[attr-defined]

    def next_offset(self) -> int:
        rows = self._rows("SELECT next_offset FROM telegram_state WHERE id = 1")
        return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]

    def accept(self, updates: Sequence[Accepted], next_offset: int,
               stopped: Sequence[int] = (), stopped_reply: str = "") -> None:
        """Record accepted updates and the offset after this batch, atomically; the
        `stopped` updates (their turns stopped by a /stop in the batch) get `stopped_reply`
        in the same transaction, so they are never run again after a restart.

        Exactly-once rests on the stored update ids, not on offsets only growing: a
        redelivered update is recognised by its id and ignored. The offset is simply the one
        after the batch just accepted, because Telegram may restart update ids from a lower
        value after a week without updates. A stored id that comes back for a different
        message is such a restart: the old row, long finished, makes way for the new one.
        """
        now = time.time()
        with self.conn:  # type: ignore[attr-defined]
            for u in updates:
                self._rows(
                    f"DELETE FROM telegram_update WHERE update_id = ? AND NOT ({PENDING}) "
                    "AND (chat_id != ? OR message_id != ?)",
                    (u.update_id, u.chat_id, u.message_id),
                )
                self._rows(
                    "INSERT OR IGNORE INTO telegram_update (update_id, chat_id, user_id, "
                    "message_id, text, state, reply, received_at, answered_at, media, "
                    "media_group, voice) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (u.update_id, u.chat_id, u.user_id, u.message_id, u.text, _arrival_state(u),
                     u.reply, now, now if u.done else None, u.media, u.media_group,
                     int(u.voice)),
                )
            for update_id in stopped:
                self._rows(
                    "UPDATE telegram_update SET reply = ?, state = 'replied', attempts = 0, "
                    "crashes = 0, in_flight = 0, error = NULL WHERE update_id = ? "
                    "AND state = 'accepted'",
                    (stopped_reply, update_id),
                )
            self._rows(
                "INSERT INTO telegram_state (id, next_offset) VALUES (1, ?) ON CONFLICT (id) "
                "DO UPDATE SET next_offset = excluded.next_offset",
                (next_offset,),
            )

    def pending_chats(self) -> list[int]:
        rows = self._rows(
            f"SELECT DISTINCT chat_id FROM telegram_update WHERE {PENDING} ORDER BY 1"
        )
        return [int(r[0]) for r in rows]  # type: ignore[call-overload]

    def next_pending(self, chat_id: int) -> Pending | None:
        """The oldest unfinished update of a chat (per-chat arrival order)."""
        rows = self._rows(
            f"SELECT {PENDING_COLUMNS} FROM telegram_update WHERE chat_id = ? "
            f"AND {PENDING} ORDER BY update_id LIMIT 1",
            (chat_id,),
        )
        if not rows:
            return None
        return _pending(rows[0])

    def album_age(self, chat_id: int, group: str) -> float:
        """Seconds since the newest pending message of an album arrived (a later part may
        still be on its way while this is short)."""
        rows = self._rows(
            "SELECT max(received_at) FROM telegram_update WHERE chat_id = ? AND "
            f"media_group = ? AND {PENDING}", (chat_id, group))
        newest = rows[0][0] if rows else None
        return time.time() - float(newest) if newest is not None else 0.0  # type: ignore[arg-type]

    def gather_album(self, lead: Pending) -> Pending:
        """Fold the album's other pending parts into its first one, in one transaction: their
        files and captions join the lead's row, and they end as answered (the lead's reply
        answers them all). A crash before or after leaves either all parts or the lead alone
        holding the album: the turn is rebuilt whole either way."""
        from gantry.media.kinds import dump, load

        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                "SELECT update_id, text, media FROM telegram_update WHERE chat_id = ? AND "
                "media_group = ? AND update_id > ? AND state = 'accepted' ORDER BY update_id",
                (lead.chat_id, lead.media_group, lead.update_id))
            if not rows:
                return lead
            media = load(lead.media)
            texts = [lead.text] if lead.text else []
            for _id, text, more in rows:
                media += load(str(more))
                if text:
                    texts.append(str(text))
            merged = msgspec.structs.replace(lead, text="\n\n".join(texts), media=dump(media))
            self._rows("UPDATE telegram_update SET text = ?, media = ? WHERE update_id = ?",
                       (merged.text, merged.media, lead.update_id))
            for update_id, _text, _more in rows:
                self._rows(
                    "UPDATE telegram_update SET state = 'answered', answered_at = ?, "
                    "error = NULL WHERE update_id = ?", (time.time(), update_id))
        return merged

    def waiting(self, lead: Pending, limit: int) -> list[Pending]:
        """The chat's updates accepted after `lead` and not yet started, oldest first (the
        follow-ups that may join its turn: gantry.channel.telegram.steer)."""
        rows = self._rows(
            f"SELECT {PENDING_COLUMNS} FROM telegram_update WHERE chat_id = ? "
            "AND update_id > ? AND state = 'accepted' ORDER BY update_id LIMIT ?",
            (lead.chat_id, lead.update_id, limit),
        )
        return [_pending(r) for r in rows]

    def fold(self, update_id: int) -> bool:
        """End a follow-up as folded into the running turn. Only write: the agent calls it in
        the transaction that adds the text to the history. False if it was no longer waiting."""
        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                "UPDATE telegram_update SET state = 'folded', answered_at = ?, error = NULL "
                "WHERE update_id = ? AND state = 'accepted' RETURNING update_id",
                (time.time(), update_id),
            )
        return bool(rows)

    def set_reply(self, update_id: int, reply: str, error: str | None = None) -> None:
        """Store the reply to deliver; `error` set means it stands in for a failed turn.

        Idempotent, and safe inside a caller's transaction (the agent records the answer in
        the history and calls this in the same one: see TelegramChannel._answer)."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET reply = ?, state = 'replied', attempts = 0, "
                "crashes = 0, in_flight = 0, error = ? WHERE update_id = ?",
                (reply, error, update_id),
            )

    def settle_crash(self, update_id: int) -> tuple[int, int]:
        """(failures, crashes) in a row before the next attempt. An attempt still marked in
        flight was cut by the process dying: it is counted as a crash here."""
        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                "UPDATE telegram_update SET crashes = crashes + in_flight, in_flight = 0 "
                "WHERE update_id = ? RETURNING attempts, crashes",
                (update_id,),
            )
        if not rows:
            return 0, 0
        return int(rows[0][0]), int(rows[0][1])  # type: ignore[call-overload]

    def pause_left(self, update_id: int, delay: float) -> float:
        """Seconds still to wait before the next attempt, on a pause of `delay` s that began
        when first asked for: the pause's end is stored, so a restart during it waits only
        for the rest (never longer than `delay`, should the clock have gone back)."""
        now = time.time()
        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                "UPDATE telegram_update SET not_before = coalesce(not_before, ?) "
                "WHERE update_id = ? RETURNING not_before",
                (now + delay, update_id),
            )
        until = float(rows[0][0]) if rows else now  # type: ignore[arg-type]
        return min(delay, max(0.0, until - now))

    def begin_attempt(self, update_id: int) -> None:
        """Mark an attempt in flight before making it, so a crash during it is noticed; the
        pause before it is over (the next one begins anew)."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows("UPDATE telegram_update SET in_flight = 1, not_before = NULL "
                       "WHERE update_id = ?", (update_id,))

    def fail_attempt(self, update_id: int) -> int:
        """The attempt ended in an ordinary failure; the failures in a row now."""
        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                "UPDATE telegram_update SET attempts = attempts + 1, in_flight = 0 "
                "WHERE update_id = ? RETURNING attempts",
                (update_id,),
            )
        return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]

    def undo_attempt(self, update_id: int) -> None:
        """The attempt ended in a way that says nothing about the update (Telegram
        unreachable, shutdown): it counts neither as a failure nor as a crash."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows("UPDATE telegram_update SET in_flight = 0 WHERE update_id = ?",
                       (update_id,))

    def finish(self, update_id: int, state: str, error: str) -> None:
        """End an update as `failed` or `undeliverable`, saying why."""
        assert state in ("failed", "undeliverable")
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET state = ?, error = ?, answered_at = ?, "
                "in_flight = 0 WHERE update_id = ?",
                (state, error[:500], time.time(), update_id),
            )

    def set_stream_msgs(self, update_id: int, message_ids: Sequence[int]) -> None:
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET stream_msgs = ? WHERE update_id = ?",
                (json.dumps(list(message_ids)), update_id),
            )

    def mark_sent(self, update_id: int, parts: int, total: int) -> None:
        """Record delivered parts; the update is answered when all `total` are out (failed,
        if the reply stood in for a turn that kept failing)."""
        done = parts >= total
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE telegram_update SET sent_parts = ?, "
                "state = CASE WHEN ? THEN (CASE WHEN error IS NULL THEN 'answered' "
                "ELSE 'failed' END) ELSE 'replied' END, "
                "answered_at = CASE WHEN ? THEN ? ELSE answered_at END, "
                "in_flight = CASE WHEN ? THEN 0 ELSE in_flight END "
                "WHERE update_id = ?",
                (parts, done, done, time.time(), done, update_id),
            )

    def state(self, update_id: int) -> tuple[str, int, str | None] | None:
        """(state, attempts, error) of one update, for logs and tests."""
        rows = self._rows(
            "SELECT state, attempts, error FROM telegram_update WHERE update_id = ?",
            (update_id,),
        )
        if not rows:
            return None
        r = rows[0]
        return str(r[0]), int(r[1]), None if r[2] is None else str(r[2])  # type: ignore[call-overload]

    def prune(self, keep_seconds: float = 7 * 86400) -> int:
        """Forget finished updates older than a week; how many went."""
        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                f"DELETE FROM telegram_update WHERE NOT ({PENDING}) AND answered_at < ? "
                "RETURNING update_id",
                (time.time() - keep_seconds,),
            )
        return len(rows)
