"""Run as a script by tests/test_aiogram_lazy.py: validate and serialise aiogram models.

    python -m tests._aiogram_walk stock PAYLOADS RESULTS           # stock aiogram: both written
    python -m tests._aiogram_walk lazy PAYLOADS RESULTS [--seed N] [--lean]
                                                                   # gantry's shim first

Each model is fed its payload and a broken copy of it; the result recorded is what validation
and every kind of serialisation produce (or the error they raise), so two runs can be compared
for equality. Payloads are generated from the stock models' resolved field annotations; the
types and methods gantry's channel uses also get realistic payloads (USED). --lean: aiogram
must be the binary's copy (build/aiogram_lean.py: lazy methods and types) first on sys.path.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

MESSAGE = {
    "message_id": 7, "date": 1_700_000_000, "text": "héllo *world* 🙂",
    "chat": {"id": 4242, "type": "private", "first_name": "Ann", "username": "ann"},
    "from": {"id": 4242, "is_bot": False, "first_name": "Ann", "language_code": "en"},
    "entities": [{"type": "bold", "offset": 6, "length": 7},
                 {"type": "text_link", "offset": 0, "length": 5, "url": "https://example.org/"}],
}
# (kind, name, payload): the types and methods gantry.channel.telegram sends and receives.
USED: list[tuple[str, str, Any]] = [
    ("type", "Update", {"update_id": 10, "message": MESSAGE}),
    ("type", "Message", MESSAGE),
    ("type", "User", {"id": 1, "is_bot": True, "first_name": "bot", "username": "gantry_bot",
                      "can_join_groups": True}),
    ("type", "Chat", {"id": -100, "type": "supergroup", "title": "t"}),
    ("type", "MessageEntity", {"type": "pre", "offset": 0, "length": 3, "language": "py"}),
    ("type", "BotCommand", {"command": "new", "description": "start a new conversation"}),
    ("method", "GetMe", {}),
    ("method", "DeleteWebhook", {"drop_pending_updates": False}),
    ("method", "SetMyCommands", {"commands": [{"command": "help", "description": "what"}]}),
    ("method", "GetUpdates", {"offset": 11, "timeout": 25, "allowed_updates": ["message"]}),
    ("method", "SendMessage", {"chat_id": 4242, "text": "hi", "parse_mode": None,
                               "entities": MESSAGE["entities"]}),
    ("method", "EditMessageText", {"chat_id": 4242, "message_id": 7, "text": "hi",
                                   "parse_mode": None, "entities": None}),
    ("method", "DeleteMessage", {"chat_id": 4242, "message_id": 7}),
    ("method", "SendChatAction", {"chat_id": 4242, "action": "typing"}),
    ("response", "GetUpdates", [{"update_id": 10, "message": MESSAGE}]),
    ("response", "GetMe", {"id": 1, "is_bot": True, "first_name": "bot", "username": "b"}),
    ("response", "DeleteWebhook", True),
    ("response", "SetMyCommands", True),
    ("response", "SendMessage", MESSAGE),
    ("response", "EditMessageText", MESSAGE),
    ("response", "DeleteMessage", True),
    ("response", "SendChatAction", True),
]


class Skip(Exception):
    """No JSON value can be made for this annotation."""


def sample(ann: Any, depth: int) -> Any:
    """A JSON value for annotation `ann` (aiogram's resolved field annotations)."""
    origin = get_origin(ann)
    if ann is Any:
        return "any"
    if origin is typing.Annotated:
        return sample(get_args(ann)[0], depth)
    if origin in (Union, types.UnionType):
        for option in get_args(ann):
            if option is type(None):
                continue
            try:
                return sample(option, depth)
            except Skip:
                continue
        raise Skip(repr(ann))
    if origin is Literal:
        return get_args(ann)[0]
    if origin in (list, tuple, set, frozenset, typing.Sequence):
        args = [a for a in get_args(ann) if a is not Ellipsis]
        return [sample(args[0], depth + 1)] if args else []
    if origin is dict:
        return {"k": sample(get_args(ann)[1], depth + 1)}
    if ann is bool:
        return True
    if ann is int:
        return 3
    if ann is float:
        return 1.5
    if ann is str:
        return "s"
    if ann is dt.datetime:
        return 1_700_000_000
    if isinstance(ann, type) and hasattr(ann, "model_fields"):
        return model_payload(ann, depth + 1)
    if isinstance(ann, type) and issubclass(ann, str):  # str enums
        return next(iter(ann)).value  # type: ignore[call-overload]
    raise Skip(repr(ann))


def model_payload(cls: Any, depth: int = 0) -> dict[str, Any]:
    """Every field near the top, only required fields deeper down (models nest recursively)."""
    out: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        if not field.is_required() and depth > 1:
            continue
        try:
            out[field.alias or name] = sample(field.annotation, depth)
        except Skip:
            if field.is_required():
                raise
    return out


def catalogue() -> dict[str, Any]:
    """Payloads for every model aiogram.types and aiogram.methods export (stock aiogram)."""
    import aiogram.methods as m
    import aiogram.types as t

    cases: list[list[Any]] = [list(c) for c in USED]
    for kind, module in (("type", t), ("method", m)):
        for name in module.__all__:
            cls = getattr(module, name)
            if not (isinstance(cls, type) and hasattr(cls, "model_fields")) or name in (
                    "TelegramObject", "MutableTelegramObject", "TelegramMethod", "Request",
                    "Response"):
                continue
            try:
                cases.append([kind, name, model_payload(cls)])
            except Skip as exc:
                cases.append([kind, name, {"unbuildable": str(exc)}])
            if kind == "method":
                try:
                    cases.append(["response", name, sample(cls.__returning__, 0)])
                except Skip:
                    cases.append(["response", name, None])
    return {"cases": cases}


def broken(payload: Any) -> Any:
    """The same payload with its first value replaced by a value of the wrong kind."""
    if isinstance(payload, dict) and payload:
        first = next(iter(payload))
        return {**payload, first: {"wrong": ["kind"]}}
    return {"wrong": ["kind"]}


def outcome(fn: Any) -> Any:
    try:
        return {"ok": fn()}
    except Exception as exc:
        errors = getattr(exc, "errors", None)
        if callable(errors):
            return {"error": type(exc).__name__,
                    "details": [{k: repr(e.get(k)) for k in ("type", "loc", "msg", "input")}
                                for e in errors()]}
        return {"error": type(exc).__name__, "message": str(exc)}


def results(obj: Any) -> dict[str, Any]:
    return {
        "python": outcome(lambda: repr(obj.model_dump())),
        "python_alias_unset": outcome(lambda: repr(obj.model_dump(by_alias=True,
                                                                  exclude_unset=True))),
        "json_mode": outcome(lambda: obj.model_dump(mode="json", exclude_none=True)),
        "json": outcome(lambda: obj.model_dump_json(exclude_defaults=True)),
        "fields_set": sorted(obj.model_fields_set),
        "repr": repr(obj),
    }


def check(cases: list[list[Any]], seed: int | None) -> dict[str, Any]:
    import aiogram.methods as m
    import aiogram.types as t
    from aiogram.methods.base import Response

    order = list(range(len(cases)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    out: dict[str, Any] = {}
    for i in order:
        kind, name, payload = cases[i]
        key = f"{i}:{kind}:{name}"
        if kind == "type":
            cls = getattr(t, name)
        elif kind == "method":
            cls = getattr(m, name)
        else:
            cls = Response[getattr(m, name).__returning__]  # what aiogram's session builds
            payload = {"ok": True, "result": payload}
        entry = {}
        for label, data in (("valid", payload), ("broken", broken(payload))):
            res = outcome(lambda cls=cls, data=data: results(cls.model_validate(data)))
            entry[label] = res
            entry[label + "_json"] = outcome(
                lambda cls=cls, data=data: results(cls.model_validate_json(json.dumps(data))))
        out[key] = entry
    return out


def main(argv: list[str]) -> int:
    flavour, payloads, dst, *rest = argv
    if flavour == "lazy":
        import gantry.channel.telegram.lazy_aiogram as lazy

        if lazy.state != "lazy":
            print(f"shim not applied: {lazy.state}", file=sys.stderr)
            return 3
        if "--lean" in rest:
            import aiogram.methods
            import aiogram.types

            created = [m for m in sys.modules if m.startswith("aiogram.methods.")]
            types = [m for m in sys.modules if m.startswith("aiogram.types.")]
            if ("_LAZY_WHERE" not in vars(aiogram.methods) or len(created) > 4
                    or "_LAZY_WHERE" not in vars(aiogram.types) or len(types) > 30):
                print(f"not the lean aiogram: {aiogram.methods.__file__}, {created}, "
                      f"{len(types)} type modules", file=sys.stderr)
                return 4
        cases = json.loads(Path(payloads).read_text())["cases"]
    else:
        cases = catalogue()["cases"]
        Path(payloads).write_text(json.dumps({"cases": cases}))
    seed = int(rest[rest.index("--seed") + 1]) if "--seed" in rest else None
    Path(dst).write_text(json.dumps(check(cases, seed), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
