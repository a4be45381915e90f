"""The fake Telegram server, driven by the real aiogram Bot over real sockets.

If these pass, the fake speaks the Bot API closely enough that aiogram's encoding and its
error mapping (retry-after, conflict, bad request, network) behave as against Telegram.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramConflictError,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.methods import SendSticker
from aiogram.types import BotCommand, MessageEntity, ReplyParameters

from gantry.channel.telegram.format import render_markdown, to_aiogram
from tests.fakes.telegram import CANT_PARSE, NOT_MODIFIED, FakeTelegram, FaultKind

TOKEN = "123456789:AAtest-token-abcdefghijklmnopqrstuv"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _bot(base_url: str, token: str = TOKEN) -> Bot:
    return Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(base_url)))


@asynccontextmanager
async def _env(**kwargs: Any) -> AsyncIterator[tuple[FakeTelegram, Bot]]:
    async with FakeTelegram(**kwargs) as tg:
        bot = _bot(tg.base_url)
        try:
            yield tg, bot
        finally:
            await bot.session.close()


@pytest.mark.anyio
async def test_get_me_and_setup_calls() -> None:
    async with _env() as (tg, bot):
        me = await bot.get_me()
        assert me.is_bot and me.username == "gantry_test_bot"
        assert await bot.delete_webhook(drop_pending_updates=True)
        assert await bot.set_my_commands([BotCommand(command="reset", description="Forget")])
        assert await bot.send_chat_action(chat_id=7, action="typing")
        assert tg.commands == [{"command": "reset", "description": "Forget"}]
        assert [c.method for c in tg.calls()] == [
            "getMe",
            "deleteWebhook",
            "setMyCommands",
            "sendChatAction",
        ]
        assert tg.calls("deletewebhook")[0].params["drop_pending_updates"] is True
        assert tg.calls("sendChatAction")[0].params == {"chat_id": 7, "action": "typing"}


@pytest.mark.anyio
async def test_send_message_with_entities_and_reply_parameters() -> None:
    async with _env() as (tg, bot):
        rendered = render_markdown("**Hi** 😀 `code` and [link](https://ex.com)")
        msg = await bot.send_message(
            chat_id=7,
            text=rendered.text,
            entities=to_aiogram(rendered.entities),
            reply_parameters=ReplyParameters(message_id=1, allow_sending_without_reply=True),
        )
        assert msg.text == rendered.text
        assert msg.entities is not None and len(msg.entities) == len(rendered.entities)
        params = tg.calls("sendMessage")[0].params
        assert params["chat_id"] == 7
        assert params["entities"] == [e.to_bot_api() for e in rendered.entities]
        assert params["reply_parameters"]["message_id"] == 1
        assert tg.sent_texts(7) == [rendered.text]
        assert tg.sent_texts(8) == []


@pytest.mark.anyio
async def test_numeric_looking_text_stays_a_string() -> None:
    async with _env() as (tg, bot):
        await bot.send_message(chat_id=7, text="12345")
        assert tg.sent_texts(7) == ["12345"]


@pytest.mark.anyio
async def test_telegram_validation_of_text_and_entities() -> None:
    async with _env() as (_tg, bot):
        with pytest.raises(TelegramBadRequest, match="message is too long"):
            await bot.send_message(chat_id=7, text="x" * 4097)
        with pytest.raises(TelegramBadRequest, match="message text is empty"):
            await bot.send_message(chat_id=7, text="   ")
        out_of_range = [MessageEntity(type="bold", offset=1, length=5)]
        with pytest.raises(TelegramBadRequest, match="can't parse entities"):
            await bot.send_message(chat_id=7, text="ab", entities=out_of_range)
        astral = [MessageEntity(type="bold", offset=0, length=2)]
        assert (await bot.send_message(chat_id=7, text="😀", entities=astral)).text == "😀"


@pytest.mark.anyio
async def test_edit_message_text_and_not_modified() -> None:
    async with _env() as (tg, bot):
        msg = await bot.send_message(chat_id=7, text="draft")
        edited = await bot.edit_message_text(text="final", chat_id=7, message_id=msg.message_id)
        assert not isinstance(edited, bool) and edited.text == "final"
        assert tg.sent_texts(7) == ["draft"]
        assert tg.current_texts(7) == ["final"]
        assert tg.sent(7)[0].history == ["draft", "final"]
        with pytest.raises(TelegramBadRequest, match="message is not modified"):
            await bot.edit_message_text(text="final", chat_id=7, message_id=msg.message_id)
        with pytest.raises(TelegramBadRequest, match="message to edit not found"):
            await bot.edit_message_text(text="x", chat_id=7, message_id=999)


@pytest.mark.anyio
async def test_get_updates_offset_confirms_and_allowed_updates_filters() -> None:
    async with _env() as (tg, bot):
        u1 = tg.push_text(user_id=7, text="hello")
        tg.push_text(user_id=7, text="/reset now")
        tg.push_update({"edited_message": tg.message(7, text="edited", edit_date=1)})
        got = await bot.get_updates(offset=0, timeout=0)
        assert [u.update_id for u in got] == [u1["update_id"] + i for i in range(3)]
        assert got[0].message is not None and got[0].message.text == "hello"
        assert got[1].message is not None and got[1].message.entities is not None
        assert got[1].message.entities[0].type == "bot_command"
        assert got[2].edited_message is not None

        again = await bot.get_updates(
            offset=got[1].update_id, timeout=0, allowed_updates=["message"]
        )
        assert [u.update_id for u in again] == [got[1].update_id]
        assert tg.pending_updates == 2
        assert await bot.get_updates(offset=got[2].update_id + 1, timeout=0) == []
        assert tg.pending_updates == 0
        assert tg.confirmed_offset == got[2].update_id + 1


@pytest.mark.anyio
async def test_photo_update_parses() -> None:
    async with _env() as (tg, bot):
        photo = [{"file_id": "f1", "file_unique_id": "u1", "width": 10, "height": 10}]
        tg.push_update({"message": tg.message(7, photo=photo, caption="look")})
        (update,) = await bot.get_updates(timeout=0)
        assert update.message is not None and update.message.photo is not None
        assert update.message.text is None


@pytest.mark.anyio
async def test_long_poll_returns_when_an_update_arrives() -> None:
    async with _env() as (tg, bot):
        poll = asyncio.create_task(bot.get_updates(timeout=5))
        await tg.wait_calls("getUpdates")
        await asyncio.sleep(0.05)
        assert not poll.done()
        started = time.monotonic()
        tg.push_text(user_id=7, text="wake")
        got = await asyncio.wait_for(poll, 3)
        assert [u.message.text for u in got if u.message] == ["wake"]
        assert time.monotonic() - started < 1.0


@pytest.mark.anyio
async def test_long_poll_times_out_empty() -> None:
    async with _env() as (_tg, bot):
        started = time.monotonic()
        assert await bot.get_updates(timeout=1) == []
        assert 0.9 <= time.monotonic() - started < 3


@pytest.mark.anyio
async def test_newer_poll_preempts_older_with_conflict() -> None:
    async with _env() as (tg, bot):
        first = asyncio.create_task(bot.get_updates(timeout=5))
        await tg.wait_calls("getUpdates")
        second = asyncio.create_task(bot.get_updates(timeout=1))
        with pytest.raises(TelegramConflictError, match="terminated by other getUpdates"):
            await asyncio.wait_for(first, 3)
        assert await second == []


@pytest.mark.anyio
async def test_webhook_active_conflicts_until_deleted() -> None:
    async with _env(webhook_active=True) as (_tg, bot):
        with pytest.raises(TelegramConflictError, match="webhook is active"):
            await bot.get_updates(timeout=0)
        await bot.delete_webhook()
        assert await bot.get_updates(timeout=0) == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "method", "exc", "match"),
    [
        ("retry_after", "sendMessage", TelegramRetryAfter, "retry after 3"),
        ("conflict", "getUpdates", TelegramConflictError, "Conflict"),
        ("server_error", "sendMessage", TelegramServerError, "Internal Server Error"),
        ("not_modified", "sendMessage", TelegramBadRequest, "message is not modified"),
        ("cant_parse", "sendMessage", TelegramBadRequest, "can't parse entities"),
        ("dropped", "sendMessage", TelegramNetworkError, None),
        ("dropped", "getUpdates", TelegramNetworkError, None),
    ],
)
async def test_faults_surface_as_aiogram_exceptions(
    kind: FaultKind, method: str, exc: type[Exception], match: str | None
) -> None:
    async with _env() as (tg, bot):
        tg.fail(method, kind, times=2, retry_after=3)

        async def call() -> object:
            if method == "getUpdates":
                return await bot.get_updates(timeout=0)
            return await bot.send_message(chat_id=7, text="hi")

        for _ in range(2):
            with pytest.raises(exc, match=match) as info:
                await call()
            if isinstance(info.value, TelegramRetryAfter):
                assert info.value.retry_after == 3
        await call()  # the fault was N-shot: the third call goes through
        calls = tg.calls(method)
        assert [c.fault for c in calls] == [kind, kind, None]
        assert calls[-1].status == 200
        assert tg.sent_texts(7) == (["hi"] if method == "sendMessage" else [])


@pytest.mark.anyio
async def test_custom_error_fault_and_delay() -> None:
    async with _env() as (tg, bot):
        tg.fail(
            "sendMessage", "error", status=403, description="Forbidden: bot was blocked by the user"
        )
        with pytest.raises(TelegramForbiddenError, match="blocked"):
            await bot.send_message(chat_id=7, text="hi")
        tg.fail("getMe", "server_error", delay=0.3)
        started = time.monotonic()
        with pytest.raises(TelegramServerError):
            await bot.get_me()
        assert time.monotonic() - started >= 0.3


@pytest.mark.anyio
async def test_wrong_token_is_unauthorized() -> None:
    async with FakeTelegram(token=TOKEN) as tg:
        bot = _bot(tg.base_url, token="999:other-token-abcdefghijklmnopqrstuvw")
        try:
            with pytest.raises(TelegramUnauthorizedError):
                await bot.get_me()
        finally:
            await bot.session.close()
        good = _bot(tg.base_url)
        try:
            assert (await good.get_me()).id == tg.bot_user["id"]
        finally:
            await good.session.close()


@pytest.mark.anyio
async def test_unknown_method_json_body_and_multipart() -> None:
    async with FakeTelegram() as tg, aiohttp.ClientSession() as http:
        url = f"{tg.base_url}/bot{TOKEN}"
        async with http.post(f"{url}/sendSticker", json={"chat_id": 7}) as resp:
            assert resp.status == 404
            assert await resp.json() == {"ok": False, "error_code": 404, "description": "Not Found"}

        entities = [{"type": "bold", "offset": 0, "length": 2}]
        body = {"chat_id": 7, "text": "hi", "entities": entities}
        async with http.post(f"{url}/sendMessage", json=body) as resp:
            assert (await resp.json())["result"]["entities"] == entities

        form = aiohttp.FormData()
        form.add_field("chat_id", "7")
        form.add_field("text", "multi")
        form.add_field("entities", json.dumps(entities))
        form.add_field("extra", b"bytes", filename="a.bin")
        async with http.post(f"{url}/sendMessage", data=form) as resp:
            assert resp.status == 200
        params = tg.calls("sendMessage")[-1].params
        assert params["entities"] == entities and params["extra"] == {
            "filename": "a.bin",
            "size": 5,
            "data": b"bytes",  # kept for sendPhoto / sendDocument (media out)
            "content_type": "application/octet-stream",
        }
        assert tg.sent_texts(7) == ["hi", "multi"]

        bot = _bot(tg.base_url)
        try:
            with pytest.raises(TelegramNotFound):
                await bot(SendSticker(chat_id=7, sticker="CAAC"))
        finally:
            await bot.session.close()


@pytest.mark.anyio
async def test_thread_mode_serves_another_loop_and_wakes_across_threads() -> None:
    tg = FakeTelegram()
    base_url = tg.start_in_thread()
    bot = _bot(base_url)
    try:
        poll = asyncio.create_task(bot.get_updates(timeout=5))
        await asyncio.to_thread(tg.wait_calls_sync, "getUpdates")
        threading.Timer(0.05, tg.push_text, kwargs={"user_id": 9, "text": "from thread"}).start()
        got = await asyncio.wait_for(poll, 3)
        assert [u.message.text for u in got if u.message] == ["from thread"]
        await bot.send_message(chat_id=9, text="reply")
        assert await asyncio.to_thread(tg.wait_sent_sync, 9) == ["reply"]
    finally:
        await bot.session.close()
        tg.stop()


def test_wait_helpers_time_out_with_a_clear_message() -> None:
    with FakeTelegram() as tg, pytest.raises(AssertionError, match=r"timed out after 0\.1s"):
        tg.wait_sent_sync(1, timeout=0.1)


def test_fault_constants_match_telegram_wording() -> None:
    assert NOT_MODIFIED.startswith("Bad Request: message is not modified")
    assert CANT_PARSE.startswith("Bad Request: can't parse entities")
