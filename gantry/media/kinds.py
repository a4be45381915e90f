"""What a message carried, as stored with it: enough to fetch and convert it again later.

A Telegram update keeps its `Media` items (JSON) in its row, so a turn cut by a crash is
rebuilt from the same file ids; nothing downloaded needs to survive the crash.
"""

from __future__ import annotations

import msgspec

KINDS = ("photo", "image", "document", "voice", "audio")


class Media(msgspec.Struct, frozen=True, omit_defaults=True):
    """One file to read: `ref` is how its channel fetches it (a Telegram file id, or the
    local path given to /attach); `key` names it on disk (stable across retries)."""

    kind: str  # one of KINDS ("image": an image sent as a document)
    ref: str
    key: str
    name: str = ""
    mime: str = ""
    size: int | None = None  # as announced by the sender (checked again while downloading)
    width: int | None = None
    height: int | None = None
    duration: int | None = None  # seconds (voice, audio)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(list[Media])


def dump(items: list[Media]) -> str:
    return _encoder.encode(items).decode()


def load(text: str | None) -> list[Media]:
    """Items stored with a row; a row from before media (NULL, '[]') has none."""
    if not text:
        return []
    return _decoder.decode(text)


def human_size(n: int | None) -> str:
    """1.2 MB, 340 KB, 12 B (decimal units, as Telegram shows them)."""
    if n is None:
        return "size unknown"
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    if n >= 1_000:
        return f"{n / 1_000:.0f} KB"
    return f"{n} B"


def duration_text(seconds: int | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds // 60}:{seconds % 60:02d}"


def sound_noun(kind: str, article: bool = False) -> str:
    """What a sound item is called to the user: a voice note is a voice message, anything
    else (an audio file, a .wav given to /attach) is an audio file."""
    if kind == "voice":
        return "a voice message" if article else "voice message"
    return "an audio file" if article else "audio file"
