"""Which Telegram chats gantry answers in: `addressed`, the bounded log throttle, and the
group policy end to end (`gantry run` against the fake Bot API and model)."""

from __future__ import annotations

import signal
import time
from typing import Any

import anyio
import apsw
import pytest
from aiogram.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.channel.telegram.filter import LogOnce, addressed
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram_e2e import STRANGER, USER, fakes, run, wait  # noqa: F401

BOT_ID = 7_000_000_001  # the fake's defaults
BOT = "gantry_test_bot"
GROUP, SUPERGROUP, CHANNEL = -4_000_000_001, -1_001_234_567_890, -1_009_876_543_210


def _chat(chat_id: int, kind: str) -> dict[str, Any]:
    return {"id": chat_id, "type": kind, "title": f"chat{chat_id}"}


def _msg(text: str | None = None, *, entities: list[dict[str, Any]] | None = None,
         reply_from: int | None = None, **extra: Any) -> Message:
    data: dict[str, Any] = {
        "message_id": 10, "date": 0, "chat": _chat(SUPERGROUP, "supergroup"),
        "from": {"id": USER, "is_bot": False, "first_name": "u"}, **extra,
    }
    if text is not None:
        data["text"] = text
    if entities:
        data["entities"] = entities
    if reply_from is not None:
        data["reply_to_message"] = {
            "message_id": 9, "date": 0, "chat": data["chat"], "text": "earlier",
            "from": {"id": reply_from, "is_bot": reply_from == BOT_ID, "first_name": "x"},
        }
    return Message.model_validate(data)


def _mention(text: str, handle: str) -> list[dict[str, Any]]:
    start = text.index(handle)
    units = len(text[:start].encode("utf-16-le")) // 2
    return [{"type": "mention", "offset": units, "length": len(handle)}]


# --- addressed ---------------------------------------------------------------------------


def test_mention_by_username_any_case_and_after_astral_text() -> None:
    for text in (f"@{BOT} hi", f"hey @{BOT.upper()}", f"😀😀 @{BOT}, what's up?"):
        handle = text[text.index("@"):].split()[0].rstrip(",")
        assert addressed(_msg(text, entities=_mention(text, handle)), BOT_ID, BOT), text


def test_other_mentions_and_plain_text_are_not_addressed() -> None:
    text = f"@other_bot and @{BOT}x and {BOT}"
    ents = _mention(text, "@other_bot") + _mention(text, f"@{BOT}x")
    assert not addressed(_msg(text, entities=ents), BOT_ID, BOT)
    # the name in the text without a mention entity (e.g. inside code) does not count
    assert not addressed(_msg(f"@{BOT}"), BOT_ID, BOT)
    assert not addressed(_msg(None, photo=[]), BOT_ID, BOT)


def test_text_mention_command_and_caption() -> None:
    tm = [{"type": "text_mention", "offset": 0, "length": 3,
           "user": {"id": BOT_ID, "is_bot": True, "first_name": "Gantry"}}]
    assert addressed(_msg("bot, hi", entities=tm), BOT_ID, BOT)
    other = [{**tm[0], "user": {"id": 5, "is_bot": False, "first_name": "Al"}}]
    assert not addressed(_msg("Al, hi", entities=other), BOT_ID, BOT)
    cmd = f"/status@{BOT}"
    assert addressed(_msg(cmd, entities=[{"type": "bot_command", "offset": 0,
                                          "length": len(cmd)}]), BOT_ID, BOT)
    bare = [{"type": "bot_command", "offset": 0, "length": 7}]
    assert not addressed(_msg("/status", entities=bare), BOT_ID, BOT)
    caption = f"look @{BOT}"
    photo = [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}]
    assert addressed(_msg(None, photo=photo, caption=caption,
                          caption_entities=_mention(caption, f"@{BOT}")), BOT_ID, BOT)


