"""The YAML front matter of a SKILL.md, read without a YAML library (pure).

PyYAML is not in gantry's runtime set, and a skill's front matter uses a small part of YAML:
`key: value` scalars (plain, quoted, or `|`/`>` blocks), a one-level map (`metadata`) and a
list of plain words. Anything else is refused with its line number, never guessed at.
"""

from __future__ import annotations

import json
import re
from itertools import pairwise

Value = str | list[str] | dict[str, str]

_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*)|)$")
_BLOCK = re.compile(r"([|>])([+-]?)$")
MAX_LINES = 400


class FrontMatterError(ValueError):
    """Front matter gantry cannot read; `str()` names the line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"front matter line {line}: {message}")
        self.line = line


def split(text: str) -> tuple[list[str], str] | None:
    """The front matter's lines and the body after it, or None when `text` does not start
    with a `---` line. An unclosed block is an error (the body would be swallowed)."""
    lines = text.lstrip("\ufeff").split("\n")
    if not lines or lines[0].rstrip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return [ln.rstrip("\r") for ln in lines[1:i]], "\n".join(lines[i + 1:])
    raise FrontMatterError(1, "the `---` block is never closed by another `---` line")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _blank(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


def _uncomment(text: str) -> str:
    """A plain scalar ends before ` #` (YAML's comment start inside a line)."""
    cut = re.search(r"[ \t]#", text)
    return (text[: cut.start()] if cut else text).strip()


def _unquote(m: re.Match[str]) -> str:
    """YAML's `\\'` is JSON's `'`; every other escape stays as it is for json.loads."""
    return "'" if m.group(1) == "'" else m.group(0)


def _double(text: str, line: int) -> str:
    r"""A double-quoted scalar: JSON's escapes (which YAML's include), and `\'` for `'`."""
    try:
        # Escapes pair up left to right: a file's `\\'` is a backslash, then a quote.
        value = json.loads(re.sub(r"\\(.)", _unquote, text, flags=re.S).replace("\t", "\\t"))
    except ValueError:
        raise FrontMatterError(line, f"cannot read the quoted text {text[:40]!r}") from None
    if not isinstance(value, str):
        raise FrontMatterError(line, "a quoted value must be text")
    return value


def scalar(raw: str, line: int) -> str:
    """One inline scalar: `'…'` (doubled `''` for a quote), `"…"`, or plain text."""
    raw = raw.strip()
    if raw.startswith('"'):
        end = raw.rfind('"')
        if end == 0 or _uncomment(raw[end + 1:]):
            raise FrontMatterError(line, "a double-quoted value must end on its line with `\"`")
        return _double(raw[: end + 1], line)
    if raw.startswith("'"):
        end = raw.rfind("'")
        inner = raw[1:end]
        if end == 0 or _uncomment(raw[end + 1:]) or "'" in inner.replace("''", ""):
            raise FrontMatterError(line, "a single-quoted value must end on its line with `'`")
        return inner.replace("''", "'")
    value = _uncomment(raw)
    if value[:1] in ("&", "*", "!", "%", "@", "`", "{", "["):
        raise FrontMatterError(line, f"YAML's {value[0]!r} is not supported here; quote the value")
    return value


def _flow_list(raw: str, line: int) -> list[str]:
    inner = _uncomment(raw)
    if not inner.endswith("]"):
        raise FrontMatterError(line, "a `[...]` list must end on its line")
    items = [p.strip() for p in inner[1:-1].split(",")]
    if items == [""]:
        return []
    return [scalar(p, line) for p in items if p]


def _block_scalar(style: str, chomp: str, body: list[str]) -> str:
    """A `|` (lines kept) or `>` (lines folded) block, indentation removed, then chomped:
    `-` drops the final line break, otherwise one is kept (trailing blank lines go)."""
    while body and not body[-1].strip():
        body = body[:-1]
    width = min((_indent(b) for b in body if b.strip()), default=0)
    lines = [b[width:].rstrip("\r") if b.strip() else "" for b in body]
    if not lines:
        return ""
    if style == "|":
        text = "\n".join(lines)
    else:  # a break between two text lines is a space; each blank line is one break
        text = lines[0] or "\n"  # a leading blank line is a line break
        for prev, cur in pairwise(lines):
            if not cur:
                text += "\n"
            elif not prev:
                text += ("\n" if cur.startswith(" ") else "") + cur
            elif prev.startswith(" ") or cur.startswith(" "):
                text += "\n" + cur
            else:
                text += " " + cur
    return text if chomp == "-" else text + "\n"


def parse(lines: list[str]) -> dict[str, Value]:
    """The front matter's top-level keys. Raises FrontMatterError, nothing else."""
    if len(lines) > MAX_LINES:
        raise FrontMatterError(MAX_LINES, f"front matter longer than {MAX_LINES} lines")
    out: dict[str, Value] = {}
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        if _blank(line):
            i += 1
            continue
        if "\t" in line[: _indent(line) + 1]:
            raise FrontMatterError(number, "indent with spaces, not tabs")
        if _indent(line):
            raise FrontMatterError(number, "an indented line where a new `key:` was expected")
        match = _KEY.match(line)
        if match is None:
            raise FrontMatterError(number, "expected `key: value`")
        key, raw = match.group(1), (match.group(2) or "").strip()
        if key in out:
            raise FrontMatterError(number, f"{key!r} is given twice")
        j = i + 1  # the indented lines (and blank ones) that belong to this key
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > 0):
            j += 1
        nested = lines[i + 1: j]
        out[key] = _value(raw, nested, number)
        i = j
    return out


def _value(raw: str, nested: list[str], number: int) -> Value:
    block = _BLOCK.match(_uncomment(raw)) if raw else None
    if block:
        return _block_scalar(block.group(1), block.group(2), nested)
    content = [(number + 1 + k, n) for k, n in enumerate(nested) if not _blank(n)]
    if raw.startswith("["):
        if content:
            raise FrontMatterError(content[0][0], "a `[...]` list must end on its line")
        return _flow_list(raw, number)
    if raw.startswith("{"):
        if _uncomment(raw).replace(" ", "") != "{}" or content:
            raise FrontMatterError(number, "only an empty `{}` map may be written inline; "
                                   "write `key: value` lines indented under it")
        return {}
    if raw:
        value = scalar(raw, number)
        if not content:
            return value
        if raw.startswith(("'", '"')):
            raise FrontMatterError(content[0][0], "a quoted value must end on its line")
        more = [scalar(n, k) for k, n in content]  # a plain value folded over lines
        return " ".join([value, *more])
    if not content:
        return ""
    if all(n.strip().startswith("- ") or n.strip() == "-" for _k, n in content):
        return [scalar(n.strip()[1:], k) for k, n in content]
    mapping: dict[str, str] = {}
    width = _indent(content[0][1])
    for k, n in content:
        m = _KEY.match(n.strip())
        if _indent(n) != width or m is None:
            raise FrontMatterError(k, "expected an indented `key: value` (one level only)")
        if m.group(1) in mapping:
            raise FrontMatterError(k, f"{m.group(1)!r} is given twice")
        mapping[m.group(1)] = scalar(m.group(2) or "", k)
    return mapping
