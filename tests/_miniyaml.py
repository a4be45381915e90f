"""Just enough YAML to read gantry's own deploy files in tests (PyYAML is not a dependency).

Supports: comments, block mappings, block sequences (including `- key: value` items), flow
sequences of scalars (`["a", "b"]`), quoted and plain scalars, ints, booleans, and literal
block scalars (`|`). Anything else raises ValueError, so a deploy file that drifts into
unsupported syntax fails loudly instead of being misread.
"""

from __future__ import annotations

import json
import re
from typing import Any

_INT = re.compile(r"-?\d+")


def _strip_comment(text: str) -> str:
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _split_flow(body: str) -> list[str]:
    items, cur, quote = [], "", ""
    for ch in body:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            cur += ch
        elif ch == ",":
            items.append(cur)
            cur = ""
        elif ch in "[]{}":
            raise ValueError(f"nested flow collections are not supported: {body!r}")
        else:
            cur += ch
    if cur.strip():
        items.append(cur)
    return [i.strip() for i in items]


def scalar(text: str) -> Any:
    s = text.strip()
    if not s:
        return None
    if s.startswith("["):
        if not s.endswith("]"):
            raise ValueError(f"unterminated flow sequence: {s!r}")
        return [scalar(i) for i in _split_flow(s[1:-1])]
    if s.startswith("{"):
        raise ValueError(f"flow mappings are not supported: {s!r}")
    if s[0] == '"':
        return json.loads(s)
    if s[0] == "'":
        return s[1:-1].replace("''", "'")
    if s in ("true", "false"):
        return s == "true"
    if s in ("null", "~"):
        return None
    if _INT.fullmatch(s):
        return int(s)
    return s


def _key_value(text: str) -> tuple[str, str] | None:
    m = re.match(r"""^("[^"]*"|'[^']*'|[^\s"'#][^:]*?):(?:\s+(.*))?$""", text)
    if not m:
        return None
    key = m.group(1)
    if key[0] in "\"'":
        key = key[1:-1]
    return key, (m.group(2) or "")


class _Parser:
    def __init__(self, text: str) -> None:
        self.raw = text.splitlines()
        self.i = 0

    def _next_content(self) -> tuple[int, str] | None:
        """Skip blank/comment lines; return (indent, text-without-comment) of the next line."""
        while self.i < len(self.raw):
            line = self.raw[self.i]
            stripped = _strip_comment(line)
            if stripped.strip() and stripped.strip() != "---":
                if "\t" in line[: len(line) - len(line.lstrip())]:
                    raise ValueError(f"tab indentation at line {self.i + 1}")
                return len(line) - len(line.lstrip(" ")), stripped.strip()
            self.i += 1
        return None

    def _block_scalar(self, parent_indent: int) -> str:
        lines: list[str] = []
        indent: int | None = None
        while self.i < len(self.raw):
            line = self.raw[self.i]
            if line.strip():
                ind = len(line) - len(line.lstrip(" "))
                if ind <= parent_indent:
                    break
                if indent is None:
                    indent = ind
                lines.append(line[indent:])
            else:
                lines.append("")
            self.i += 1
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines) + "\n"

    def parse(self, indent: int) -> Any:
        nxt = self._next_content()
        if nxt is None:
            return None
        ind, text = nxt
        if ind < indent:
            return None
        if text == "-" or text.startswith("- "):
            return self._sequence(ind)
        return self._mapping(ind)

    def _value(self, rest: str, own_indent: int) -> Any:
        if rest in ("|", "|-", "|+"):
            return self._block_scalar(own_indent)
        if rest:
            return scalar(rest)
        nxt = self._next_content()
        if nxt is None:
            return None
        ind, text = nxt
        if ind > own_indent or (ind == own_indent and (text == "-" or text.startswith("- "))):
            return self.parse(ind)
        return None

    def _mapping(self, indent: int, first: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while True:
            consumed = first is not None
            if first is not None:
                text, first = first, None
            else:
                nxt = self._next_content()
                if nxt is None or nxt[0] < indent:
                    return out
                if nxt[0] > indent:
                    raise ValueError(f"unexpected indentation at line {self.i + 1}")
                text = nxt[1]
                if text.startswith("- "):
                    return out
            kv = _key_value(text)
            if kv is None:
                raise ValueError(f"not a `key: value` line at {self.i + 1}: {text!r}")
            if not consumed:
                self.i += 1
            key, rest = kv
            if key in out:
                raise ValueError(f"duplicate key {key!r} at line {self.i}")
            out[key] = self._value(rest, indent)

    def _sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while True:
            nxt = self._next_content()
            if nxt is None or nxt[0] != indent or not (nxt[1] == "-" or nxt[1].startswith("- ")):
                return out
            rest = nxt[1][1:].strip()
            self.i += 1
            if not rest:
                out.append(self.parse(indent + 1))
            elif _key_value(rest) is not None and not rest.startswith(("\"", "'", "[")):
                out.append(self._mapping(indent + 2, first=rest))
            else:
                out.append(scalar(rest))


def load(text: str) -> Any:
    p = _Parser(text)
    value = p.parse(0)
    if p._next_content() is not None:
        raise ValueError(f"trailing content at line {p.i + 1}")
    return value