def test_reply_to_the_bot_is_addressed_reply_to_others_is_not() -> None:
    assert addressed(_msg("yes", reply_from=BOT_ID), BOT_ID, BOT)
    assert not addressed(_msg("yes", reply_from=USER), BOT_ID, BOT)


# --- LogOnce -----------------------------------------------------------------------------


def test_log_once_per_key_per_period() -> None:
    once = LogOnce(every=3600, cap=10)
    assert once.due(1, now=0) and not once.due(1, now=3599) and once.due(1, now=3600)
    assert once.due(2, now=10) and not once.due(2, now=20)


@given(st.lists(st.integers(-50, 50), max_size=300))
@settings(max_examples=100, deadline=None)
def test_log_once_is_bounded_and_never_repeats_a_remembered_key(keys: list[int]) -> None:
    once = LogOnce(every=1e9, cap=8)
    for t, key in enumerate(keys):
        remembered = key in once._last
        assert once.due(key, now=float(t)) is not remembered
        assert len(once) <= 8


# --- push --------------------------------------------------------------------------------


def test_push_refuses_group_chats() -> None:
    from gantry.channel.telegram import TelegramChannel

    ch = TelegramChannel("123:abc", (USER,), conn=None, api_url="http://127.0.0.1:9")

    async def main() -> None:
        try:
            for chat in (GROUP, SUPERGROUP, STRANGER):
                with pytest.raises(PermissionError):
                    await ch.push(str(chat), "scheduled")
        finally:
            await ch.bot.session.close()

    anyio.run(main)


# --- end to end --------------------------------------------------------------------------


def _rows(data_dir: str) -> list[tuple[int, str]]:
    conn = apsw.Connection(f"{data_dir}/gantry.db", flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(int(r[0]), str(r[1])) for r in conn.execute(
            "SELECT chat_id, text FROM telegram_update ORDER BY update_id")]
    finally:
        conn.close()


def _push(tg: FakeTelegram, user: int, chat: int, kind: str, text: str, **fields: Any) -> None:
    if f"@{BOT}" in text:
        fields.setdefault("entities", _mention(text, f"@{BOT}"))
    tg.push_update({"message": tg.message(user, chat, chat=_chat(chat, kind), text=text,
                                          **fields)})


@pytest.mark.slow
def test_groups_are_ignored_by_default(fakes: tuple[FakeTelegram, FakeOpenAI], run) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    tg, llm = fakes
    g = run()
    for chat, kind in ((GROUP, "group"), (SUPERGROUP, "supergroup"), (CHANNEL, "channel")):
        _push(tg, USER, chat, kind, "what is my bank password?")
        _push(tg, USER, chat, kind, f"@{BOT} tell everyone my secrets")
        _push(tg, USER, chat, kind, f"/status@{BOT}",
              entities=[{"type": "bot_command", "offset": 0, "length": 7 + len(BOT) + 1}])
    tg.push_text(USER, "private hello")
    assert tg.wait_sent_sync(USER, 1, timeout=60) == ["echo: private hello"]
    wait(lambda: tg.pending_updates == 0, 10, "every update confirmed")
    time.sleep(0.5)
    for chat in (GROUP, SUPERGROUP, CHANNEL):
        assert tg.sent(chat) == []
        assert not [c for c in tg.calls("sendChatAction") if c.params["chat_id"] == chat]
    assert len(llm.requests) == 1 and llm.last_request.last_user_text == "private hello"
    assert [chat for chat, _ in _rows(g.env["DATA_DIR"])] == [USER]
    g.stop()
    assert g.stderr.count("ignored a message in a group or channel") == 3  # once per chat
    assert "secrets" not in g.stderr and "password" not in g.stderr


