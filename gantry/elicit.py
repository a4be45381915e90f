"""Elicitation: a server's question during a tool call, asked of the user whose turn made it.

The conversation is channel-neutral: the server's message, then one question per requested
field, each answer checked against the field's schema and asked again when it does not fit.
A channel supplies the `Dialog` (Telegram: inline-keyboard buttons; stdio: numbered
choices). Nothing here imports the MCP SDK: gantry/mcp/elicitation.py turns the outcome into the
SDK's ElicitResult. The answers go to the server only, never to the model as messages.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import anyio

log = logging.getLogger("gantry.elicit")

Action = Literal["accept", "decline", "cancel"]
Value = str | int | float | bool | list[str]
Kind = Literal["string", "number", "integer", "boolean", "enum", "multi"]
_PLAIN: dict[Any, Kind] = {"string": "string", "number": "number", "integer": "integer",
                           "boolean": "boolean"}

DEFAULT_TIMEOUT = 300.0  # seconds one question waits for its answer (ELICITATION_TIMEOUT_SECONDS)
MAX_TRIES = 10  # answers to one question that do not fit before the whole request is cancelled
CANCEL_WORDS = frozenset({"/cancel", "/stop"})
DECLINE_WORDS = frozenset({"/decline"})
ANSWER = "Answer"
ACCEPT = "Accept"
DECLINE = "Decline"
SKIP = "Skip"
YES, NO = "Yes", "No"
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


@dataclass(frozen=True)
class Caller:
    """Who made the turn a tool call runs in: the one person an elicitation may ask."""

    channel: str
    chat_id: str
    user_id: str
    group: bool = False
    scheduled: bool = False


TURN: ContextVar[Caller | None] = ContextVar("gantry_elicit_turn", default=None)
"""The running turn's caller, set by the agent for each turn (tool calls inherit it)."""


@dataclass(frozen=True)
class Question:
    """One prompt. `choices`: Telegram buttons, stdio numbered lines; any other answer is
    typed text. `typed`: whether typed text is a valid answer besides the choices. `empty`:
    the choice (Skip, or the default) an empty line takes where lines are typed (stdio)."""

    text: str
    choices: tuple[str, ...] = ()
    typed: bool = True
    empty: str = ""


class Dialog(Protocol):
    """A channel's side of the conversation with `caller` (only that user's answers count)."""

    async def ask(self, caller: Caller, question: Question) -> str:
        """Show the question; return the chosen choice or the typed text."""
        ...

    async def tell(self, caller: Caller, text: str) -> None:
        """A line the user reads that needs no answer."""
        ...


class Unsupported(ValueError):
    """A requested schema gantry cannot ask for (nested objects, unknown types)."""


@dataclass(frozen=True)
class Field:
    """One requested field, as the spec's restricted JSON Schema allows it."""

    key: str
    kind: Kind
    title: str
    description: str = ""
    required: bool = False
    default: Value | None = None
    options: tuple[tuple[str, str], ...] = ()  # (value, label)
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str | None = None
    min_items: int | None = None
    max_items: int | None = None

    def label(self, value: Any) -> str:
        """How a value reads to the user (an option's title rather than its id)."""
        if isinstance(value, bool):
            return YES if value else NO
        if isinstance(value, list):
            return ", ".join(self.label(v) for v in value)
        return next((lab for val, lab in self.options if val == value), str(value))


class Invalid(ValueError):
    """An answer that does not fit its field; `str()` says why, for the user."""


