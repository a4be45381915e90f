"""build/aiogram_trim.py: the binary's Update, Message and Chat with the fields gantry never reads
typed Any.

Checked three ways: gantry's own code reads none of the trimmed names; on a lean copy of
the installed aiogram (as the binary has it) an Update carrying trimmed kinds and fields
still parses, keeps their data as JSON, and creates none of their classes, while the fields
gantry reads are typed as before; and the rewrite refuses an aiogram of another shape.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import aiogram_lean  # noqa: E402
import aiogram_trim  # noqa: E402
from lean_common import LeanError  # noqa: E402


def _names_read(tree: ast.AST) -> set[str]:
    """Attribute names a module reads: `x.name`, and `getattr(x, "name"...)`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            found.add(node.args[1].value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)  # ("photo", "voice", ...) looped over with getattr
    return found


def trimmed_but_read(trimmed: dict[str, list[str]], root: Path) -> dict[str, list[str]]:
    """module -> the trimmed names its code reads (names kept in another trimmed class, such
    as `poll`, excepted: gantry reads those on that class)."""
    kept = set().union(*(keep for _cls, keep in aiogram_trim.KEEP.values()))
    names = {n for fields in trimmed.values() for n in fields} - kept
    hits: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        read = _names_read(ast.parse(path.read_text())) & names
        if read:
            hits[str(path.relative_to(root.parent))] = sorted(read)
    return hits


def test_gantry_reads_no_trimmed_field() -> None:
    trimmed = aiogram_trim.trimmed_names()
    assert "game" in trimmed["Message"] and "edited_message" in trimmed["Update"]
    assert trimmed_but_read(trimmed, ROOT / "gantry") == {}


def test_the_scan_sees_a_read_of_a_trimmed_field(tmp_path: Path) -> None:
    pkg = tmp_path / "gantry"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f(msg):\n    return msg.invoice, getattr(msg, 'giveaway')\n")
    assert trimmed_but_read(aiogram_trim.trimmed_names(), pkg) == {
        "gantry/m.py": ["giveaway", "invoice"]}


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return aiogram_lean.write_lean_copy(tmp_path_factory.mktemp("lean-aiogram"))


PARSE = textwrap.dedent("""
    import json, sys
    import gantry.channel.telegram.lazy_aiogram as shim
    from aiogram.methods import GetUpdates
    from aiogram.methods.base import Response
    from aiogram.types.base import TelegramObject
    body = json.loads(sys.argv[1])
    upd = Response[GetUpdates.__returning__].model_validate(body).result
    msg, other = upd[0].message, upd[1]
    seen, stack = set(), [TelegramObject]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    print(json.dumps({
        "shim": shim.state, "game": msg.game, "invoice": msg.invoice,
        "external_reply": msg.external_reply, "edited": other.edited_message,
        "boost": other.chat_boost, "photo": type(msg.photo[0]).__name__,
        "chat": type(msg.chat).__name__, "from": type(msg.from_user).__name__,
        "entity": type(msg.entities[0]).__name__, "reply": type(msg.reply_to_message).__name__,
        "text": msg.text, "dump": upd[0].model_dump(mode="json", exclude_none=True,
                                                    by_alias=True),
        "classes": sorted(c.__name__ for c in seen)}))
""")
GAME = {"title": "g", "description": "d", "photo": [
    {"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}]}
INVOICE = {"title": "t", "description": "d", "start_parameter": "s", "currency": "EUR",
           "total_amount": 100}
EXTERNAL = {"origin": {"type": "user", "date": 1_700_000_000,
                       "sender_user": {"id": 1, "is_bot": False, "first_name": "A"}}}
USER = {"id": 4242, "is_bot": False, "first_name": "Ann"}
CHAT = {"id": 4242, "type": "private", "first_name": "Ann"}
MESSAGE = {
    "message_id": 7, "date": 1_700_000_000, "chat": CHAT, "from": USER, "text": "hi /x",
    "entities": [{"type": "bot_command", "offset": 3, "length": 2}],
    "photo": [{"file_id": "f", "file_unique_id": "k", "width": 90, "height": 60}],
    "reply_to_message": {"message_id": 6, "date": 1_700_000_000, "chat": CHAT, "text": "q"},
    "game": GAME, "invoice": INVOICE, "external_reply": EXTERNAL}
BOOST = {"chat": CHAT, "boost": {"boost_id": "b", "add_date": 1, "expiration_date": 2,
                                 "source": {"source": "premium", "user": USER}}}


def test_an_update_with_trimmed_fields_parses_and_keeps_them_as_json(lean: Path) -> None:
    body = {"ok": True, "result": [
        {"update_id": 1, "message": MESSAGE},
        {"update_id": 2, "edited_message": {**MESSAGE, "edit_date": 5}, "chat_boost": BOOST}]}
    env = {**os.environ, "PYTHONPATH": f"{lean}{os.pathsep}{ROOT}"}
    r = subprocess.run([sys.executable, "-c", PARSE, json.dumps(body)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["shim"] == "lazy"
    assert (out["game"], out["invoice"], out["external_reply"]) == (GAME, INVOICE, EXTERNAL)
    assert out["edited"]["edit_date"] == 5 and out["boost"] == BOOST
    assert (out["photo"], out["chat"], out["from"], out["entity"], out["reply"]) == (
        "PhotoSize", "Chat", "User", "MessageEntity", "Message")
    assert out["text"] == "hi /x"
    assert out["dump"] == {"update_id": 1, "message": MESSAGE}
    never = {"Game", "Invoice", "ExternalReplyInfo", "ChatBoostUpdated", "PassportData",
             "Giveaway", "Story", "ForumTopicCreated", "SuccessfulPayment", "MessageOrigin"}
    assert never.isdisjoint(out["classes"]), never & set(out["classes"])


def _module(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "update.py"
    path.write_text(textwrap.dedent(body))
    return path


UPDATE_OK = """
    from __future__ import annotations
    from typing import TYPE_CHECKING, Any
    class Update:
        update_id: int
        message: Message | None = None
        callback_query: CallbackQuery | None = None
        message_reaction: MessageReactionUpdated | None = None
        poll: Poll | None = None
        edited_message: Message | None = None
        note: str | None = None
"""


def test_the_rewrite_types_only_unread_fields_that_name_a_class(tmp_path: Path) -> None:
    code, trimmed = aiogram_trim.trim("aiogram.types.update", _module(tmp_path, UPDATE_OK))
    assert trimmed == ["edited_message"]
    ns: dict[str, object] = {}
    exec(code, ns)
    notes = ns["Update"].__annotations__  # type: ignore[attr-defined]
    assert notes["edited_message"] == "Any" and notes["message"] == "Message | None"
    assert notes["note"] == "str | None"


@pytest.mark.parametrize("body, why", [
    (UPDATE_OK.replace("from typing import TYPE_CHECKING, Any", "import typing"), "typing"),
    (UPDATE_OK.replace("class Update:", "class Updates:"), "exactly one class"),
    (UPDATE_OK.replace("        callback_query: CallbackQuery | None = None\n", ""),
     "no field"),
    (UPDATE_OK.replace("edited_message: Message | None = None", "edited_message: Message"),
     "required"),
    (UPDATE_OK.replace("        edited_message: Message | None = None\n", ""),
     "nothing to trim"),
], ids=["no-any", "no-class", "kept-field-gone", "required", "nothing"])
def test_the_rewrite_refuses_another_shape(tmp_path: Path, body: str, why: str) -> None:
    with pytest.raises(LeanError, match=why):
        aiogram_trim.trim("aiogram.types.update", _module(tmp_path, body))
