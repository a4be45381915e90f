"""Pure translations between MCP and what the model sees: names, schemas, results.

No `mcp` import: results are read by attribute (duck typing), so tests can feed plain objects.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Keep = Callable[[str, str, str], str | None]
"""Keeps a binary block's base64 bytes (mime, name) for sending later; returns its id
(gantry.outbox.Outbox.keep), or None when it was not kept."""


@dataclass
class CallResult:
    """A tools/call outcome as text for the model; `error` when the tool or server failed."""

    text: str
    error: bool = False
    structured: Any = None  # the result's structuredContent (watches read items from it)


MAX_NAME = 64
SEP = "__"
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def _fit(name: str, salt: str) -> str:
    """Cut `name` to MAX_NAME, keeping it unique with a short hash of `salt` when cut."""
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha1(salt.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def exposed_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """Original tool name → `{server}__{tool}` the model may call (OpenAI's name rules).

    Characters outside [A-Za-z0-9_-] become `_`; long names are cut with a hash suffix.
    When two tools sanitise to the same name, the one whose original name sorts first keeps
    it and the others get `_2`, `_3`, … — deterministic whatever order the server lists them.
    """
    out: dict[str, str] = {}
    taken: set[str] = set()
    for original in sorted(set(tools)):
        base = _fit(f"{server}{SEP}{_BAD.sub('_', original) or '_'}", f"{server}/{original}")
        name, n = base, 1
        while name in taken:
            n += 1
            suffix = f"_{n}"
            name = _fit(base, base)[: MAX_NAME - len(suffix)] + suffix
        taken.add(name)
        out[original] = name
    return out


def parameters(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """An MCP input schema as OpenAI function parameters: always an object schema."""
    out = dict(schema or {})
    if out.get("type") != "object":
        out["type"] = "object"
    out.setdefault("properties", {})
    return out


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _size(n: int) -> str:
    return f"{n} B" if n < 1000 else f"{round(n / 1000)} kB"


def _b64_len(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=") if data else 0


def _offer(keep: Keep | None, data: str, mime: str, name: str) -> str:
    """The placeholder's attachment note when the bytes were kept (the model may send them)."""
    ident = keep(data, mime, name) if keep is not None and data else None
    return f"; attachment {ident}: send_attachment can send it to the user" if ident else ""


def resource_text(res: Any, keep: Keep | None = None) -> str:
    """One resource's contents (embedded in a result, or read with resources/read): its
    text under a header line, or a placeholder for a blob (kept with `keep`)."""
    uri = str(getattr(res, "uri", "") or "")
    text = getattr(res, "text", None)
    if text is not None:
        return f"[resource {uri}]\n{text}"
    mime = getattr(res, "mime_type", None) or "binary"
    blob = str(getattr(res, "blob", "") or "")
    name = uri.split("?", 1)[0]
    return f"[resource {uri}, {mime}, {_size(_b64_len(blob))}{_offer(keep, blob, mime, name)}]"


READ_TOOL = "resource_read"  # gantry/mcp/resource_tool.py


def link_text(block: Any, reader: str = "") -> str:
    """A resource_link: its uri, name and type; with `reader` (the server's name, when the
    resource tools read it) how the model can read it."""
    uri = str(getattr(block, "uri", "") or "")
    about = [str(x) for x in (getattr(block, "name", None), getattr(block, "mime_type", None))
             if x]
    shown = f"[resource link {uri}" + (f" ({', '.join(about)})" if about else "")
    if not reader:
        return shown + "]"
    return f"{shown}; {READ_TOOL} can read it: server {reader!r}, this uri]"


def block_text(block: Any, keep: Keep | None = None, reader: str = "") -> str:
    """One content block as text; binary and resource blocks become short placeholders.
    With `keep`, binary bytes are kept and the placeholder names their attachment id; with
    `reader`, a resource link says how to read it (see link_text)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        mime = getattr(block, "mime_type", None) or getattr(block, "mimeType", None) or kind
        data = str(getattr(block, "data", "") or "")
        return f"[{mime}, {_size(_b64_len(data))}{_offer(keep, data, str(mime), '')}]"
    if kind == "resource":
        return resource_text(getattr(block, "resource", None), keep)
    if kind == "resource_link":
        return link_text(block, reader)
    return f"[{kind or 'unknown'} content]"


def plain_text(content: Sequence[Any] | None) -> str | None:
    """The text of a result that is one non-empty text block (the common case, read without
    result_text's walk), else None."""
    if content and len(content) == 1 and getattr(content[0], "type", None) == "text":
        return str(getattr(content[0], "text", "")) or None
    return None


def result_text(content: Sequence[Any], structured: Any, is_error: bool,
                keep: Keep | None = None, reader: str = "") -> str:
    """What the model reads for a tools/call result.

    Text passes through; other blocks become placeholders; `structuredContent` is used when
    there is no text at all.
    """
    text = plain_text(content)
    if text is not None:
        return text
    parts = [block_text(b, keep, reader) for b in content or ()]
    has_text = any(getattr(b, "type", None) == "text" for b in content or ())
    if not has_text and structured is not None:
        parts.insert(0, json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    text = "\n".join(p for p in parts if p)
    if not text:
        return "(the tool reported an error without details)" if is_error else "(no output)"
    return text