@pytest.mark.slow
def test_mention_mode_answers_only_when_addressed(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run,  # noqa: F811
) -> None:
    tg, llm = fakes
    g = run(TELEGRAM_GROUPS="mention")
    _push(tg, USER, SUPERGROUP, "supergroup", "just chatting with friends")
    _push(tg, STRANGER, SUPERGROUP, "supergroup", f"@{BOT} obey me")
    _push(tg, USER, CHANNEL, "channel", f"@{BOT} in a channel")
    _push(tg, USER, SUPERGROUP, "supergroup", f"@{BOT} first question")
    assert tg.wait_sent_sync(SUPERGROUP, 1, timeout=60) == [f"echo: @{BOT} first question"]
    bot_msg = tg.sent(SUPERGROUP)[0]
    reply_to = {"message_id": bot_msg.message_id, "date": 0,
                "chat": _chat(SUPERGROUP, "supergroup"), "from": tg.bot_user,
                "text": bot_msg.text}
    _push(tg, USER, SUPERGROUP, "supergroup", "and a follow-up", reply_to_message=reply_to)
    _push(tg, USER, GROUP, "group", "a basic group, unaddressed")
    _push(tg, USER, GROUP, "group", f"hi @{BOT}")
    assert tg.wait_sent_sync(SUPERGROUP, 2, timeout=30)[1] == (  # the quote comes first
        f"echo: [replying to your message: «echo: @{BOT} first question»]\n\nand a follow-up")
    assert tg.wait_sent_sync(GROUP, 1, timeout=30) == [f"echo: hi @{BOT}"]
    wait(lambda: tg.pending_updates == 0, 10, "every update confirmed")
    time.sleep(0.5)
    assert len(tg.sent(SUPERGROUP)) == 2 and len(tg.sent(GROUP)) == 1
    assert tg.sent(CHANNEL) == [] and tg.sent(STRANGER) == []
    asked = sorted(r.last_user_text.rpartition("\n\n")[2] for r in llm.requests)
    assert asked == sorted([f"@{BOT} first question", "and a follow-up", f"hi @{BOT}"])
    g.stop(signal.SIGTERM)
    assert "not in TELEGRAM_ALLOWED_USERS" in g.stderr
    assert "obey me" not in g.stderr and "chatting" not in g.stderr


@pytest.mark.slow
def test_a_group_turn_is_offered_no_memory_tool_and_runs_none(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run,  # noqa: F811
) -> None:
    """The channel marks a group message, and the model server sees the difference: the
    private turn is offered (and runs) memory_store; the group turn is offered no memory
    tool and its memory_recall is refused, so the private row never reaches the group."""
    tg, llm = fakes
    g = run(TELEGRAM_GROUPS="mention")
    mom = {"kind": "person", "subject": "mom", "content": "prefers calls over texts"}
    llm.push(ToolCalls([Call("memory_store", mom, id="p1")]), Reply("Noted."))
    tg.push_text(USER, "remember: mom prefers calls")
    assert tg.wait_sent_sync(USER, 1, timeout=60) == ["Noted."]
    llm.push(ToolCalls([Call("memory_recall", {"query": "mom"}, id="g1")]), Reply("Ask her."))
    _push(tg, USER, SUPERGROUP, "supergroup", f"@{BOT} what does mom prefer?")
    assert tg.wait_sent_sync(SUPERGROUP, 1, timeout=60) == ["Ask her."]
    assert len(llm.requests) == 4
    private, group = llm.requests[:2], llm.requests[2:]
    names = [t["function"]["name"] for t in private[0].body.get("tools", [])]
    assert {"memory_store", "memory_recall", "memory_forget"} <= set(names), names
    stored = [m["content"] for m in private[1].messages if m["role"] == "tool"]
    assert stored == ["stored #1: (person) mom: prefers calls over texts"]
    for request in group:
        names = [t["function"]["name"] for t in request.body.get("tools", [])]
        assert not [n for n in names if n.startswith("memory_")], names
        assert "prefers calls" not in request.messages[0]["content"]
    refused = [m["content"] for m in group[1].messages if m["role"] == "tool"]
    assert len(refused) == 1 and refused[0].startswith("error: memory_recall is not available")
    assert "prefers calls" not in refused[0]
    g.stop(signal.SIGTERM)
