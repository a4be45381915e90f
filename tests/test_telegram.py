"""Telegram channel pieces in-process: the exactly-once store, reply parts, push."""

from __future__ import annotations

from pathlib import Path

import pytest

from gantry import db
from gantry.channel.telegram import TelegramChannel, parts_for
from gantry.channel.telegram_store import Accepted, TelegramStore
from gantry.channel.tgformat import utf16_len
from tests.fakes.telegram import FakeTelegram

TOKEN = "123456789:AAE_fake-token-for-tests-only_xyz"


def test_store_accept_is_atomic_and_idempotent(tmp_path: Path) -> None:
    store = TelegramStore(db.connect(tmp_path / "g.db"))
    assert store.next_offset() == 0
    batch = [Accepted(10, 1, 1, 5, "a"), Accepted(11, 2, 2, 6, "b"), Accepted(12, 1, 1, 7, "c")]
    store.accept(batch, 13)
    store.accept(batch[:1], 11)  # a redelivered batch: nothing doubles, offset never goes back
    assert store.next_offset() == 13
    assert store.pending_chats() == [1, 2]
    row = store.next_pending(1)
    assert row is not None and (row.update_id, row.text, row.reply) == (10, "a", None)
    store.set_reply(10, "reply")
    store.mark_sent(10, 1, 2)
    row = store.next_pending(1)
    assert row is not None and (row.update_id, row.sent_parts) == (10, 1)
    store.mark_sent(10, 2, 2)
    row = store.next_pending(1)
    assert row is not None and row.update_id == 12  # arrival order within the chat


def test_non_text_rows_arrive_with_their_reply(tmp_path: Path) -> None:
    store = TelegramStore(db.connect(tmp_path / "g.db"))
    store.accept([Accepted(1, 9, 9, 1, "", reply="text only")], 2)
    row = store.next_pending(9)
    assert row is not None and row.reply == "text only"


def test_parts_for_long_markdown() -> None:
    reply = "**Title**\n\n" + "\n\n".join("para " * 300 for _ in range(8))
    parts = parts_for(reply)
    assert len(parts) >= 3 and all(utf16_len(p.text) <= 4096 for p in parts)
    assert parts[0].entities and parts[0].entities[0].type == "bold"
    assert not parts[0].text.startswith("**")
    assert parts_for("   ")[0].text == "(empty reply)"


@pytest.mark.anyio
async def test_push_only_to_allowlisted_chats(tmp_path: Path) -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        ch = TelegramChannel(TOKEN, (42,), db.connect(tmp_path / "g.db"), api_url=tg.base_url)
        try:
            await ch.push("42", "*reminder*: stretch")
            with pytest.raises(PermissionError):
                await ch.push("43", "nope")
        finally:
            await ch.bot.session.close()
        assert tg.sent_texts(42) == ["reminder: stretch"]
        assert tg.sent(43) == []


@pytest.mark.anyio
async def test_push_resumes_after_the_parts_already_sent(tmp_path: Path) -> None:
    """Cron's exactly-once push: parts before `sent` are skipped, each new one is reported."""
    text = "\n\n".join(f"part {i} " + "word " * 700 for i in range(3))
    parts = parts_for(text)
    assert len(parts) == 3
    async with FakeTelegram(token=TOKEN) as tg:
        ch = TelegramChannel(TOKEN, (42,), db.connect(tmp_path / "g.db"), api_url=tg.base_url)
        seen: list[tuple[int, int]] = []
        try:
            await ch.push("42", text, sent=1, progress=lambda d, t: seen.append((d, t)))
            await ch.push("42", text, sent=3, progress=lambda d, t: seen.append((d, t)))
        finally:
            await ch.bot.session.close()
        assert tg.sent_texts(42) == [parts[1].text, parts[2].text]
        assert seen == [(2, 3), (3, 3), (3, 3)]
    assert ch.can_push("42") and not ch.can_push("-10042") and not ch.can_push("x")
