"""Splitting rendered text into Telegram messages of at most 4096 UTF-16 units.

Cuts prefer blank lines, then line ends, sentence ends and spaces; an entity that fits in one
message moves whole to the next part, and entities are re-based to each part (the contract
is on split_message). Pure: no I/O, no aiogram.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right

from gantry.channel.telegram.format import TELEGRAM_LIMIT, Entity, Rendered, utf16_prefix

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
    prefix = utf16_prefix(text)
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