def _options(prop: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """An enum's (value, label) pairs: `oneOf`/`anyOf` of const+title, or `enum` with the
    legacy `enumNames`."""
    for key in ("oneOf", "anyOf"):
        if isinstance(prop.get(key), list):
            return tuple((str(o["const"]), str(o.get("title") or o["const"]))
                         for o in prop[key] if isinstance(o, Mapping) and "const" in o)
    values = prop.get("enum")
    if isinstance(values, list):
        names = prop.get("enumNames")
        if isinstance(names, list) and len(names) == len(values):
            return tuple((str(v), str(n)) for v, n in zip(values, names, strict=True))
        return tuple((str(v), str(v)) for v in values)
    return ()


def _num(prop: Mapping[str, Any], key: str) -> float | None:
    value = prop.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(prop: Mapping[str, Any], key: str) -> int | None:
    value = prop.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fields(schema: Mapping[str, Any]) -> list[Field]:
    """The fields of a requestedSchema, in its order; Unsupported names what cannot be asked."""
    props = schema.get("properties") or {}
    if not isinstance(props, Mapping):
        raise Unsupported("requestedSchema.properties is not an object")
    required = set(schema.get("required") or ())
    out: list[Field] = []
    for key, prop in props.items():
        if not isinstance(prop, Mapping):
            raise Unsupported(f"field {key!r} is not a schema")
        declared = prop.get("type")
        options: tuple[tuple[str, str], ...] = ()
        kind: Kind
        if declared == "array":
            items = prop.get("items")
            options = _options(items) if isinstance(items, Mapping) else ()
            if not options:
                raise Unsupported(f"field {key!r}: only arrays of enum strings can be asked")
            kind = "multi"
        elif declared == "string" and (options := _options(prop)):
            kind = "enum"
        elif declared in _PLAIN:
            kind = _PLAIN[declared]
        else:
            raise Unsupported(f"field {key!r} has type {declared!r}, which cannot be asked")
        default = prop.get("default")
        out.append(Field(
            key=str(key), kind=kind, title=str(prop.get("title") or key),
            description=str(prop.get("description") or ""), required=key in required,
            default=default if isinstance(default, str | int | float | bool | list) else None,
            options=options, minimum=_num(prop, "minimum"), maximum=_num(prop, "maximum"),
            min_length=_int(prop, "minLength"), max_length=_int(prop, "maxLength"),
            format=prop.get("format") if isinstance(prop.get("format"), str) else None,
            min_items=_int(prop, "minItems"), max_items=_int(prop, "maxItems"),
        ))
    return out


def _option(f: Field, text: str) -> str:
    """The option value `text` names: its number (1-based), its label or its value."""
    t = text.strip()
    if t.isdecimal() and 1 <= int(t) <= len(f.options):
        return f.options[int(t) - 1][0]
    for value, label in f.options:
        if t.casefold() in (value.casefold(), label.casefold()):
            return value
    raise Invalid("Choose one of: " + ", ".join(label for _, label in f.options))


def _string(f: Field, text: str) -> str:
    if f.min_length is not None and len(text) < f.min_length:
        raise Invalid(f"At least {f.min_length} characters, please")
    if f.max_length is not None and len(text) > f.max_length:
        raise Invalid(f"At most {f.max_length} characters, please")
    if f.format == "email" and not _EMAIL.fullmatch(text):
        raise Invalid("That is not an email address")
    if f.format == "uri":
        parts = urlsplit(text)
        if not (parts.scheme and (parts.netloc or parts.path)):
            raise Invalid("That is not a URI (such as https://example.com)")
    if f.format == "date":
        try:
            date.fromisoformat(text)
        except ValueError:
            raise Invalid("That is not a date as YYYY-MM-DD") from None
    if f.format == "date-time":
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise Invalid("That is not a date and time as YYYY-MM-DDTHH:MM") from None
    return text


def _number(f: Field, text: str) -> int | float:
    value: int | float
    try:
        value = int(text) if f.kind == "integer" or text.lstrip("+-").isdecimal() else float(text)
    except ValueError:
        raise Invalid("A whole number, please" if f.kind == "integer" else
                      "A number, please") from None
    if not math.isfinite(value):
        raise Invalid("A finite number, please")
    if f.minimum is not None and value < f.minimum:
        raise Invalid(f"{f.minimum:g} or more, please")
    if f.maximum is not None and value > f.maximum:
        raise Invalid(f"{f.maximum:g} or less, please")
    return value


def parse(f: Field, text: str) -> Value:
    """The value of a typed answer for `f`, or Invalid saying why it does not fit."""
    text = text.strip()
    if not text:
        raise Invalid("An answer, please")
    if f.kind == "boolean":
        word = text.casefold()
        if word in ("yes", "y", "true", "1"):
            return True
        if word in ("no", "n", "false", "0"):
            return False
        raise Invalid("Yes or no, please")
    if f.kind == "enum":
        return _option(f, text)
    if f.kind == "multi":
        picked = list(dict.fromkeys(_option(f, part) for part in re.split(r"[,\n]", text)
                                    if part.strip()))
        if f.min_items is not None and len(picked) < f.min_items:
            raise Invalid(f"Choose at least {f.min_items}")
        if f.max_items is not None and len(picked) > f.max_items:
            raise Invalid(f"Choose at most {f.max_items}")
        return picked
    if f.kind in ("number", "integer"):
        return _number(f, text)
    return _string(f, text)


def _default_choice(f: Field) -> str:
    return f"Default: {f.label(f.default)}"


def question(f: Field, number: int, total: int, problem: str = "") -> Question:
    """The prompt for field `f` (after `problem`, the last answer's fault, if any)."""
    head = f"{problem}\n" if problem else ""
    lines = [f"{head}({number}/{total}) {f.title}" + ("" if f.required else " (optional)")]
    if f.description and f.description != f.title:
        lines.append(f.description)
    choices: list[str] = []
    typed = True
    if f.kind == "boolean":
        choices, typed = [YES, NO], False
    elif f.kind == "enum":
        choices, typed = [label for _, label in f.options], False
    elif f.kind == "multi":
        lines += [f"  {i}. {label}" for i, (_, label) in enumerate(f.options, 1)]
        lines.append("Type the numbers or names, separated by commas.")
    else:
        hints = {"email": "an email address", "uri": "a URI", "date": "a date, YYYY-MM-DD",
                 "date-time": "a date and time, YYYY-MM-DDTHH:MM"}
        hint = hints.get(f.format or "", "a whole number" if f.kind == "integer" else
                         "a number" if f.kind == "number" else "")
        if f.minimum is not None or f.maximum is not None:
            lo = f"{f.minimum:g}" if f.minimum is not None else "…"
            hi = f"{f.maximum:g}" if f.maximum is not None else "…"
            hint = f"{hint} from {lo} to {hi}".strip()
        if hint:
            lines.append(f"Type {hint}.")
    shortcut = _default_choice(f) if f.default is not None else "" if f.required else SKIP
    if shortcut:
        choices.append(shortcut)
    return Question("\n".join(lines), tuple(choices), typed, shortcut)


@dataclass
class Outcome:
    """What the user did: the action, and the content of an accepted form."""

    action: Action
    content: dict[str, Value] | None = None
    answered: bool = True  # False: a question waited out its timeout (nobody answered)


class _Ended(Exception):
    def __init__(self, action: Action, answered: bool = True) -> None:
        self.action = action
        self.answered = answered


async def _ask(dialog: Dialog, caller: Caller, q: Question, timeout: float) -> str:
    """One answer: /cancel and /decline end the whole request; no answer in time cancels."""
    with anyio.move_on_after(timeout) as waited:
        answer = await dialog.ask(caller, q)
    if waited.cancelled_caught:
        await dialog.tell(caller, f"No answer within {timeout:g} s: the request is cancelled.")
        raise _Ended("cancel", answered=False)
    word = answer.strip().split("@", 1)[0].casefold()
    if word in CANCEL_WORDS:
        raise _Ended("cancel")
    if word in DECLINE_WORDS:
        raise _Ended("decline")
    return answer


def _pick(q: Question, answer: str) -> str | None:
    """The choice an answer names (case-insensitive), if it names one."""
    return next((c for c in q.choices if c.casefold() == answer.strip().casefold()), None)


async def _choose(dialog: Dialog, caller: Caller, text: str, choices: tuple[str, ...],
                  timeout: float) -> str:
    """One of `choices` (typed text is not an answer): asked again, MAX_TRIES at most."""
    for _ in range(MAX_TRIES):
        answer = await _ask(dialog, caller, Question(text, choices, False), timeout)
        if (chosen := _pick(Question(text, choices), answer)) is not None:
            return chosen
        text = " or ".join(choices) + "?"
    await dialog.tell(caller, "Too many answers that do not fit: the request is cancelled.")
    raise _Ended("cancel")


async def _field(dialog: Dialog, caller: Caller, f: Field, number: int, total: int,
                 timeout: float) -> tuple[bool, Value | None]:
    """(answered, value) for one field; (False, None) when the user skipped it."""
    problem = ""
    for _ in range(MAX_TRIES):
        q = question(f, number, total, problem)
        answer = await _ask(dialog, caller, q, timeout)
        chosen = _pick(q, answer)
        if chosen == SKIP:
            return False, None
        if f.default is not None and chosen == _default_choice(f):
            return True, f.default
        try:
            return True, parse(f, answer)
        except Invalid as exc:
            problem = f"{exc}."
    await dialog.tell(caller, "Too many answers that do not fit: the request is cancelled.")
    raise _Ended("cancel")


async def converse_form(dialog: Dialog, caller: Caller, server: str, message: str,
                        schema: Mapping[str, Any], timeout: float) -> Outcome:
    """The form conversation: the message (answer or decline), then each field in turn."""
    try:
        wanted = fields(schema)
    except Unsupported as exc:
        log.warning("elicitation declined: its form cannot be asked",
                    extra={"server": server, "why": str(exc)})
        await dialog.tell(caller, f"MCP server {server!r} asked a question gantry cannot "
                          f"show ({exc}); declined.")
        return Outcome("decline")
    intro = (f"MCP server {server!r} asks:\n{message}\n\n"
             f"{len(wanted)} question(s) follow; /decline declines, /cancel cancels.")
    try:
        if await _choose(dialog, caller, intro, (ANSWER, DECLINE), timeout) == DECLINE:
            raise _Ended("decline")
        content = await _fields(dialog, caller, wanted, timeout)
    except _Ended as end:
        await _said(dialog, caller, end.action)
        return Outcome(end.action, answered=end.answered)
    await _said(dialog, caller, "accept")
    return Outcome("accept", content)


async def _fields(dialog: Dialog, caller: Caller, wanted: Sequence[Field],
                  timeout: float) -> dict[str, Value]:
    content: dict[str, Value] = {}
    for i, f in enumerate(wanted, 1):
        answered, value = await _field(dialog, caller, f, i, len(wanted), timeout)
        if answered and value is not None:
            content[f.key] = value
    return content


async def ask_fields(dialog: Dialog, caller: Caller, intro: str, wanted: Sequence[Field],
                     timeout: float) -> Outcome:
    """The user's own request's questions (an MCP prompt's missing arguments): `intro` told,
    then each field in turn, as a server's form asks them; "Cancelled." when it ends early."""
    await dialog.tell(caller, intro)
    try:
        content = await _fields(dialog, caller, wanted, timeout)
    except _Ended as end:
        await _said(dialog, caller, end.action)
        return Outcome(end.action, answered=end.answered)
    return Outcome("accept", content)


async def converse_url(dialog: Dialog, caller: Caller, server: str, message: str, url: str,
                       timeout: float) -> Outcome:
    """URL mode: the https link is shown and the user confirms (accept) or declines."""
    if urlsplit(url).scheme != "https" or not urlsplit(url).netloc:
        log.warning("elicitation declined: its URL is not https", extra={"server": server})
        return Outcome("decline")
    text = (f"MCP server {server!r} asks you to open this link:\n{message}\n{url}\n\n"
            f"{ACCEPT} once you have opened it, or {DECLINE}.")
    try:
        chosen = await _choose(dialog, caller, text, (ACCEPT, DECLINE), timeout)
    except _Ended as end:
        await _said(dialog, caller, end.action)
        return Outcome(end.action, answered=end.answered)
    action: Action = "accept" if chosen == ACCEPT else "decline"
    await _said(dialog, caller, action)
    return Outcome(action)


async def _said(dialog: Dialog, caller: Caller, action: Action) -> None:
    text = {"accept": "Sent.", "decline": "Declined.", "cancel": "Cancelled."}[action]
    await dialog.tell(caller, text)


def who_answers(caller: Caller | None, dialogs: Mapping[str, Dialog]) -> tuple[Dialog | None, str]:
    """The dialog to ask, or None and why nobody can answer (then decline at once)."""
    if caller is None:
        return None, "no turn made this call"
    if caller.scheduled:
        return None, "a scheduled turn has nobody to ask"
    if not caller.user_id:
        return None, "the turn's author is unknown"
    dialog = dialogs.get(caller.channel)
    if dialog is None:
        return None, f"the {caller.channel} channel cannot ask questions"
    return dialog, ""


def unanimous(callers: Sequence[Caller | None]) -> Caller | None:
    """The one caller behind every call in flight on a server, else None: the request
    carries no link to its call, so with two people's calls running nobody is asked."""
    distinct = set(callers)
    return distinct.pop() if len(distinct) == 1 else None
