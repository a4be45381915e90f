"""Recovering what small local models get wrong about tool calls (pure functions).

Local models served through Ollama, llama.cpp, vLLM or LM Studio often print a tool call in
the reply text instead of sending `tool_calls` (when the server's parser does not recognise
their chat template's format), wrap their reasoning in `<think>` tags, or send arguments
that are almost JSON. These functions turn that back into what the model meant, so the user
never reads it. docs/models.md has the table of formats.

Deciding what is a call: only a reply that *is* calls — after its reasoning, nothing but
one or more calls in a chat template's tool-call markup (`<tool_call>`, `<|python_tag|>`,
`[TOOL_CALLS]`, `<function=…>`), plain JSON or Python-call syntax, bare or in one fenced
block — and only when every call names a tool that was offered. A call shown inside prose
(a model explaining a format, or repeating a document or web page that holds one) is
text: untrusted text must never run a tool the model did not choose. While a reply still
streams, gantry.model.gate holds back what may yet turn out to be one.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = [
    "FENCE_LANGS",
    "MARKERS",
    "THINK_CLOSE",
    "THINK_OPEN",
    "Printed",
    "canonical",
    "parse_arguments",
    "printed_calls",
    "resolve_name",
    "split_reasoning",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_LLAMA_FN_HEAD = re.compile(r"([A-Za-z0-9_.-]+)>")
_MISTRAL_V11 = re.compile(
    r"\[TOOL_CALLS\]\s*([A-Za-z0-9_.-]+)\s*(?:\[CALL_ID\]\s*[A-Za-z0-9_-]*\s*)?\[ARGS\]"
)
_FENCE = re.compile(r"\A```[ \t]*([A-Za-z_-]*)[ \t]*\n(.*?)\n?```\Z", re.DOTALL)
FENCE_LANGS = frozenset({"", "json", "tool_call", "tool_code", "tool", "function"})
_LLAMA_END = ("<|eom_id|>", "<|eot_id|>")
MARKERS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "<function=")
_SEPARATORS = " \t\r\n;,"


@dataclass(frozen=True)
class Printed:
    """A tool call recovered from text: `arguments` is JSON text (repaired later if need be),
    `form` names the format it was printed in (for the log and the docs' table)."""

    name: str
    arguments: str
    form: str


def canonical(name: str) -> str:
    """A tool name with `-` and `_` runs folded and case ignored: how near-miss names compare."""
    return re.sub(r"[-_]+", "_", name.lower())


def resolve_name(name: str, names: Collection[str]) -> str | None:
    """`name` if offered; else the one offered tool it equals with `-` and `_` swapped (a
    server prefix written `my_server` for `my-server`); None when none or several match."""
    if name in names:
        return name
    swapped = [n for n in names if n.replace("-", "_") == name.replace("-", "_")]
    return swapped[0] if len(swapped) == 1 else None


# ----------------------------------------------------------------------------- reasoning


def split_reasoning(text: str) -> tuple[str, str]:
    """(reply, reasoning): `<think>…</think>` blocks taken out of the text. An unclosed
    `<think>` runs to the end (the reply was cut during it); a `</think>` with no opening tag
    ends reasoning that began with the reply (DeepSeek-R1's template opens the tag itself)."""
    if THINK_OPEN not in text and THINK_CLOSE not in text:
        return text, ""
    reasoning: list[str] = []
    head, sep, rest = text.partition(THINK_CLOSE)
    if sep and THINK_OPEN not in head:
        reasoning.append(head)
        text = rest
    for found in _THINK.findall(text):
        reasoning.append(found.removeprefix(THINK_OPEN).removesuffix(THINK_CLOSE))
    reply = _THINK.sub("", text).replace(THINK_CLOSE, "")
    return reply.strip(), "\n".join(r.strip() for r in reasoning).strip()


# ----------------------------------------------------------------------------- printed calls


def _json_values(text: str) -> list[Any] | None:
    """Every JSON value in `text`, which holds nothing else but separators; else None."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _SEPARATORS:
            i += 1
        if i >= n:
            return values or None
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        values.append(value)


def _as_call(obj: Any, form: str) -> Printed | None:
    """A call-shaped object: {"name", "arguments"|"parameters"}, or that inside "function"."""
    if not isinstance(obj, dict):
        return None
    inner = obj.get("function")
    if isinstance(inner, dict) and "name" in inner:
        obj = inner
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    keys = set(obj) - {"name", "id", "type"}
    if not keys <= {"arguments", "parameters"}:
        return None  # an object that has a "name" among other fields is data, not a call
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, dict):
        text = json.dumps(args, ensure_ascii=False)
    elif isinstance(args, str):
        text = args
    else:
        return None
    return Printed(name, text, form)


def _calls(values: Iterable[Any], form: str) -> list[Printed] | None:
    out: list[Printed] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            call = _as_call(item, form)
            if call is None:
                return None
            out.append(call)
    return out or None


def _pythonic(text: str, form: str) -> list[Printed] | None:
    """`[name(a=1, b="x"), other()]` or `name.call(query="…")`: literal keyword arguments
    only, read with `ast` (never evaluated)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    out: list[Printed] = []
    for node in nodes:
        if not isinstance(node, ast.Call) or node.args:
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "call":
            func = func.value  # Llama 3.1's built-in tool form: brave_search.call(query=...)
        if not isinstance(func, ast.Name):
            return None
        args: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None
            try:
                args[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                return None
        try:
            out.append(Printed(func.id, json.dumps(args, ensure_ascii=False), form))
        except (TypeError, ValueError):
            return None
    return out or None


def _strict_values(text: str) -> list[Any] | None:
    """JSON values, or one Python-literal dict (Hermes 2 Pro's prompt shows the call as
    `{'arguments': <args-dict>, 'name': <function-name>}`, and models copy the quotes);
    nothing else may stand beside them, so a call followed by prose is no call."""
    values = _json_values(text)
    if values is not None:
        return values
    try:
        literal = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(literal, dict):
        return None
    try:
        return [json.loads(json.dumps(literal))]
    except (TypeError, ValueError):
        return None


def _tagged(body: str, open_tag: str, close_tag: str) -> list[str] | None:
    """The insides of `open…close` blocks that make up all of `body` (whitespace between
    them; the last may lack its closing tag, the reply was cut); None if anything else."""
    inside: list[str] = []
    rest = body.strip()
    while rest:
        if not rest.startswith(open_tag):
            return None
        block, _, rest = rest[len(open_tag) :].partition(close_tag)
        inside.append(block.strip())
        rest = rest.strip()
    return inside or None


def _marked(body: str) -> list[Printed] | None:
    """Calls in a chat template's tool-call markup, when that markup is all of `body`."""
    if body.startswith("<tool_call>"):  # Hermes 2 Pro, Qwen 2.5/3, many fine-tunes
        blocks = _tagged(body, "<tool_call>", "</tool_call>")
        found: list[Printed] = []
        for block in blocks or []:
            got = _calls(_strict_values(block) or [None], "hermes")
            if got is None:
                return None
            found += got
        return found or None
    if body.startswith("<|python_tag|>"):  # Llama 3.1/3.2/3.3
        rest = body.removeprefix("<|python_tag|>")
        for end in _LLAMA_END:
            rest, _, after = rest.partition(end)
            if after.strip():
                return None
        values = _json_values(rest)
        return _calls(values, "llama-json") if values else _pythonic(rest, "llama-builtin")
    if body.startswith("<function="):  # Llama 3.1's documented custom-tool format
        found = []
        for block in _tagged(body, "<function=", "</function>") or []:
            m = _LLAMA_FN_HEAD.match(block)
            if m is None:
                return None
            args = block[m.end() :].strip()
            if args and _strict_values(args) is None:
                return None
            found.append(Printed(m[1], args or "{}", "llama-function"))
        return found or None
    body = body.removesuffix("</s>").rstrip()
    if _MISTRAL_V11.match(body):  # Mistral tokenizer v11+: [TOOL_CALLS]name[ARGS]{...}
        found = []
        for part in body.split("[TOOL_CALLS]")[1:]:
            m = _MISTRAL_V11.match("[TOOL_CALLS]" + part)
            if m is None:
                return None
            values = _json_values(part[m.end() - len("[TOOL_CALLS]") :])
            if values is None or len(values) != 1 or not isinstance(values[0], dict):
                return None
            found.append(Printed(m[1], json.dumps(values[0], ensure_ascii=False), "mistral"))
        return found or None
    if body.startswith("[TOOL_CALLS]"):  # Mistral v3: [TOOL_CALLS] [{"name": ..., ...}]
        values = _json_values(body.removeprefix("[TOOL_CALLS]"))
        return _calls(values, "mistral") if values else None
    return None


def _plain(body: str, fenced: bool) -> list[Printed] | None:
    """Bare JSON call objects or Python-call syntax that are all of `body`."""
    if not body or (body[0] not in "{[" and "(" not in body):
        return None
    values = _json_values(body)
    if values is not None:
        return _calls(values, "fenced-json" if fenced else "bare-json")
    return _pythonic(body, "pythonic")


def printed_calls(text: str, names: Collection[str]) -> list[Printed] | None:
    """The tool calls printed in a reply that is nothing but those calls (`text` has had
    its reasoning taken out); None when it is an answer. A call quoted inside prose, or in
    a fence prose surrounds, is never taken: a model showing a format, or repeating a
    document, must not run tools. Every name must be one of `names`, the tools offered to
    this call (after `resolve_name`)."""
    if not names or not text:
        return None
    body = text.strip()
    fence = _FENCE.match(body)
    if fence is not None:
        if fence[1].lower() not in FENCE_LANGS:
            return None
        body = fence[2].strip()
    calls = _marked(body) or _plain(body, fence is not None)
    if calls is None or any(resolve_name(c.name, names) is None for c in calls):
        return None
    return calls


# ----------------------------------------------------------------------------- arguments


def _fenced(raw: str) -> str:
    m = _FENCE.match(raw.strip())
    return m[2] if m else raw


def parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str]:
    """(arguments, "") or (None, an error for the model). Repairs what is unambiguous: a
    fenced block, text after one complete object, single quotes and Python literals, a JSON
    string that holds the object. Anything else is refused quoting the parse error."""
    try:
        return _parsed(raw)
    except RecursionError:  # thousands of nested brackets: the decoders' depth limit
        return None, "arguments are nested too deeply; send one flat JSON object"


def _parsed(raw: str) -> tuple[dict[str, Any] | None, str]:
    if raw[:1] == "{" and isinstance(plain := _plain_object(raw), dict):
        return plain, ""
    text = _fenced(raw).strip()
    if not text:
        return {}, ""
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        value = _repaired(text)
        if value is None:
            shown = raw if len(raw) <= 200 else raw[:199] + "…"
            return None, (
                f"arguments are not valid JSON ({exc.msg} at char {exc.pos}) in {shown!r}; "
                "send one JSON object matching the tool's schema"
            )
    if isinstance(value, str):  # a JSON string holding the JSON object
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, not {type(value).__name__}"
    return value, ""


def _plain_object(raw: str) -> Any:
    """The usual case, one plain JSON object, decoded by msgspec (in C, several times faster
    than json.loads); None when msgspec refuses it (NaN, 1e400, a lone surrogate escape, bad
    JSON), which then takes json's path. Where msgspec decodes, json.loads gives the same
    value (tests/test_salvage.py checks it)."""
    try:
        return msgspec.json.decode(raw)
    except ValueError:  # msgspec.DecodeError, or UnicodeEncodeError for a lone surrogate
        return None


def _repaired(text: str) -> dict[str, Any] | None:
    try:  # one complete object, then text that is no second JSON value
        value, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        value, end = None, 0
    if isinstance(value, dict):
        rest = text[end:].strip()
        if not rest or _json_values(rest) is None:
            return value
        return None
    try:  # {'a': 'b', 'c': True}
        literal = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(literal, dict) or not all(isinstance(k, str) for k in literal):
        return None
    try:
        decoded: dict[str, Any] = json.loads(json.dumps(literal))
    except (TypeError, ValueError):
        return None
    return decoded
