"""Model Markdown → Telegram (plain text + entities), and splitting into ≤4096-unit messages.

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
import unicodedata
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


def _utf16_prefix(s: str) -> list[int]:
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
    prefix = _utf16_prefix(text)
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


# --- splitting -------------------------------------------------------------------------

_PARAGRAPH = re.compile(r"\n[^\S\n]*\n(?:[^\S\n]*\n)*")
_LINE = re.compile(r"\n")
# A sentence end: Latin punctuation needs a following space ("3.14", "ex.com" are no ends);
# CJK full-width punctuation needs none. Horizontal space only (never splits a CRLF).
_SENTENCE = re.compile(
    r"[.!?][\"')\]\u201d\u2019\u00bb]*[^\S\r\n]+"
    r"|[\u3002\uff01\uff1f][\u300d\u300f\uff09\u3015\u201d\u2019]*[^\S\r\n]*"
)
_WORD = re.compile(r"\s+")
_LEVELS = (_PARAGRAPH, _LINE, _SENTENCE, _WORD)
_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """True if `ch` attaches to the character before it (combining mark, ZWJ, selector)."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")
        or ch == _ZWJ
        or 0xFE00 <= cp <= 0xFE0F
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xE0020 <= cp <= 0xE007F
        or 0xDC00 <= cp <= 0xDFFF
    )


def _bad_cut(text: str, c: int) -> bool:
    """Would cutting before text[c] break a CRLF, a surrogate pair or a grapheme?"""
    return (text[c - 1] == "\r" and text[c] == "\n") or _extends(text[c]) or text[c - 1] == _ZWJ


def _safe_cut(text: str, start: int, cut: int) -> int:
    """Move a hard cut back off a CRLF or a combining sequence, if the part stays non-empty.

    A surrogate pair (two code points in the str) is never split: that would be invalid
    UTF-16. A combining sequence longer than the back-off window is split as a last resort.
    """
    if cut >= len(text):
        return cut
    c = cut
    for _ in range(32):
        if c - 1 <= start or not _bad_cut(text, c):
            break
        c -= 1
    if c - 1 <= start and _bad_cut(text, c):
        c = cut
    if "\ud800" <= text[c - 1] <= "\udbff" and "\udc00" <= text[c] <= "\udfff":
        c -= 1
    return c


def _inside(unit: int, entities: list[Entity]) -> bool:
    return any(e.offset < unit < e.end for e in entities)


def _choose_cut(
    text: str, prefix: list[int], start: int, hi: int, entities: list[Entity], limit: int
) -> int:
    """Pick where the part beginning at `start` ends (exclusive char index, ≤ hi).

    `entities` are those starting before the window's end; ones already closed are ignored.

    A formatting entity that fits in one message (a code block, a link) is *kept*: if it
    straddles the window's end, the window ends where it starts, even if that leaves a short
    part. Longer entities are split like plain text. Within the window a cut goes at the
    last blank line, else line end, else sentence end, else space — but only one in the
    last half of the window (so no tiny fragment precedes a long word, URL or CJK run)
    and, if possible, not inside any entity. Failing all that, a hard cut at the window's
    end, moved off a surrogate pair, CRLF or combining sequence.
    """
    base = prefix[start]
    window = [e for e in entities if e.end > base]
    keep = [e for e in window if e.offset > base and e.length <= limit]
    straddling = [e.offset for e in keep if e.offset < prefix[hi] < e.end]
    if straddling:
        ceiling = bisect_right(prefix, min(straddling), lo=start) - 1
        if ceiling > start:
            hi = ceiling
    min_fill = limit // 2
    candidates = [
        [m.end() for m in level.finditer(text, start, hi)
         if m.end() >= len(text) or not _bad_cut(text, m.end())]
        for level in _LEVELS
    ]
    for avoid in (window, keep):
        for cuts in candidates:
            for c in reversed(cuts):
                if prefix[c] - base < min_fill:
                    break
                if not _inside(prefix[c], avoid):
                    return c
    return _safe_cut(text, start, hi)


def _clip(entities: list[Entity], lo: int, hi: int) -> list[Entity]:
    """Entities intersected with units [lo, hi), re-based to lo."""
    out: list[Entity] = []
    for e in entities:
        s, t = max(e.offset, lo), min(e.end, hi)
        if t > s:
            out.append(Entity(e.type, s - lo, t - s, url=e.url, language=e.language))
    return out


def split_message(rendered: Rendered, limit: int = TELEGRAM_LIMIT) -> list[Rendered]:
    """Split into messages of at most `limit` UTF-16 units each.

    Contract:
    - `"".join(p.text for p in parts) == rendered.text` exactly: whitespace at a cut stays
      at the end of the earlier part (Telegram trims trailing whitespace, which shifts no
      entity offsets).
    - Every part is non-empty and `utf16_len(part.text) <= limit`. Empty input gives `[]`.
      A part can be whitespace-only only if the input has a whitespace run near `limit`
      long; senders should skip such parts.
    - Cuts prefer blank lines, then line ends, then sentence ends (`. ! ? 。！？`), then
      spaces, each only in the last half of the window; otherwise the cut is hard, at the
      limit. So no part but the last is shorter than `limit // 2` unless an entity that
      fits in one message would otherwise be split: such an entity is moved whole into the
      next part. Longer entities (a code block over `limit`) are clipped into one piece per
      part. Each part's entities are re-based to that part and lie within it.
    - No cut falls inside a surrogate pair or CRLF, and a hard cut inside a long word
      avoids separating combining marks/ZWJ sequences where it can.
    - Entities are clipped to the text; zero-length ones are dropped.

    `limit` must be at least 2 (one astral character).
    """
    if limit < 2:
        raise ValueError("limit must be >= 2 UTF-16 units")
    text = rendered.text
    if not text:
        return []
    prefix = _utf16_prefix(text)
    total = prefix[-1]
    entities = sorted(rendered.entities, key=lambda e: e.offset)
    if total <= limit:
        return [Rendered(text, _clip(entities, 0, total))]
    # Entities are consumed in offset order: `carry` holds those that started in an earlier
    # part and are still open, `entities[next_i:]` those not started yet. Keeps the split
    # linear in the number of entities rather than entities × parts.
    offsets = [e.offset for e in entities]
    carry: list[Entity] = []
    next_i = 0
    parts: list[Rendered] = []
    start = 0
    n = len(text)
    while start < n:
        if total - prefix[start] <= limit:
            end = n
        else:
            hi = bisect_right(prefix, prefix[start] + limit, lo=start) - 1
            upto = bisect_left(offsets, prefix[hi], lo=next_i)
            end = _choose_cut(text, prefix, start, hi, carry + entities[next_i:upto], limit)
        lo_u, hi_u = prefix[start], prefix[end]
        upto = bisect_left(offsets, hi_u, lo=next_i)
        current = carry + entities[next_i:upto]
        parts.append(Rendered(text[start:end], _clip(current, lo_u, hi_u)))
        carry = [e for e in current if e.end > hi_u]
        next_i = upto
        start = end
    return parts


def split_text(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Plain-text split for the no-entities fallback; same contract as split_message."""
    return [p.text for p in split_message(Rendered(text, []), limit)]
