"""aiogram's Update, Message and Chat as frozen into gantry: the fields it never reads typed Any.

Validating the first Update builds pydantic validators for every type its annotations reach:
Update names some 30 update kinds and Message some 120 fields (games, invoices, payments,
passport data, giveaways, stories, forum topics, video chats, boosts, gifts, checklists, ...),
~220 classes in all and ~15 MiB of a Telegram process's memory (issue 44), while gantry asks
Telegram for three update kinds (gantry/channel/telegram/poll.py, reactions.py) and reads two
dozen fields of a message and two of a chat (incoming.py, filter.py, poll.py). Here every other
field whose annotation names a Telegram type becomes `Any`: its value, if Telegram sends one, is
kept as the JSON it came as (a dict or a list), never an error, and no validator is built for
it. Fields of plain types (str, int, bool, dates) are left as they are: they reach no class.

`KEEP` lists, per class, what gantry reads; tests/test_build_aiogram_trim.py fails if gantry's
code reads a trimmed name. The rewrite fails the build if a class or a kept field is missing,
a trimmed field has no default, or the module does not import `Any`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lean_common import LeanError, installed, loads

# Update kinds gantry asks for (poll.ALLOWED_UPDATES + reactions.UPDATE); `poll` is kept
# because Message.poll reaches the same class (no saving) and gantry reads `.poll` on messages.
KEEP_UPDATE = frozenset({"update_id", "message", "callback_query", "message_reaction", "poll"})
# What gantry reads of a Message: its identity and sender, the text and its entities, a reply
# and its quote, and the kinds incoming.py reads or describes.
KEEP_MESSAGE = frozenset({
    "message_id", "date", "chat", "from_user", "text", "entities", "caption",
    "caption_entities", "media_group_id", "reply_to_message", "quote", "photo", "document",
    "voice", "audio", "video", "video_note", "animation", "sticker", "location", "venue",
    "contact", "poll", "dice"})
# What gantry reads of a Chat (its other typed fields are deprecated ones of ChatFullInfo's).
KEEP_CHAT = frozenset({"id", "type"})
# module -> (class, the fields kept typed)
KEEP: dict[str, tuple[str, frozenset[str]]] = {
    "aiogram.types.update": ("Update", KEEP_UPDATE),
    "aiogram.types.message": ("Message", KEEP_MESSAGE),
    "aiogram.types.chat": ("Chat", KEEP_CHAT),
}
# Annotation names that reach no Telegram class: such fields are left typed.
PLAIN = frozenset({"str", "int", "bool", "float", "None", "list", "DateTime", "Any"})
ANY = "Any"


def _binds_any(tree: ast.Module) -> bool:
    """Whether the module imports typing's Any at module level."""
    return any(isinstance(n, ast.ImportFrom) and n.module == "typing"
               and any(a.name == ANY and a.asname is None for a in n.names)
               for n in tree.body)


def trim(module: str, path: Path | None = None) -> tuple[str, list[str]]:
    """(the installed `module` with its class's unread typed fields annotated `Any`, the
    names trimmed)."""
    cls_name, keep = KEEP[module]
    path = path or installed(module)
    tree = ast.parse(path.read_text())
    if not _binds_any(tree):
        raise LeanError(f"{path}: no `from typing import Any` at module level")
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name]
    if len(classes) != 1:
        raise LeanError(f"{path}: not exactly one class {cls_name}")
    fields = {s.target.id: s for s in classes[0].body
              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    missing = sorted(keep - set(fields))
    if missing:
        raise LeanError(f"{path}: {cls_name} has no field {missing}; re-check "
                        "build/aiogram_trim.py's KEEP against gantry and this aiogram")
    trimmed: list[str] = []
    for name, stmt in fields.items():
        if name in keep or loads([stmt.annotation]) <= PLAIN:
            continue
        if stmt.value is None:
            raise LeanError(f"{path}:{stmt.lineno}: {cls_name}.{name} is required; a trimmed "
                            "field must have a default")
        stmt.annotation = ast.copy_location(ast.Name(ANY, ast.Load()), stmt.annotation)
        trimmed.append(name)
    if not trimmed:
        raise LeanError(f"{path}: nothing to trim in {cls_name}")
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", trimmed


def sources() -> dict[str, str]:
    """Module name -> trimmed source, for the installed aiogram."""
    return {module: trim(module)[0] for module in KEEP}


def trimmed_names() -> dict[str, list[str]]:
    """Class name -> the fields typed `Any` in the installed aiogram."""
    return {KEEP[module][0]: trim(module)[1] for module in KEEP}
