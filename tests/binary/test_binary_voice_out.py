"""Voice out and reactions inside the frozen binary (issue 40): a voice note in gets a voice
note back — speech through the fake model's /audio/speech (a valid OGG/Opus file), checked by
the frozen gantry.media.ogg, sent with sendVoice as audio/ogg and the text as caption — and
the message gets 👀 while it is answered. The REPL's /voice writes the file and prints its
path. The fixtures are tests/binary/test_binary.py's."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from gantry.media.ogg import opus_file
from tests.binary.rootfs import Sandbox
from tests.binary.test_binary import STOP_WAIT, WAIT, _run_env, binds, etc_gantry, start
from tests.fakes.media_samples import ogg

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used through pytest


def test_a_voice_note_gets_a_voice_note_back_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        data = sandbox.new_data_dir("data-voice-out")
        run = start(
            _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:voice",
                     TELEGRAM_ALLOWED_USERS="7", TELEGRAM_API_URL=tg_url,
                     LLM_TRANSCRIBE_MODEL="whisper-1", LLM_SPEECH_MODEL="tts-1"),
            data=data,
        )
        run.wait_stderr('"receiving"')
        fake_openai.transcript = "good morning"
        voice_in = tg.push_voice(7, ogg(5_000), duration=3)["message"]["message_id"]
        tg.wait_calls_sync("sendVoice", 1, timeout=WAIT)
        (voice,) = [f for f in tg.uploads(7) if f.method == "sendVoice"]
        assert voice.content_type == "audio/ogg" and opus_file(voice.data) is not None
        assert voice.caption == "echo: [voice message, 0:03, transcribed]\ngood morning"
        assert fake_openai.speeches[0].response_format == "opus"
        tg.wait_for_sync(lambda: tg.reactions_on(7, voice_in) == [["👀"], []], WAIT,
                         "👀 set, then cleared")
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert "Traceback" not in run.stderr and "123456:voice" not in run.stderr
    finally:
        tg.stop()


def test_repl_voice_writes_the_speech_file_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    data = sandbox.new_data_dir("data-voice-repl")
    run = start(_run_env(fake_openai.base_url, LLM_SPEECH_MODEL="tts-1"), data=data)
    run.send("hello there")
    run.expect("echo: hello there\n")
    run.send("/voice")
    run.expect("[voice] /data/media/voice-")
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    files = sorted((data / "media").glob("voice-*.ogg"))
    assert len(files) == 1 and opus_file(files[0].read_bytes()) is not None
    assert fake_openai.speeches[0].input == "echo: hello there"
    assert "Traceback" not in run.stderr
