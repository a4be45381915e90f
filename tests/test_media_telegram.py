"""Media sent on Telegram, end to end in-process: the real channel (aiogram over loopback
HTTP to the fake Bot API, getFile and file downloads included), the real agent and provider
against the fake OpenAI server, which records image parts and transcription requests."""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.telegram import TelegramChannel
from gantry.channel.telegram.poll import NON_TEXT_REPLY
from gantry.media.build import MediaReader
from gantry.media.transcribe import UNSET_REPLY, Transcriber
from gantry.model.client import Provider
from gantry.session import SessionStore
from gantry.tools import Registry
from tests.fakes.media_samples import jpeg, ogg, pdf
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram import TOKEN, USER, running

pytestmark = pytest.mark.anyio

CAP = 200_000


class Bot:
    def __init__(self, tg: FakeTelegram, llm: FakeOpenAI, ch: TelegramChannel,
                 data: Path) -> None:
        self.tg, self.llm, self.ch, self.data = tg, llm, ch, data

    async def replies(self, count: int = 1) -> list[str]:
        return await self.tg.wait_sent(USER, count, timeout=20)

    @property
    def media_files(self) -> list[Path]:
        folder = self.data / "media"
        return sorted(folder.iterdir()) if folder.exists() else []


@contextlib.asynccontextmanager
async def bot(tmp_path: Path, *, transcribe: bool = True, groups: str = "off",
              cap: int = CAP, **keeping: Any) -> AsyncIterator[Bot]:
    async with FakeTelegram(token=TOKEN) as tg, FakeOpenAI() as llm:
        provider = Provider(llm.base_url, "sk-test-123456", "fake-model")
        conn = db.connect(tmp_path / "g.db")
        agent = Agent(model=provider, sessions=SessionStore(conn), tools=Registry(),
                      persona=lambda: "")
        transcriber = Transcriber(llm.base_url, "sk-test-123456", "whisper-1") if transcribe \
            else None
        reader = MediaReader(str(tmp_path / "data"), cap, transcriber, **keeping)
        try:
            async with running(tg, tmp_path / "g.db", respond=agent, conn=conn, media=reader,
                               groups=groups) as ch:
                yield Bot(tg, llm, ch, tmp_path / "data")
        finally:
            await provider.aclose()
            await reader.aclose()


