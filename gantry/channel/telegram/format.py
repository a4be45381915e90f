"""Model Markdown → Telegram: plain text + entities (split.py cuts it into messages).

Why entities rather than parse_mode: with `parse_mode` the text must be escaped perfectly or
Telegram rejects the whole message ("can't parse entities"), and a message can only be split
*before* escaping. With (text, entities) the text is sent verbatim, so splitting happens on
the plain text and the only arithmetic is UTF-16 offsets, which Telegram uses for both the
4096 limit and entity positions.

The Markdown parsing itself is delegated to `telegramify-markdown` (pulldown-cmark via the
`pyromark` wheel). It is imported lazily so that importing this module stays cheap; every
failure of it degrades to the plain text with no entities.

Everything here is pure: no I/O, no aiogram at import time.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left, bisect_right
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from aiogram.types import MessageEntity

log = logging.getLogger("gantry.channel.tgformat")

TELEGRAM_LIMIT = 4096
"""Max message text length, in UTF-16 code units."""

MAX_RENDER_CHARS = 262_144
"""Above this, Markdown is not parsed at all: plain text is sent. Bounds the parser's work
(it re-parses while it finds delimiters to neutralise) on pathological replies."""

# Entity types the renderer may emit. Anything else the converter produces (custom_emoji
# needs a paid bot username, mentions need a user) would make Telegram reject the message.
_ALLOWED_TYPES = frozenset(
    {
        "bold",
        "italic",
        "underline",
        "strikethrough",
        "spoiler",
        "code",
        "pre",
        "text_link",
        "blockquote",
        "expandable_blockquote",
    }
)
_LINK_SCHEMES = ("http://", "https://", "tg://")
_BARE_DOMAIN = re.compile(r"^[\w-]+(\.[\w-]+)+(?:[/?#:]\S*)?$")
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_HTML_ROUNDS = 4


class Entity(msgspec.Struct, frozen=True, omit_defaults=True):
    """A Telegram MessageEntity, independent of aiogram. offset/length are UTF-16 units."""

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length

    def to_bot_api(self) -> dict[str, Any]:
        """The Bot API JSON shape (None fields omitted)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class Rendered(msgspec.Struct, frozen=True):
    """Plain text plus the entities that format it."""

    text: str
    entities: list[Entity] = []


def to_aiogram(entities: list[Entity]) -> list[MessageEntity]:
    """Convert to aiogram objects; aiogram is imported only when a caller needs it."""
    from aiogram.types import MessageEntity

    return [MessageEntity(**e.to_bot_api()) for e in entities]


def utf16_len(s: str) -> int:
    """Length of `s` in UTF-16 code units, the unit Telegram counts in.

    A lone surrogate code point counts as one unit (it would occupy one if encoded).
    """
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def utf16_prefix(s: str) -> list[int]:
    """prefix[i] = UTF-16 offset of s[i]; prefix[len(s)] = utf16_len(s)."""
    out = [0] * (len(s) + 1)
    acc = 0
    for i, ch in enumerate(s):
        acc += 2 if ord(ch) > 0xFFFF else 1
        out[i + 1] = acc
    return out


def _fix_surrogates(s: str) -> str:
    """Join surrogate code-point pairs into real characters; replace lone ones with U+FFFD.

    Telegram rejects text that is not valid UTF-8, and the Markdown parser raises on it.
    """
    if not _SURROGATE.search(s):
        return s
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# --- rendering -------------------------------------------------------------------------

_config: Any = None


def _render_config() -> Any:
    """A private converter config: headings are bold text without the default emoji prefix."""
    global _config
    if _config is None:
        from telegramify_markdown import RenderConfig

        cfg = RenderConfig.isolated()
        for level in range(1, 7):
            setattr(cfg.markdown_symbol, f"heading_level_{level}", "")
        _config = cfg
    return _config


