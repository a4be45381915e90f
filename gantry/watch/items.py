"""Pure parts of a watch: items out of a result, their ids, the diff against the cursor, and
the message a wake becomes. No I/O, so each rule is tested on its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

CURSOR_MAX = 1_000  # ids remembered beyond those in the latest result (oldest forgotten)
WAKE_ITEMS = 20  # items shown in one wake's message; the rest are counted
ITEM_CHARS = 1_000  # one item's JSON in that message
WAKE_CHARS = 8_000  # all items' JSON in that message
SILENT = "[silent]"


class ItemsError(ValueError):
    """A result no items can be read from; `str()` says why, for the log and the notice."""


def parse_text(text: str) -> Any:
    """A tool's or resource's text as JSON."""
    try:
        return json.loads(text)
    except ValueError:
        head = text.strip()[:60]
        raise ItemsError(f"the result is not JSON (it starts {head!r})") from None


def structured(value: Any) -> Any:
    """structuredContent as a result value. SDK servers wrap a tool's non-object return as
    `{"result": ...}`; a wrapped string is the JSON text it returned."""
    if isinstance(value, dict) and list(value) == ["result"]:
        inner = value["result"]
        return parse_text(inner) if isinstance(inner, str) else inner
    return value


def extract(value: Any) -> list[Any]:
    """The items of a parsed result: a list; or an object's `items` list, or its only list;
    or, an object with no list, the object itself as the one item (a status to watch)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        if isinstance(value.get("items"), list):
            return list(value["items"])
        lists = [k for k, v in value.items() if isinstance(v, list)]
        if len(lists) == 1:
            return list(value[lists[0]])
        if not lists:
            return [value]
        raise ItemsError(f"the result has several lists ({', '.join(lists[:5])}) and none "
                         "named `items`; cannot tell which holds the items")
    raise ItemsError(f"the result is a JSON {type(value).__name__}, not a list or an object")


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def item_id(item: Any, field: str) -> str:
    """An item's identity: its `field` when it has a string or number there, else its whole
    content (so an object without ids counts as new whenever it changes)."""
    if isinstance(item, dict):
        value = item.get(field)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return f"{field}={value}"
    return "=" + canonical(item)


def diff(items: Sequence[Any], cursor: Sequence[str] | None, field: str
         ) -> tuple[list[Any], list[str]]:
    """(new items, new cursor). With no cursor yet (the first poll) nothing is new: the
    result only seeds it. The cursor keeps every id of this result plus the most recent
    CURSOR_MAX others, so an item that drops off a feed and returns is not new again."""
    seen = dict.fromkeys(cursor or ())
    new: list[Any] = []
    current: dict[str, None] = {}
    for item in items:
        key = item_id(item, field)
        if key in current:
            continue
        current[key] = None
        if cursor is not None and key not in seen:
            new.append(item)
    for key in current:  # moved to the end: the newest
        seen.pop(key, None)
        seen[key] = None
    keys = list(seen)
    keep = max(CURSOR_MAX, len(current))
    return new, keys[-keep:]


def shown_items(items: Sequence[Any]) -> list[Any]:
    """The new items a wake stores and shows: at most WAKE_ITEMS."""
    return list(items[:WAKE_ITEMS])


def wake_text(watch_id: int, label: str, instruction: str, items: Sequence[Any],
              total: int) -> str:
    """The user turn a wake becomes: where it comes from, the instruction, the items."""
    lines: list[str] = []
    used = 0
    for item in items:
        text = canonical(item)
        if len(text) > ITEM_CHARS:
            text = text[: ITEM_CHARS - 1] + "…"
        if used + len(text) > WAKE_CHARS:
            break
        used += len(text)
        lines.append(f"- {text}")
    more = total - len(lines)
    if more > 0:
        lines.append(f"(and {more} more new item(s) not shown)")
    return (
        f"[watch #{watch_id}, {label}: this message is from a watch, not the user; "
        f"{total} new item(s) appeared; your reply is sent to the user unless it starts "
        f"with {SILENT}]\n{instruction}\nNew items:\n" + "\n".join(lines)
    )