def data_url(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


async def test_photo_with_caption_reaches_the_model_as_the_exact_bytes(tmp_path: Path) -> None:
    photo = jpeg(30_000)
    async with bot(tmp_path) as b:
        b.tg.push_photo(USER, photo, caption="what is on this receipt?")
        (reply,) = await b.replies()
        request = b.llm.last_request
        assert request.image_urls == [data_url(photo)]  # the 1280 px size, not 2560 or a thumb
        text = request.last_user_text
        assert text.endswith("what is on this receipt?")
        assert text.startswith("[photo: 1280×960, 30 KB]")
        assert reply.startswith("echo: [photo")
        assert b.media_files == []  # read and gone: nothing kept of an image
        downloads = b.tg.downloads
        assert len(downloads) == 1 and TOKEN not in downloads[0].path


async def test_album_is_one_turn_with_every_image(tmp_path: Path) -> None:
    one, two = jpeg(5_000, seed=1), jpeg(6_000, seed=2)
    async with bot(tmp_path) as b:
        b.tg.push_photo(USER, one, caption="both of these", media_group_id="alb1")
        b.tg.push_photo(USER, two, media_group_id="alb1")
        await b.replies(1)
        await b.tg.wait_for(lambda: states(b.ch) == ["answered", "answered"], 10, "both done")
        assert len(b.llm.requests) == 1
        assert b.llm.last_request.image_urls == [data_url(one), data_url(two)]
        assert b.tg.sent_texts(USER)[0].endswith("both of these")
        assert len(b.tg.sent(USER)) == 1


async def test_voice_note_is_transcribed_into_the_turn(tmp_path: Path) -> None:
    voice = ogg(4_000)
    async with bot(tmp_path) as b:
        b.llm.transcript = "remind me to call Anna at five"  # type: ignore[attr-defined]
        b.tg.push_voice(USER, voice, duration=7)
        await b.replies()
        (t,) = b.llm.transcriptions
        assert (t.model, t.data, t.authorization) == ("whisper-1", voice, "Bearer sk-test-123456")
        assert b.llm.last_request.last_user_text == (
            "[voice message, 0:07, transcribed]\nremind me to call Anna at five")


async def test_voice_without_transcription_says_what_to_set_and_calls_nothing(
    tmp_path: Path,
) -> None:
    async with bot(tmp_path, transcribe=False) as b:
        b.tg.push_voice(USER, ogg())
        assert await b.replies() == [UNSET_REPLY]
        assert "LLM_TRANSCRIBE_MODEL" in UNSET_REPLY
        assert b.llm.requests == [] and b.tg.calls("getFile") == []


async def test_text_document_is_inlined_fenced_with_its_name(tmp_path: Path) -> None:
    body = "name,amount\nrent,900\n```not a fence end\n"
    async with bot(tmp_path) as b:
        b.tg.push_document(USER, body.encode(), "budget.csv", "text/csv", caption="sum it")
        await b.replies()
        text = b.llm.last_request.last_user_text
        assert text == ("[document: budget.csv]\n````\n" + body.rstrip() + "\n````\n\nsum it")


async def test_pdf_text_is_extracted(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        b.tg.push_document(USER, pdf("Invoice 4711", "Total 99 EUR"), "invoice.pdf",
                           "application/pdf")
        await b.replies()
        text = b.llm.last_request.last_user_text
        assert text.startswith("[document: invoice.pdf, PDF, 2 pages]\n```\n")
        assert "Invoice 4711\n\nTotal 99 EUR" in text


async def test_other_files_are_kept_under_data_dir_and_described(tmp_path: Path) -> None:
    blob = bytes(range(256)) * 10
    async with bot(tmp_path) as b:
        b.tg.push_document(USER, blob, "../../etc/archive.zip", "application/zip")
        await b.replies()
        (kept,) = b.media_files
        assert kept.read_bytes() == blob and kept.name.endswith("-archive.zip")
        assert kept.parent == b.data / "media"
        text = b.llm.last_request.last_user_text
        assert text == f"[file: ../../etc/archive.zip, application/zip, 3 KB, saved at {kept}]"


async def test_announced_oversize_is_refused_without_a_download(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        b.tg.push_document(USER, b"x" * 10, "big.bin", "application/zip", size=CAP + 1)
        (reply,) = await b.replies()
        assert "too large" in reply and "MEDIA_MAX_BYTES" in reply
        assert b.tg.calls("getFile") == [] and b.llm.requests == []


async def test_unannounced_oversize_stops_at_the_cap_and_keeps_nothing(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        b.tg.push_document(USER, b"y" * (CAP * 5), "big.log", "text/plain",
                           announce_size=False)
        (reply,) = await b.replies()
        assert "too large" in reply
        assert b.llm.requests == [] and b.media_files == []
        (download,) = b.tg.downloads
        assert not download.complete  # gantry hung up: the rest was never fetched


async def test_other_kinds_become_bracketed_descriptions(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        m = b.tg.message
        b.tg.push_update({"message": m(USER, location={"latitude": 52.52, "longitude": 13.405})})
        b.tg.push_update({"message": m(USER, sticker={
            "file_id": "s", "file_unique_id": "su", "type": "regular", "width": 512,
            "height": 512, "is_animated": False, "is_video": False, "emoji": "👍"})})
        b.tg.push_update({"message": m(USER, contact={"phone_number": "+49 30 1234",
                                                      "first_name": "Anna"})})
        b.tg.push_update({"message": m(USER, story={"chat": {"id": 1, "type": "channel"},
                                                    "id": 3})})
        replies = await b.replies(4)
        assert replies == ["echo: [location: 52.520000, 13.405000]", "echo: [sticker 👍]",
                           "echo: [contact: Anna, +49 30 1234]", NON_TEXT_REPLY]


async def test_a_reply_carries_the_quoted_text_bounded(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        earlier = b.tg.message(USER, text="word " * 400)
        b.tg.push_update({"message": b.tg.message(USER, text="is that right?",
                                                  reply_to_message=earlier)})
        await b.replies()
        text = b.llm.last_request.last_user_text
        quote, _, rest = text.partition("\n\n")
        assert rest == "is that right?"
        assert quote.startswith("[replying to a message: «word word")
        assert len(quote) < 560 and quote.endswith("…»]")


MENTION = [{"type": "mention", "offset": 0, "length": len("@gantry_test_bot")}]


async def test_groups_follow_telegram_groups_for_media(tmp_path: Path) -> None:
    group = -100123
    async with bot(tmp_path, groups="mention") as b:
        b.tg.push_photo(USER, jpeg(2_000), caption="no mention here", chat_id=group)
        b.tg.push_photo(USER, jpeg(3_000, seed=5), caption="@gantry_test_bot look",
                        chat_id=group, caption_entities=MENTION)
        (reply,) = await b.tg.wait_sent(group, 1, timeout=20)
        assert reply.endswith("@gantry_test_bot look")
        assert len(b.llm.requests) == 1
    (tmp_path / "off").mkdir()
    async with bot(tmp_path / "off") as b:
        b.tg.push_photo(USER, jpeg(3_000), caption="@gantry_test_bot look", chat_id=group,
                        caption_entities=MENTION)
        b.tg.push_text(USER, "private")
        await b.replies()
        assert b.tg.sent(group) == [] and len(b.llm.requests) == 1


async def test_download_failures_never_log_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with bot(tmp_path) as b:
        b.tg.download_status = [500, 404]  # type: ignore[attr-defined]  # then a 404: final
        b.tg.push_photo(USER, jpeg(1_000))
        (reply,) = await b.replies()
        assert "HTTP 404" in reply and b.llm.requests == []
        assert len(b.tg.downloads) == 2  # the 500 was retried
    logged = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records
                       if r.name.startswith("gantry"))  # (the fake server logs its paths)
    assert "download failed" in logged
    assert TOKEN not in logged and TOKEN.split(":")[1] not in logged


def states(ch: TelegramChannel) -> list[str]:
    rows: Any = ch.store.conn.execute(  # type: ignore[attr-defined]
        "SELECT state FROM telegram_update ORDER BY update_id")
    return [str(s) for (s,) in rows]


async def test_a_transcription_service_down_is_said_once_and_calls_no_model(
    tmp_path: Path,
) -> None:
    async with bot(tmp_path) as b:
        b.llm.transcribe_status = 503  # type: ignore[attr-defined]
        b.tg.push_voice(USER, ogg())
        (reply,) = await b.replies()
        assert "could not be transcribed (the service answered HTTP 503)" in reply
        assert b.llm.requests == [] and len(b.llm.transcriptions) == 1
        b.llm.transcribe_status = 200  # type: ignore[attr-defined]
        b.tg.push_voice(USER, ogg(seed=4))  # sent again: read this time
        await b.replies(2)
        assert b.llm.last_request.last_user_text.startswith("[voice message, 0:03")


async def test_a_huge_transcript_is_cut_like_a_document_in_the_request_and_history(
    tmp_path: Path,
) -> None:
    """Issue 35 item 5: a 3,000,000-character transcript reaches neither the model nor the
    stored history whole; it is cut at the document cap and says so."""
    from gantry.media.convert import TEXT_MAX_CHARS, cut_note

    async with bot(tmp_path) as b:
        b.llm.transcript = "spoken words " * 230_770  # type: ignore[attr-defined]  # 3.0 M chars
        b.tg.push_voice(USER, ogg(), duration=9)
        await b.replies()
        text = b.llm.last_request.last_user_text
        head = "[voice message, 0:09, transcribed]\n"
        assert text.startswith(head) and text.endswith(cut_note(TEXT_MAX_CHARS))
        assert len(text) == len(head) + TEXT_MAX_CHARS + len(cut_note(TEXT_MAX_CHARS))
        assert len(b.llm.last_request.raw) < 2 * TEXT_MAX_CHARS
        _, stored = SessionStore(b.ch.store.conn).load(f"telegram:{USER}")  # type: ignore[attr-defined]
        assert max(len(str(m)) for m in stored) < 2 * TEXT_MAX_CHARS


async def test_an_endless_transcription_answer_is_not_read_past_the_byte_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The response body has a byte limit: past it the note is refused with a reply (no
    model call) instead of being read whole into memory."""
    from gantry.media import transcribe

    monkeypatch.setattr(transcribe, "RESPONSE_MAX_BYTES", 100_000)
    async with bot(tmp_path) as b:
        b.llm.transcript = "x" * 200_000  # type: ignore[attr-defined]
        b.tg.push_voice(USER, ogg())
        (reply,) = await b.replies()
        assert reply == ("The voice message could not be transcribed (the transcription "
                         "service sent more than 100,000 bytes).")
        assert b.llm.requests == []


async def test_an_audio_file_is_called_an_audio_file_not_a_voice_message(
    tmp_path: Path,
) -> None:
    """Issue 36 item 13: a Telegram audio file is "an audio file" in every reply about it;
    a voice note stays a voice message."""
    async with bot(tmp_path, transcribe=False) as b:
        b.tg.push_audio(USER, ogg(), name="memo.wav")
        (reply,) = await b.replies()
        assert reply.startswith("I got an audio file, but transcription is not set up")
        assert "voice message" not in reply
    (tmp_path / "2").mkdir()
    async with bot(tmp_path / "2") as b:
        b.llm.transcribe_status = 503  # type: ignore[attr-defined]
        b.tg.push_audio(USER, ogg(), name="memo.wav")
        (reply,) = await b.replies()
        assert reply.startswith("Sorry — the audio file could not be transcribed")
        b.tg.push_voice(USER, ogg(seed=2))
        assert (await b.replies(2))[1].startswith("Sorry — the voice message could not be")


async def test_kept_files_stay_within_their_budget_the_oldest_going_first(
    tmp_path: Path,
) -> None:
    """Issue 35 item 6: files the model cannot read are kept in DATA_DIR/media within
    MEDIA_MAX_TOTAL_BYTES; each new one makes room by removing the oldest, and any past
    MEDIA_KEEP_DAYS goes whatever the room."""
    import os
    import random

    def blob(seed: int) -> bytes:
        return random.Random(seed).randbytes(10_000)

    async with bot(tmp_path, max_total_bytes=25_000) as b:
        for n, name in enumerate(("a.bin", "b.bin", "c.bin"), start=1):
            b.tg.push_document(USER, blob(n), name, "application/octet-stream")
            await b.replies(n)
            assert f"{name}, application/octet-stream, 10 KB, saved at" in (
                b.llm.last_request.last_user_text)
        kept = {p.name.split("-", 1)[1]: p for p in b.media_files}
        assert sorted(kept) == ["b.bin", "c.bin"]  # a.bin, the oldest, made room for c.bin
        assert kept["c.bin"].read_bytes() == blob(3)
        week = 8 * 86400
        os.utime(kept["b.bin"], (kept["b.bin"].stat().st_atime - week,) * 2)  # past 7 days
        b.tg.push_document(USER, b"tiny", "d.bin", "application/octet-stream")
        await b.replies(4)
        assert sorted(p.name.split("-", 1)[1] for p in b.media_files) == ["c.bin", "d.bin"]
        assert sum(p.stat().st_size for p in b.media_files) <= 25_000


async def test_a_file_larger_than_the_kept_budget_gets_a_clear_reply(tmp_path: Path) -> None:
    """A file that cannot be kept even with every older one gone is refused with a reply
    naming the limit: no model call, not left on disk, and nothing older removed for it."""
    async with bot(tmp_path, max_total_bytes=20_000) as b:
        b.tg.push_document(USER, b"\x00" * 5_000, "old.bin", "application/octet-stream")
        await b.replies(1)
        asked = len(b.llm.requests)
        b.tg.push_document(USER, b"\x01" * 30_000, "huge.bin", "application/octet-stream")
        reply = (await b.replies(2))[1]
        assert reply == ("huge.bin (30 KB) is too large to keep: files I keep for you may take "
                         "20 KB in all (MEDIA_MAX_TOTAL_BYTES).")
        assert len(b.llm.requests) == asked
        assert [p.name.split("-", 1)[1] for p in b.media_files] == ["old.bin"]