def _escape_raw_html(markdown: str) -> str:
    """Backslash-escape the `<` that opens raw HTML, so it shows as text.

    The converter drops raw HTML silently, which loses content a model writes unquoted,
    e.g. `List<String>` or `<br>` in a table. The parser itself says where HTML starts,
    so no hand-written Markdown grammar is involved. Escaping can expose new HTML (an HTML
    block becomes a paragraph with inline tags), hence a few bounded rounds.
    """
    if "<" not in markdown:
        return markdown
    import pyromark
    from telegramify_markdown.converter import STANDARD_OPTIONS

    text = markdown
    for _ in range(_MAX_HTML_ROUNDS):
        data = text.encode("utf-8")
        offsets: set[int] = set()
        for payload, span in pyromark.events_with_range(text, options=STANDARD_OPTIONS):
            if isinstance(payload, dict) and ("InlineHtml" in payload or "Html" in payload):
                lt = data.find(b"<", span["start"], span["end"])
                if lt >= 0:
                    offsets.add(lt)
        if not offsets:
            break
        bounds = [0, *sorted(offsets), len(data)]
        text = b"\\".join(data[a:b] for a, b in pairwise(bounds)).decode("utf-8")
    return text


def _clean_url(url: str | None) -> str | None:
    """A URL Telegram accepts for text_link, or None to render the link as plain text."""
    if not url or any(c.isspace() for c in url):
        return None
    if url.lower().startswith(_LINK_SCHEMES):
        return url
    if _BARE_DOMAIN.match(url):
        return "http://" + url
    return None


def _clean_entities(raw: list[Any], total: int) -> list[Entity]:
    """Keep entity types Telegram will accept from a bot, clipped to the text."""
    out: list[Entity] = []
    for e in raw:
        if e.type not in _ALLOWED_TYPES:
            continue
        start, end = max(0, e.offset), min(total, e.offset + e.length)
        if end <= start:
            continue
        url = None
        if e.type == "text_link":
            url = _clean_url(e.url)
            if url is None:
                continue
        language = e.language if e.type == "pre" and e.language else None
        out.append(Entity(e.type, start, end - start, url=url, language=language))
    return out


def _isolate_pre(text: str, entities: list[Entity]) -> Rendered:
    """Put code blocks on lines of their own.

    The converter glues a fenced block inside a list item to the item's text
    ("⦁ stepcode"); Telegram shows `pre` as a block anyway, but the plain-text
    fallback and copy-paste would not. Inserts "\\n" and shifts entities to match.
    """
    prefix = utf16_prefix(text)
    total = prefix[-1]

    def char_at(unit: int) -> str:
        return text[bisect_left(prefix, unit)]

    points: set[int] = set()
    for e in entities:
        if e.type != "pre":
            continue
        if e.offset > 0 and char_at(e.offset - 1) != "\n":
            points.add(e.offset)
        if e.end < total and char_at(e.end) != "\n":
            points.add(e.end)
    if not points:
        return Rendered(text, entities)
    ordered = sorted(points)
    pieces: list[str] = []
    last = 0
    for p in ordered:
        i = bisect_left(prefix, p)
        pieces.append(text[last:i])
        pieces.append("\n")
        last = i
    pieces.append(text[last:])
    shifted = [
        Entity(
            e.type,
            e.offset + bisect_right(ordered, e.offset),
            e.length + bisect_left(ordered, e.end) - bisect_right(ordered, e.offset),
            url=e.url,
            language=e.language,
        )
        for e in entities
    ]
    return Rendered("".join(pieces), shifted)


def render_markdown(markdown: str) -> Rendered:
    """Model Markdown → Telegram text + entities. Never raises.

    On any converter failure (or input over MAX_RENDER_CHARS) the result is the input as
    plain text with no entities, logged once per call at warning level without content.
    Lone surrogates are replaced with U+FFFD in every path.
    """
    source = _fix_surrogates(markdown)
    if not source.strip():
        return Rendered(source, [])
    if len(source) > MAX_RENDER_CHARS:
        log.warning(
            "reply too long to render as markdown; sending plain text", extra={"chars": len(source)}
        )
        return Rendered(source, [])
    try:
        from telegramify_markdown import convert

        text, raw = convert(_escape_raw_html(source), config=_render_config())
        return _isolate_pre(text, _clean_entities(raw, utf16_len(text)))
    except Exception as exc:
        log.warning(
            "markdown render failed; sending plain text",
            extra={"chars": len(source), "error": f"{type(exc).__name__}: {exc}"},
        )
        return Rendered(source, [])
