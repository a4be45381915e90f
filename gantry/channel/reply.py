"""A reply as stored and delivered: its text, and the files sent after it (see docs/telegram.md).

The agent returns, and the channels store, a reply as one string, so every place that keeps a
reply (the Telegram update row, a cron run) keeps its attachments with it in the same write:
that is what makes attachments exactly-once like the text. A plain reply is its text; a reply
with attachments is MARK followed by JSON. Pure: no IO here.
"""

from __future__ import annotations

import re

import msgspec

MARK = "\x1e"  # ASCII record separator: never the first character of a text reply (pack)
MAX_ATTACHMENTS = 10  # per reply: a model asking for more gets the first ten
CAPTION_MAX = 1000  # Telegram allows 1024 characters of caption
MAX_URL_PHOTOS = 3  # Markdown images in a reply's text sent as photos (see image_urls)
URL_MAX = 2048
_IMAGE = re.compile(r"!\[[^\]\n]*\]\((https://[^\s()<>]+)\)")


class Attachment(msgspec.Struct, frozen=True):
    """A file gantry keeps (gantry.outbox) to send after a reply's text; `photo` when it may
    go as a photo (PNG, JPEG, WebP), else it goes as a document."""

    path: str
    name: str
    mime: str
    size: int
    photo: bool = False
    caption: str = ""


class Reply(msgspec.Struct, frozen=True):
    text: str
    attachments: list[Attachment] = []


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Reply)


def pack(text: str, attachments: list[Attachment] | tuple[Attachment, ...] = ()) -> str:
    """The stored form of a reply: the text itself when there is nothing else (and it cannot
    be mistaken for a packed one), else MARK + JSON."""
    if not attachments and not text.startswith(MARK):
        return text
    reply = Reply(text, list(attachments)[:MAX_ATTACHMENTS])
    return MARK + _encoder.encode(reply).decode()


def unpack(stored: str) -> Reply:
    """A stored reply back as text and attachments; a malformed packed form is shown as text
    rather than lost (it can only come from a damaged row)."""
    if not stored.startswith(MARK):
        return Reply(stored)
    try:
        return _decoder.decode(stored[len(MARK):])
    except msgspec.DecodeError:
        return Reply(stored[len(MARK):])


def text_of(stored: str) -> str:
    """Only the text of a stored reply (what a log line or a test compares)."""
    return unpack(stored).text


def image_urls(text: str) -> list[str]:
    """The https images a reply's text shows in Markdown (`![alt](https://…)`), each once,
    at most MAX_URL_PHOTOS: Telegram fetches them itself, gantry downloads nothing. Plain
    links and any other scheme are left as text."""
    out: list[str] = []
    for url in _IMAGE.findall(text):
        if url not in out and len(url) <= URL_MAX:
            out.append(url)
    return out[:MAX_URL_PHOTOS]
