"""One-line, bounded text for status lines and quotes: cut between words, marked with `…`."""

from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, limit: int) -> str:
    """`text` with its whitespace runs made single spaces, at most `limit` characters. A cut
    falls after a whole word (a reader takes "faile" for a typo) unless that would lose more
    than half the room, and ends in `…` so the reader knows something was left out."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit <= 1:
        return ELLIPSIS[:limit]
    room = limit - 1
    head = text[:room]
    if text[room] != " ":
        words, space, _part = head.rpartition(" ")
        if space and len(words) >= room // 2:
            head = words
    return head.rstrip() + ELLIPSIS
