"""Voice out (issue 40, item 2): what is read aloud (pure, property-tested), the OGG/Opus check,
the speech client against the fake model server's `/audio/speech`, and the Telegram channel
end to end in-process: a voice note in gets sendVoice (multipart, audio/ogg) plus the text,
`/voice on|off` per chat and kept, speech down → the text alone, logged once. The REPL's
`/voice` writes the file and prints its path."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry import db
from gantry.agent import Agent
from gantry.channel.stdio import StdioChannel
from gantry.channel.telegram import TelegramChannel
from gantry.channel.telegram.voice import VOICE_OFF, VOICE_ON, VOICE_UNSET, voice_command
from gantry.media.build import MediaReader
from gantry.media.ogg import opus_file, page_crc
from gantry.media.speech import Speaker, SpeechFailed
from gantry.media.spoken import spoken_text
from gantry.media.transcribe import Transcriber
from gantry.model.client import Provider
from gantry.session import SessionStore
from gantry.tools import Registry
from tests.fakes.media_samples import ogg, ogg_opus
from tests.fakes.openai import FakeOpenAI, Reply
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram import USER, running

KEY = "sk-test-123456"

# ------------------------------------------------------------------ what is read aloud

prose = st.text(st.characters(categories=("L", "Zs"), exclude_characters="\u2028\u2029"),
                max_size=300)


@given(st.text(max_size=600), st.integers(50, 400))
@settings(max_examples=300, deadline=None)
def test_spoken_text_is_bounded_and_never_reads_code_fences_or_addresses(
        text: str, cap: int) -> None:
    said = spoken_text(text, cap)
    assert len(said) <= cap
    assert "```" not in said and "://" not in said and "`" not in said
    assert said == said.strip()


@given(st.lists(prose, min_size=1, max_size=4), st.text(max_size=80),
       st.sampled_from(["https://example.org/a?b=c", "http://x.y/", "www.example.com/path"]))
@settings(max_examples=200, deadline=None)
def test_code_blocks_and_links_are_left_out_and_the_words_stay(
        words: list[str], code: str, url: str) -> None:
    sentence = " ".join(w.strip() for w in words if w.strip()) or "hello"
    code = code.replace("`", "'").replace("~", "-")
    md = (f"{sentence}\n\n```python\n{code}\nrm -rf {url}\n```\n\nSee [the page]({url}) or "
          f"{url} there.")
    said = spoken_text(md, 10_000)
    assert url not in said and "rm -rf" not in said
    assert said.startswith(" ".join(sentence.split()))
    assert said.endswith("See the page or there.")


@given(prose, st.integers(50, 300))
@settings(max_examples=200, deadline=None)
def test_plain_prose_is_spoken_as_written_up_to_the_cap(text: str, cap: int) -> None:
    said = spoken_text(text, cap)
    plain = " ".join(text.split())
    if len(plain) <= cap:
        assert said == plain
    else:
        assert plain.startswith(said) and len(said) >= cap // 2 - 1


def test_long_replies_are_cut_after_a_sentence() -> None:
    text = "First sentence here. " * 10 + "The end"
    said = spoken_text(text, 100)
    assert said.endswith("here.") and len(said) <= 100


def test_markdown_marks_are_not_read() -> None:
    md = "# Title\n\n**Bold** and *it* and `ls -l`.\n\n- one\n- two\n\n> quoted\n\n---\n"
    assert spoken_text(md, 500) == "Title\nBold and it and ls -l.\none\ntwo\nquoted"


def test_only_code_says_nothing() -> None:
    assert spoken_text("```\nprint(1)\n```\n<https://example.org>", 500) == ""


@pytest.mark.parametrize(("text", "arg"), [
    ("/voice", ""), ("/voice on", "on"), ("/VOICE@gantry_bot Off", "off"), ("/voices", None),
    ("voice on", None), ("/voice  maybe later", "maybe later")])
def test_voice_command(text: str, arg: str | None) -> None:
    assert voice_command(text) == arg


# ------------------------------------------------------------------ OGG/Opus

def test_the_fake_speech_is_valid_ogg_opus_page_by_page() -> None:
    """Checked here without gantry's reader: each page's capture pattern and checksum."""
    data = ogg_opus(3.0)
    pos, pages = 0, 0
    while pos < len(data):
        assert data[pos:pos + 4] == b"OggS"
        count = data[pos + 26]
        size = sum(data[pos + 27:pos + 27 + count])
        end = pos + 27 + count + size
        page = bytearray(data[pos:end])
        stored = int.from_bytes(page[22:26], "little")
        page[22:26] = bytes(4)
        assert page_crc(bytes(page)) == stored
        pos, pages = end, pages + 1
    assert data[28:36] == b"OpusHead"
    found = opus_file(data)
    assert found is not None and found.seconds == 3.0 and found.pages == pages


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_opus_check_never_raises_and_rejects_noise(data: bytes) -> None:
    assert opus_file(data) is None


@given(st.integers(0, 2000), st.integers(0, 255))
@settings(max_examples=200, deadline=None)
def test_one_flipped_byte_is_caught(where: int, flip: int) -> None:
    data = bytearray(ogg_opus(1.0))
    where %= len(data)
    if flip == 0 or (data[where] ^ flip) == data[where]:
        return
    data[where] ^= flip
    found = opus_file(bytes(data))
    assert found is None or found.seconds >= 0  # the CRC catches it, or it was a padding byte


def test_mp3_and_the_old_fake_voice_note_are_not_opus() -> None:
    assert opus_file(b"ID3\x03\x00" + bytes(500)) is None
    assert opus_file(ogg()) is None


# ------------------------------------------------------------------ the speech client

pytestmark = pytest.mark.anyio


async def test_speaker_asks_for_opus_and_checks_what_comes_back() -> None:
    async with FakeOpenAI() as llm:
        speaker = Speaker(llm.base_url, KEY, "tts-1", "nova", max_chars=60)
        try:
            speech = await speaker("Hello there. " * 10)
            (req,) = llm.speeches
            assert (req.model, req.voice, req.response_format) == ("tts-1", "nova", "opus")
            assert req.authorization == f"Bearer {KEY}" and len(req.input) == 60
            assert speech.chars == 60 and speech.seconds == 3.0
            assert opus_file(speech.data) is not None
            llm.speech_status = 503
            with pytest.raises(SpeechFailed, match="HTTP 503"):
                await speaker("again")
            llm.speech_status, llm.speech_body = 200, b"ID3" + bytes(100)
            with pytest.raises(SpeechFailed, match="no OGG/Opus audio"):
                await speaker("mp3 instead")
            llm.speech_body = ogg_opus(30)
            speaker.max_bytes = 1000
            with pytest.raises(SpeechFailed, match="more than 1,000 bytes"):
                await speaker("too long")
        finally:
            await speaker.aclose()


async def test_speaker_unreachable_is_one_line_without_the_key() -> None:
    speaker = Speaker("http://127.0.0.1:9/v1", KEY, "tts-1", "alloy", timeout=5)
    with pytest.raises(SpeechFailed) as got:
        await speaker("hello")
    assert "not reachable" in str(got.value) and KEY not in str(got.value)
    await speaker.aclose()


# ------------------------------------------------------------------ Telegram, in-process

class Bot:
    def __init__(self, tg: FakeTelegram, llm: FakeOpenAI, ch: TelegramChannel) -> None:
        self.tg, self.llm, self.ch = tg, llm, ch

    async def voices(self, count: int = 1) -> list[Any]:
        await self.tg.wait_calls("sendVoice", count, timeout=20)
        return [f for f in self.tg.uploads(USER) if f.method == "sendVoice"]


@contextlib.asynccontextmanager
async def bot(tmp_path: Path, *, speech: bool = True, db_name: str = "g.db",
              llm: FakeOpenAI | None = None, first_update: int = 100_000,
              **kw: Any) -> AsyncIterator[Bot]:
    async with contextlib.AsyncExitStack() as stack:
        tg = await stack.enter_async_context(FakeTelegram(first_update_id=first_update))
        if llm is None:
            llm = await stack.enter_async_context(FakeOpenAI())
        provider = Provider(llm.base_url, KEY, "fake-model")
        conn = db.connect(tmp_path / db_name)
        agent = Agent(model=provider, sessions=SessionStore(conn), tools=Registry(),
                      persona=lambda: "")
        reader = MediaReader(str(tmp_path / "data"), 200_000,
                             Transcriber(llm.base_url, KEY, "whisper-1"))
        speaker = Speaker(llm.base_url, KEY, "tts-1", "alloy", max_chars=300) if speech \
            else None
        try:
            async with running(tg, tmp_path / db_name, respond=agent, conn=conn, media=reader,
                               speech=speaker, **kw) as ch:
                yield Bot(tg, llm, ch)
        finally:
            await provider.aclose()
            await reader.aclose()


async def test_a_voice_note_gets_a_voice_note_back_with_the_text_as_caption(
        tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        b.llm.transcript = "what's the weather"  # type: ignore[attr-defined]
        b.llm.push(Reply("Sunny, **22 °C**. Details: [forecast](https://weather.example/x)"))
        b.tg.push_voice(USER, ogg())
        (voice,) = await b.voices()
        call = b.tg.calls("sendVoice")[0]
        assert voice.content_type == "audio/ogg" and opus_file(voice.data) is not None
        assert voice.caption == "Sunny, 22 °C. Details: forecast"
        assert call.params["caption_entities"][0]["type"] == "bold"
        assert call.params["duration"] >= 1
        (speech,) = b.llm.speeches
        assert speech.input == "Sunny, 22 °C. Details: forecast"
        assert b.tg.sent_texts(USER) == []  # the text went as the caption, not twice
        await b.tg.wait_for(lambda: states(b.ch) == ["answered"], what="answered")


async def test_a_long_reply_is_text_then_a_voice_note_of_its_first_part(tmp_path: Path) -> None:
    long = ("This sentence is spoken. " * 60).strip()
    async with bot(tmp_path) as b:
        b.llm.push(Reply(long + "\n\n```\ncode()\n```"))
        b.tg.push_voice(USER, ogg())
        (voice,) = await b.voices()
        assert voice.caption == ""
        assert b.tg.sent_texts(USER)[0].startswith("This sentence is spoken.")
        order = [c.method for c in b.tg.calls() if c.method in ("sendMessage", "sendVoice")]
        assert order == ["sendMessage", "sendVoice"]
        (speech,) = b.llm.speeches
        assert len(speech.input) <= 300 and speech.input.endswith("spoken.")
        assert "code()" not in speech.input


async def test_a_streamed_reply_keeps_its_message_and_the_voice_note_follows(
        tmp_path: Path) -> None:
    async with bot(tmp_path, stream_replies=True) as b:
        b.llm.push(Reply("Short and streamed.", chunk_size=3))
        b.tg.push_voice(USER, ogg())
        (voice,) = await b.voices()
        assert voice.caption == "" and b.tg.current_texts(USER) == ["Short and streamed."]
        await b.tg.wait_for(lambda: states(b.ch) == ["answered"], what="answered")
        assert len(b.tg.sent(USER)) == 1  # the streamed message, edited: not sent again


async def test_speech_down_leaves_the_text_and_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gantry")
    async with bot(tmp_path) as b:
        b.llm.speech_status = 503
        b.tg.push_voice(USER, ogg())
        assert await b.tg.wait_sent(USER, 1, timeout=20) == ["echo: [voice message, 0:03, "
                                                              "transcribed]\na transcribed note"]
        b.tg.push_voice(USER, ogg(seed=3))
        await b.tg.wait_sent(USER, 2, timeout=20)
        await b.tg.wait_for(lambda: states(b.ch) == ["answered", "answered"], what="answered")
        assert b.tg.calls("sendVoice") == [] and len(b.llm.speeches) == 2
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING
              and r.getMessage().startswith("no voice reply")]
    assert len(warned) == 1 and "HTTP 503" in warned[0].__dict__["why"]


async def test_voice_on_is_kept_per_chat_and_off_stops_it(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        b.tg.push_text(USER, "/voice on")
        assert await b.tg.wait_sent(USER, 1) == [VOICE_ON]
        b.tg.push_text(USER, "hello")
        (voice,) = await b.voices()
        assert voice.caption == "echo: hello" and b.llm.speeches[0].input == "echo: hello"
    async with bot(tmp_path, first_update=200_000) as b:  # the same database, a new process
        b.tg.push_text(USER, "/voice")
        assert await b.tg.wait_sent(USER, 1) == [VOICE_ON]
        b.tg.push_text(USER, "again")
        await b.voices()
        b.tg.push_text(USER, "/voice off")
        b.tg.push_text(USER, "quiet now")
        assert (await b.tg.wait_sent(USER, 3, timeout=20))[1:] == [VOICE_OFF, "echo: quiet now"]
        assert len(b.tg.calls("sendVoice")) == 1 and len(b.llm.speeches) == 1
        assert b.llm.requests[-1].last_user_text == "quiet now"  # /voice never reached it


async def test_without_a_speech_model_nothing_is_spoken(tmp_path: Path) -> None:
    async with bot(tmp_path, speech=False) as b:
        b.tg.push_voice(USER, ogg())
        b.tg.push_text(USER, "/voice on")
        texts = await b.tg.wait_sent(USER, 2, timeout=20)
        assert texts[1] == VOICE_UNSET
        assert b.tg.calls("sendVoice") == [] and b.llm.speeches == []


def states(ch: TelegramChannel) -> list[str]:
    rows: Any = ch.store.conn.execute(  # type: ignore[attr-defined]
        "SELECT state FROM telegram_update ORDER BY update_id")
    return [str(s) for (s,) in rows]


# ------------------------------------------------------------------ the REPL's /voice

async def test_repl_voice_writes_the_last_reply_as_a_file_and_prints_its_path(
        tmp_path: Path) -> None:
    async with FakeOpenAI() as llm:
        provider = Provider(llm.base_url, KEY, "fake-model")
        conn = db.connect(tmp_path / "g.db")
        agent = Agent(model=provider, sessions=SessionStore(conn), tools=Registry(),
                      persona=lambda: "")
        speaker = Speaker(llm.base_url, KEY, "tts-1", "alloy")
        reader = MediaReader(str(tmp_path / "data"), 200_000)
        out = io.StringIO()
        ch = StdioChannel(inp=io.StringIO("/voice\nhello there\n/status\n/voice\n"), out=out,
                          media=reader, speech=speaker)
        try:
            await ch.serve(agent, lambda: None)
        finally:
            await provider.aclose()
            await speaker.aclose()
        lines = out.getvalue().splitlines()
        assert lines[0] == "Nothing to speak yet: /voice speaks the last reply."
        assert lines[1] == "echo: hello there"
        voice = lines[-1]
        assert voice.startswith("[voice] ") and "audio/ogg" in voice
        path = Path(voice.removeprefix("[voice] ").split(" (", 1)[0])
        assert path.parent == tmp_path / "data" / "media" and path.suffix == ".ogg"
        assert opus_file(path.read_bytes()) is not None
        assert [s.input for s in llm.speeches] == ["echo: hello there"]  # not /status's
