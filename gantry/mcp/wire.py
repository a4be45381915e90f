"""Lines on the MCP stdio wire: decoding what a server wrote, checking what we are to write.

A server's line that the SDK's strict decoder rejects must not vanish: the request it answers
would wait for its timeout. Node servers routinely write lone surrogates (`JSON.stringify` of a
string cut inside an emoji) and some write invalid UTF-8, so those are decoded leniently, each
bad character becoming U+FFFD. A line that is not JSON-RPC even then still yields the id of the
request it answers where one can be recovered, so that request fails at once.
Pure functions; `child.py` does the I/O and the logging.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON string (maybe unterminated) or a bracket: the tokens that decide nesting depth.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\]]', re.DOTALL)
_ID_VALUE = re.compile(r'\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')

RequestId = int | str


@dataclass(frozen=True)
class Decoded:
    """One stdout line: the message (None: nothing usable), what lenient decoding replaced,
    and, for a line that is no message, the id of the request it answers (if recoverable)."""

    message: Any = None
    repaired: tuple[str, ...] = ()
    reply_to: RequestId | None = None


@functools.cache
def _adapter() -> Any:
    """mcp_types' message adapter, imported on the first line (not per line, nor at import)."""
    from mcp_types import jsonrpc_message_adapter

    return jsonrpc_message_adapter


def decode(line: bytes) -> Decoded:
    """Strict first (the SDK's own adapter, the fast path); leniently only when that fails."""
    jsonrpc_message_adapter = _adapter()
    try:
        return Decoded(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        pass
    repaired: list[str] = []
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        text = line.decode("utf-8", "replace")
        repaired.append("invalid UTF-8")
    try:
        raw = json.loads(text)
    except ValueError:
        return Decoded(reply_to=top_level_id(text))
    obj, lone = _replace_surrogates(raw)
    if lone:
        repaired.append("lone surrogates")
    try:
        return Decoded(jsonrpc_message_adapter.validate_python(obj, by_name=False),
                       tuple(repaired))
    except ValueError:
        return Decoded(reply_to=_reply_id(obj))


def _replace_surrogates(value: Any) -> tuple[Any, int]:
    """`value` with every lone surrogate (in keys and strings) made U+FFFD, and how many."""
    if isinstance(value, str):
        return SURROGATE.subn("\ufffd", value)
    if isinstance(value, list):
        items = [_replace_surrogates(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        count = 0
        out: dict[str, Any] = {}
        for k, v in value.items():
            key, n = SURROGATE.subn("\ufffd", k)
            out[key], m = _replace_surrogates(v)
            count += n + m
        return out, count
    return value, 0


def _reply_id(obj: Any) -> RequestId | None:
    """The id of a parsed non-message that looks like a response (no method) to a request."""
    if not isinstance(obj, dict) or "method" in obj:
        return None
    rid = obj.get("id")
    return rid if isinstance(rid, int | str) and not isinstance(rid, bool) else None


def top_level_id(text: str) -> RequestId | None:
    """The value of the outermost object's "id" key in text that is not valid JSON, if the
    line is an object without a "method" before it (a response, not a request of its own)."""
    depth = 0
    for token in _tokens(text):
        tok = token.group()
        if tok in ("{", "["):
            depth += 1
        elif tok in ("}", "]"):
            depth -= 1
        elif depth == 1 and tok == '"method"':
            return None
        elif depth == 1 and tok == '"id"':
            value = _ID_VALUE.match(text, token.end())
            if value is None:
                return None
            try:
                rid = json.loads(value.group(1))
            except ValueError:
                return None
            return rid if isinstance(rid, int | str) else None
    return None


def _tokens(text: str) -> Iterator[re.Match[str]]:
    if not text.lstrip().startswith("{"):
        return iter(())
    return _TOKEN.finditer(text)


def lone_surrogate(args: Any, path: str = "") -> str | None:
    """Where in `args` (a parsed JSON value) a lone surrogate sits, e.g. "text" or "items.2",
    or None. Such a string cannot be written as UTF-8, so the call must fail before writing."""
    if not path and not _any_surrogate(args):  # every call asks; almost none has one
        return None
    if isinstance(args, str):
        return (path or "(the arguments)") if SURROGATE.search(args) else None
    items: Iterator[tuple[str, Any]]
    if isinstance(args, dict):
        for key in args:
            if isinstance(key, str) and SURROGATE.search(key):
                return f"{path}.{key!r}" if path else f"the key {key!r}"
        items = ((str(k), v) for k, v in args.items())
    elif isinstance(args, list | tuple):
        items = ((str(i), v) for i, v in enumerate(args))
    else:
        return None
    for key, value in items:
        found = lone_surrogate(value, f"{path}.{key}" if path else key)
        if found is not None:
            return found
    return None


def _any_surrogate(value: Any) -> bool:
    """Whether a lone surrogate is anywhere in `value` (keys included), without building the
    paths: ASCII text, the usual kind, is passed over without a regex search."""
    if isinstance(value, str):
        return not value.isascii() and SURROGATE.search(value) is not None
    if isinstance(value, dict):
        for k, v in value.items():
            if (type(k) is not str or not k.isascii()) and _any_surrogate(k):
                return True
            if type(v) is str:
                if not v.isascii() and SURROGATE.search(v) is not None:
                    return True
            elif _any_surrogate(v):
                return True
        return False
    if isinstance(value, list | tuple):
        for v in value:
            if _any_surrogate(v):
                return True
    return False
