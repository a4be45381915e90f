"""Voice out and reactions end to end (issue 40): `gantry run` as a subprocess against the fake
Bot API and the fake model (its `/audio/speech` answers a valid OGG/Opus file per request).
A voice note in gets sendVoice (multipart, audio/ogg) with the text as caption; the message
gets 👀 while answered and loses it after; a reaction on the reply makes no model call and
the next turn's request carries it; with the speech service down the text stands, logged
once; with TELEGRAM_REACTIONS=false no setMessageReaction is made."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from gantry.media.ogg import opus_file
from tests.fakes.media_samples import ogg
from tests.fakes.openai import FakeOpenAI, Reply
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram_e2e import USER, answered, fakes, run, states, wait  # noqa: F401

pytestmark = pytest.mark.slow

SPEECH = {"LLM_SPEECH_MODEL": "tts-1", "LLM_SPEECH_VOICE": "nova",
          "LLM_TRANSCRIBE_MODEL": "whisper-1"}


def test_voice_in_voice_out_and_a_reaction_for_the_next_turn(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    tg, llm = fakes
    llm.transcript = "how long to boil an egg"  # type: ignore[attr-defined]
    llm.push(Reply("About **seven minutes** — see [this](https://eggs.example/boil)."))
    g = run(**SPEECH)
    voice_in = tg.push_voice(USER, ogg())["message"]["message_id"]
    tg.wait_calls_sync("sendVoice", 1, timeout=120)
    (voice,) = [f for f in tg.uploads(USER) if f.method == "sendVoice"]
    assert voice.content_type == "audio/ogg" and opus_file(voice.data) is not None
    assert voice.caption == "About seven minutes — see this."
    (speech,) = llm.speeches
    assert (speech.model, speech.voice, speech.response_format) == ("tts-1", "nova", "opus")
    assert speech.input == "About seven minutes — see this."
    assert speech.authorization == "Bearer sk-e2e-secret-key"  # the chat model's key
    wait(lambda: tg.reactions_on(USER, voice_in) == [["👀"], []], 30, "👀 set, then cleared")

    calls = len(llm.requests)
    tg.push_reaction(USER, USER, voice.message_id, ["👎"])
    tg.push_text(USER, "try again")
    sent = tg.wait_sent_sync(USER, 1, timeout=60)
    assert sent == ["echo: try again"]  # text in: text out (voice is not on for the chat)
    assert len(llm.requests) == calls + 1  # the reaction made no call of its own
    last = llm.requests[-1].messages[-1]["content"]
    assert "The user reacted 👎 to your previous reply." in last
    assert all("reacted" not in str(m["content"]) for m in llm.requests[-1].messages
               if m["role"] == "system")
    assert len(tg.calls("sendVoice")) == 1
    wait(lambda: set(states(g.env["DATA_DIR"]).values()) == {"answered"}, 30, "all answered")
    g.stop()
    assert "Traceback" not in g.stderr and "sk-e2e-secret-key" not in g.stderr


def test_speech_down_the_text_stands_logged_once_and_reactions_off(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    tg, _llm = fakes
    g = run(**SPEECH, LLM_SPEECH_BASE_URL="http://127.0.0.1:9/v1", TELEGRAM_REACTIONS="false")
    tg.push_voice(USER, ogg())
    assert tg.wait_sent_sync(USER, 1, timeout=120) == [
        "echo: [voice message, 0:03, transcribed]\na transcribed note"]
    tg.push_voice(USER, ogg(seed=5))
    tg.wait_sent_sync(USER, 2, timeout=60)
    wait(lambda: answered(g.env["DATA_DIR"]) == 2, 30, "both answered")
    time.sleep(0.5)
    g.stop()
    assert tg.calls("sendVoice") == [] and tg.calls("setMessageReaction") == []
    assert "message_reaction" not in tg.calls("getUpdates")[-1].params["allowed_updates"]
    warned = [json.loads(line) for line in g.stderr.splitlines()
              if "no voice reply" in line]
    assert [w["level"] for w in warned] == ["warning", "debug"]  # once, then quietly
    assert "not reachable" in warned[0]["why"]


def test_a_kill_during_the_speech_sends_neither_part_twice(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, tmp_path: Path  # noqa: F811
) -> None:
    """A long reply goes as its text, then the voice note: killed while the speech is made
    (the text already recorded as sent), the next start sends the voice note only."""
    tg, llm = fakes
    long = ("A sentence to be read aloud. " * 60).strip()
    llm.push(Reply(long))
    llm.speech_delay = 60
    g = run(**SPEECH)
    tg.push_voice(USER, ogg())
    wait(lambda: llm.speeches, 120, "the speech asked for")
    assert len(tg.sent_texts(USER)) == 1 and tg.calls("sendVoice") == []
    g.stop(signal.SIGKILL)
    llm.speech_delay = 0
    g2 = run(**SPEECH)
    tg.wait_calls_sync("sendVoice", 1, timeout=120)
    wait(lambda: answered(g2.env["DATA_DIR"]) == 1, 30, "answered")
    assert tg.sent_texts(USER) == [long] and len(tg.calls("sendVoice")) == 1
    assert len(llm.speeches) == 2 and len(llm.requests) == 1  # the turn was not run again
    g2.stop()
    assert "Traceback" not in g2.stderr
