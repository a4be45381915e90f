"""What a Telegram message carries, read into text and `Media` items (gantry.media).

Pure functions over aiogram's Message (duck-typed; aiogram is not imported here). Files are
not fetched here: the items keep their file ids, stored with the update, and are downloaded
when the turn runs (again, if a crash cut it). Kinds the model cannot be given (sticker,
video, contact, poll, …) become a short bracketed description instead of a refusal.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gantry.clip import clip
from gantry.media.convert import IMAGE_MIMES
from gantry.media.kinds import Media, duration_text

PHOTO_MAX_SIDE = 2048  # the largest size vision APIs use (OpenAI scales larger ones down)
QUOTE_MAX_CHARS = 500


class Incoming(msgspec.Struct, frozen=True):
    """A message as the channel stores it: the text of the turn (caption, quote and
    descriptions included), the files to read, the album it belongs to."""

    text: str
    media: list[Media] = []
    media_group: str | None = None


def best_photo(sizes: list[Any]) -> Any:
    """The largest PhotoSize whose longer side is within PHOTO_MAX_SIDE (the smallest if none
    is); Telegram offers several sizes of each photo, so no resizing is needed here."""
    fitting = [s for s in sizes if max(s.width, s.height) <= PHOTO_MAX_SIDE]
    if fitting:
        return max(fitting, key=lambda s: s.width * s.height)
    return min(sizes, key=lambda s: s.width * s.height)


def quote_of(msg: Any, bot_id: int) -> str:
    """`[replying to …: «text»]` for a reply (the quoted part if the user picked one), bounded;
    "" for a message that replies to nothing."""
    reply = getattr(msg, "reply_to_message", None)
    if reply is None:
        return ""
    author = getattr(reply, "from_user", None)
    whose = "your message" if author is not None and author.id == bot_id else "a message"
    picked = getattr(getattr(msg, "quote", None), "text", None)
    text = picked or reply.text or reply.caption or ""
    kind = _kind_word(reply)
    if not text:
        return f"[replying to {whose}{': a ' + kind if kind else ''}]"
    what = f" ({kind})" if kind else ""
    return f"[replying to {whose}{what}: «{clip(text, QUOTE_MAX_CHARS)}»]"


def _kind_word(msg: Any) -> str:
    for attr in ("photo", "voice", "audio", "document", "video", "sticker", "location"):
        if getattr(msg, attr, None):
            return attr
    return ""


def _file(kind: str, obj: Any, name: str = "", mime: str = "", **extra: Any) -> Media:
    return Media(kind=kind, ref=obj.file_id, key=obj.file_unique_id, name=name, mime=mime,
                 size=getattr(obj, "file_size", None), **extra)


def media_of(msg: Any) -> list[Media]:
    """The files of a message that gantry reads (photo, image or other document, voice,
    audio); [] for text and for kinds only described."""
    if msg.photo:
        p = best_photo(list(msg.photo))
        return [_file("photo", p, mime="image/jpeg", width=p.width, height=p.height)]
    if msg.document:
        d = msg.document
        mime = (d.mime_type or "").lower()
        kind = "image" if mime in IMAGE_MIMES else "document"
        return [_file(kind, d, d.file_name or "", mime)]
    if msg.voice:
        v = msg.voice
        return [_file("voice", v, "voice.ogg", v.mime_type or "audio/ogg", duration=v.duration)]
    if msg.audio:
        a = msg.audio
        name = a.file_name or " - ".join(x for x in (a.performer, a.title) if x) or "audio"
        return [_file("audio", a, name, a.mime_type or "", duration=a.duration)]
    return []


def described(msg: Any) -> str:
    """A short bracketed description of a kind that is not read as a file, or ""."""
    if msg.venue:
        v = msg.venue
        loc = v.location
        return (f"[venue: {v.title}, {v.address} — location {loc.latitude:.6f}, "
                f"{loc.longitude:.6f}]")
    if msg.location:
        loc = msg.location
        acc = getattr(loc, "horizontal_accuracy", None)
        live = " (live)" if getattr(loc, "live_period", None) else ""
        within = f", ±{acc:.0f} m" if acc else ""
        return f"[location{live}: {loc.latitude:.6f}, {loc.longitude:.6f}{within}]"
    if msg.contact:
        c = msg.contact
        who = " ".join(x for x in (c.first_name, c.last_name) if x)
        return f"[contact: {who}, {c.phone_number}]"
    if msg.sticker:
        s = msg.sticker
        return f"[sticker{' ' + s.emoji if s.emoji else ''}]"
    if msg.poll:
        p = msg.poll
        options = "; ".join(clip(o.text, 80) for o in p.options[:10])
        return f"[poll: {clip(p.question, 200)} — options: {options}]"
    if msg.dice:
        return f"[dice {msg.dice.emoji}: {msg.dice.value}]"
    for attr, word in (("video", "video"), ("video_note", "video message"),
                       ("animation", "GIF")):
        obj = getattr(msg, attr, None)
        if obj:
            length = duration_text(getattr(obj, "duration", None))
            return f"[{word}{', ' + length if length else ''} — videos are not read]"
    return ""


def incoming(msg: Any, bot_id: int) -> Incoming | None:
    """The message as text + media, or None for a kind gantry does not know (nothing in it
    to tell the model)."""
    body = msg.text if msg.text is not None else (msg.caption or "")
    media = media_of(msg)
    note = described(msg)
    if msg.text is None and not media and not note and not body:
        return None
    command = msg.text is not None and msg.text.lstrip().startswith("/")
    quote = "" if command else quote_of(msg, bot_id)
    text = "\n\n".join(p for p in (quote, note, body) if p)
    return Incoming(text=text, media=media, media_group=msg.media_group_id)
