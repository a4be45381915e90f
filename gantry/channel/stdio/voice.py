"""The REPL's `/voice`: the last reply spoken (gantry.media.speech) into an OGG/Opus file
under DATA_DIR/media, and its path printed, since a terminal cannot play a voice note."""

from __future__ import annotations

import os
import time
from typing import Any

from gantry.media.files import media_dir
from gantry.media.speech import SpeechFailed
from gantry.media.spoken import spoken_text

VOICE_HELP = "/voice — the last reply spoken into a file (its path is printed)"
VOICE_MARK = "[voice] "
UNSET = "Voice is not set up: set LLM_SPEECH_MODEL (for example tts-1)."
NOTHING_YET = "Nothing to speak yet: /voice speaks the last reply."
NOTHING_TO_SAY = "The last reply has nothing to say aloud (only code or links)."


def is_voice(text: str) -> bool:
    words = text.strip().split()
    return bool(words) and words[0].lower() == "/voice"


async def speak_last(speaker: Any, reply: str | None, data_dir: str) -> str:
    """The line the REPL prints for `/voice`: the file's path and length, or why not."""
    if speaker is None:
        return UNSET
    if not reply:
        return NOTHING_YET
    said = spoken_text(reply, speaker.max_chars)
    if not said:
        return NOTHING_TO_SAY
    try:
        speech = await speaker(said)
    except SpeechFailed as exc:
        return f"No voice: {exc}."
    folder = media_dir(data_dir)
    path = folder / f"voice-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 1000000:06d}.ogg"
    part = path.with_suffix(".part")
    part.write_bytes(speech.data)
    os.replace(part, path)  # whole or not at all
    return f"{VOICE_MARK}{path} (audio/ogg, {len(speech.data)} B, {speech.seconds:.1f} s)"
