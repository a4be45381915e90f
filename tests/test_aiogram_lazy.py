"""gantry.channel.telegram.lazy_aiogram: aiogram's models built on first use, indistinguishable
from stock.

Every comparison runs stock aiogram and the shim in separate fresh interpreters (an import
cannot be undone in-process). tests/_aiogram_walk.py generates a payload for every type and
method aiogram exports (plus realistic ones for what gantry's channel uses) and records what
validation and serialisation produce; the shim's run must produce exactly the same.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

# The (kind, name) pairs gantry.channel.telegram sends or receives; the walk must include them.
CHANNEL_USES = {
    ("type", "Update"), ("type", "Message"), ("type", "User"), ("type", "Chat"),
    ("type", "MessageEntity"), ("type", "BotCommand"),
    *(("method", m) for m in ("GetMe", "DeleteWebhook", "SetMyCommands", "GetUpdates",
                              "SendMessage", "EditMessageText", "DeleteMessage",
                              "SendChatAction")),
    *(("response", m) for m in ("GetMe", "GetUpdates", "SendMessage", "EditMessageText")),
}


def _env(lean: Path | None) -> dict[str, str] | None:
    """None: the installed aiogram; else `lean` (a copy as the binary has it) comes first."""
    return None if lean is None else {**os.environ,
                                      "PYTHONPATH": f"{lean}{os.pathsep}{ROOT}"}


def _python(code: str, timeout: float = 600,
            lean: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(lean),
                          capture_output=True, text=True, timeout=timeout)


def _walk(flavour: str, payloads: Path, out: Path, *extra: str,
          lean: Path | None = None) -> dict[str, Any]:
    if lean is not None:
        extra = (*extra, "--lean")
    r = subprocess.run([sys.executable, "-m", "tests._aiogram_walk", flavour, str(payloads),
                        str(out), *extra], cwd=ROOT, capture_output=True, text=True,
                       timeout=900, env=_env(lean))
    assert r.returncode == 0, r.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="module")
def stock(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    d = tmp_path_factory.mktemp("aiogram-walk")
    payloads = d / "payloads.json"
    return payloads, _walk("stock", payloads, d / "stock.json")


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the installed aiogram with build/aiogram_lean.py's replacements: aiogram as
    frozen into the binary, method and type classes created on first use."""
    sys.path.insert(0, str(ROOT / "build"))
    import aiogram_lean

    return aiogram_lean.write_lean_copy(tmp_path_factory.mktemp("lean-aiogram"))


@pytest.fixture(scope="module")
def lean_untrimmed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same without build/aiogram_trim.py (Update, Message, Chat fully typed),
    whose kept-as-JSON fields would differ from stock by design; tests/test_build_aiogram_trim.py
    checks those."""
    sys.path.insert(0, str(ROOT / "build"))
    import aiogram_lean

    return aiogram_lean.write_lean_copy(tmp_path_factory.mktemp("lean-untrimmed"), trim=False)


@pytest.mark.parametrize("seed, lean_copy", [(None, False), (1, False), (None, True), (2, True)],
                         ids=["channel-types-first", "shuffled", "lean-channel-types-first",
                              "lean-shuffled"])
def test_models_validate_and_serialise_as_stock(
    stock: tuple[Path, dict[str, Any]], tmp_path: Path, seed: int | None, lean_copy: bool,
    request: pytest.FixtureRequest,
) -> None:
    payloads, expected = stock
    cases = json.loads(payloads.read_text())["cases"]
    walked = {(kind, name) for kind, name, _ in cases}
    assert walked >= CHANNEL_USES
    import aiogram.methods
    import aiogram.types

    models = [n for n in aiogram.types.__all__ if hasattr(getattr(aiogram.types, n),
                                                          "model_fields")]
    assert len([c for c in cases if c[0] == "type"]) >= len(models) - 2  # all but the bases
    valid = [k for k, v in expected.items() if "ok" in v["valid"]]
    assert len(valid) > 0.7 * len(expected), "the generated payloads mostly fail: fix the walker"

    got = _walk("lazy", payloads, tmp_path / "lazy.json",
                *(["--seed", str(seed)] if seed is not None else []),
                lean=request.getfixturevalue("lean_untrimmed") if lean_copy else None)
    assert got.keys() == expected.keys()
    differ = [k for k in expected if got[k] != expected[k]]
    assert not differ, (differ[:10], json.dumps(got[differ[0]])[:2000],
                        json.dumps(expected[differ[0]])[:2000])


@pytest.mark.parametrize("lean_copy", [False, True], ids=["stock-source", "lean"])
def test_shim_defers_every_model_until_first_use(
    lean_copy: bool, request: pytest.FixtureRequest
) -> None:
    """Every type and method is left unbuilt; with the lean copy most method and type
    classes are created only by this check, after the shim is done, and must be deferred all
    the same."""
    r = _python(textwrap.dedent("""
        import json
        import gantry.channel.telegram.lazy_aiogram as lazy
        import aiogram.methods as m, aiogram.types as t
        from aiogram.methods.base import Response
        lazy_methods = "_LAZY_WHERE" in vars(m) and "SendMessage" not in vars(m)
        def built(mod):
            return sorted(n for n in mod.__all__
                          if getattr(getattr(mod, n), '__pydantic_complete__', False))
        before = {"types": built(t), "methods": built(m)}
        r = Response[list[t.Update]].model_validate({"ok": True, "result": [{"update_id": 1,
            "message": {"message_id": 1, "date": 1, "chat": {"id": 1, "type": "private"},
                        "text": "hi"}}]})
        msg = r.result[0].message
        print(json.dumps({"state": lazy.state, "before": before, "text": msg.text,
                          "message_built": t.Message.__pydantic_complete__,
                          "dump": msg.chat.model_dump(exclude_none=True),
                          "lazy_methods": lazy_methods,
                          "sent": m.SendMessage(chat_id=1, text="x").model_dump(
                              include={"chat_id", "text"})}))
    """), lean=request.getfixturevalue("lean") if lean_copy else None)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "lazy"
    # Only aiogram.methods.base's own classes (Request, Response, TelegramMethod) are built.
    assert out["before"] == {"types": [], "methods": ["Request", "Response", "TelegramMethod"]}
    assert out["text"] == "hi" and out["message_built"] is False
    assert out["dump"] == {"id": 1, "type": "private"}
    assert out["lazy_methods"] is lean_copy
    assert out["sent"] == {"chat_id": 1, "text": "x"}


def test_lean_types_are_created_only_when_something_needs_them(lean: Path) -> None:
    """With the binary's lazy aiogram.types, gantry's channel and a getMe response create a
    few dozen type classes; the ones an Update's typed fields reach (build/aiogram_trim.py:
    what gantry reads, ~80 of the ~250 every field would) are created when the first
    getUpdates response is validated, and everything then validates and serialises."""
    r = _python(textwrap.dedent("""
        import json, sys
        import gantry.channel.telegram.lazy_aiogram as lazy
        import gantry.channel.telegram.channel
        from aiogram.methods import GetMe, GetUpdates, SendMessage
        from aiogram.methods.base import Response
        from aiogram.types.base import TelegramObject
        import aiogram.types as t

        def created():
            seen, stack = set(), [TelegramObject]
            while stack:
                for sub in stack.pop().__subclasses__():
                    if sub not in seen and sub.__module__.startswith("aiogram.types."):
                        seen.add(sub)
                        stack.append(sub)
            return len(seen)

        counts = {"import": created()}
        me = Response[GetMe.__returning__].model_validate(
            {"ok": True, "result": {"id": 1, "is_bot": True, "first_name": "b"}})
        sent = GetUpdates(offset=3, timeout=25).model_dump(mode="json", exclude_none=True)
        counts["get_me"] = created()
        message = {"message_id": 7, "date": 1, "chat": {"id": 5, "type": "private"},
                   "from": {"id": 5, "is_bot": False, "first_name": "Ann"}, "text": "hi",
                   "reply_to_message": {"message_id": 6, "date": 1, "text": "before",
                                        "chat": {"id": 5, "type": "private"}}}
        updates = Response[list[t.Update]].model_validate_json(json.dumps(
            {"ok": True, "result": [{"update_id": 1, "message": message}]}))
        counts["update"] = created()
        msg = updates.result[0].message
        print(json.dumps({
            "state": lazy.state, "lazy": "_LAZY_WHERE" in vars(t), "counts": counts,
            "me": me.result.model_dump(exclude_none=True), "sent": sent,
            "update_built": t.Update.__pydantic_complete__,
            "message": msg.model_dump(mode="json", exclude_none=True, by_alias=True),
            "reply": msg.reply_to_message.model_dump_json(exclude_none=True),
            "response": json.loads(updates.model_dump_json(exclude_none=True, by_alias=True)),
            "send": repr(SendMessage(chat_id=5, text="x", reply_parameters={"message_id": 7}
                                     ).reply_parameters.message_id),
            "all": len(t.__all__),
        }))
    """), lean=lean)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "lazy" and out["lazy"] is True
    counts = out["counts"]
    assert counts["import"] <= 30, counts  # what aiogram's own modules import by name
    assert counts["get_me"] - counts["import"] <= 2, counts  # User (and nothing it reaches)
    assert 50 < counts["update"] <= 100, counts  # what the typed fields reach, not all ~250
    assert out["me"] == {"id": 1, "is_bot": True, "first_name": "b"}
    assert out["sent"] == {"offset": 3, "timeout": 25}
    assert out["update_built"] is False  # built inline in the response, not on its own
    message = {"message_id": 7, "date": 1, "chat": {"id": 5, "type": "private"},
               "from": {"id": 5, "is_bot": False, "first_name": "Ann"}, "text": "hi",
               "reply_to_message": {"message_id": 6, "date": 1, "text": "before",
                                    "chat": {"id": 5, "type": "private"}}}
    assert out["message"] == message
    assert json.loads(out["reply"]) == message["reply_to_message"]
    assert out["response"] == {"ok": True, "result": [{"update_id": 1, "message": message}]}
    assert out["send"] == "7"


# ------------------------------------------------------------------ the shapes relied upon


def test_aiogram_types_still_rebuild_every_type_at_import() -> None:
    """The loop the shim answers: `for ...: X.model_rebuild(_types_namespace=...)` in
    aiogram/types/__init__.py. Gone or changed: re-check the shim against the new aiogram."""
    import importlib.util

    spec = importlib.util.find_spec("aiogram.types")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    loops = [
        node for node in tree.body if isinstance(node, ast.For)
        and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr == "model_rebuild"
                and [k.arg for k in c.keywords] == ["_types_namespace"]
                for c in ast.walk(node))
    ]
    assert len(loops) == 1, "aiogram.types' model_rebuild loop changed: re-check aiogram_lazy"
    from aiogram.client.session import base as session_base
    from aiogram.methods.base import Response, TelegramMethod
    from aiogram.types.base import TelegramObject

    assert TelegramObject.model_config.get("defer_build") is True
    assert "Response[method.__returning__]" in inspect.getsource(session_base)
    assert Response.__pydantic_generic_metadata__["parameters"]
    assert TelegramMethod.__module__ == "aiogram.methods.base"


def test_pydantic_deferral_hooks_unchanged() -> None:
    """What the shim relies on inside pydantic; a change here fails loudly, not at run time."""
    import pydantic
    from pydantic._internal import _config, _mock_val_ser, _model_construction

    from gantry.channel.telegram import lazy_aiogram as aiogram_lazy

    aiogram_lazy._check_pydantic()
    rebuild = inspect.getsource(pydantic.BaseModel.model_rebuild)
    assert "__pydantic_parent_namespace__" in rebuild
    assert "if already_complete and not force" in rebuild
    mocks = inspect.getsource(_mock_val_ser.set_model_mocks)
    assert "model_rebuild(raise_errors=False" in mocks
    meta = inspect.getsource(_model_construction.ModelMetaclass.__new__)
    assert "ConfigWrapper.for_model(bases" in meta
    assert "set_model_mocks(cls)" in meta
    assert "__pydantic_init_subclass__" in meta
    assert "getattr(cls, '__pydantic_parent_namespace__'" in meta
    assert "getattr(base, 'model_config'" in inspect.getsource(_config.ConfigWrapper.for_model)
    complete = inspect.getsource(_model_construction.complete_model_class)
    assert "cls.__pydantic_serializer__ =" in complete
    # A lazy aiogram.types' per-class namespace is read only through .items(): both places
    # pydantic reads __pydantic_parent_namespace__ unpack it so.
    assert "unpack_lenient_weakvaluedict(cls.__pydantic_parent_namespace__)" in rebuild
    assert "parent_namespace = unpack_lenient_weakvaluedict(parent_namespace)" in meta
    unpack = inspect.getsource(_model_construction.unpack_lenient_weakvaluedict)
    assert "for k, v in d.items():" in unpack


# ------------------------------------------------------------------ falling back to stock

CAPTURE = """
    import json, logging
    records = []
    class Keep(logging.Handler):
        def emit(self, r):
            records.append({"level": r.levelname, "name": r.name, "msg": r.getMessage(),
                            "reason": getattr(r, "reason", None)})
    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.DEBUG)
"""
REPORT = """
    import gantry.channel.telegram.lazy_aiogram as lazy
    import aiogram.methods as m, aiogram.types as t
    print(json.dumps({"state": lazy.state, "records": records,
                      "method_deferred": bool(m.TelegramMethod.model_config.get("defer_build")),
                      "update_built": t.Update.__pydantic_complete__,
                      "send_built": m.SendMessage.__pydantic_complete__}))
"""


def _fallback(setup: str, lean: Path | None = None) -> dict[str, Any]:
    r = _python(textwrap.dedent(CAPTURE) + textwrap.dedent(setup) + textwrap.dedent(REPORT),
                lean=lean)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    assert out["state"] == "stock"
    warnings = [x for x in out["records"] if x["level"] != "DEBUG"]
    assert len(warnings) == 1 and warnings[0]["level"] == "WARNING", warnings
    assert warnings[0]["name"] == "gantry.channel.aiogram_lazy"
    assert not out["method_deferred"]
    return out


@pytest.mark.parametrize("lean_copy", [False, True], ids=["stock-source", "lean"])
def test_fallback_when_pydantic_hooks_changed(
    lean_copy: bool, request: pytest.FixtureRequest
) -> None:
    out = _fallback("""
        import pydantic
        pydantic.BaseModel.__pydantic_init_subclass__ = staticmethod(lambda **kw: None)
    """, lean=request.getfixturevalue("lean") if lean_copy else None)
    assert out["update_built"] and out["send_built"]  # stock: everything built at import
    assert "classmethod" in out["records"][0]["reason"]


def test_fallback_when_the_rebuild_loop_is_gone() -> None:
    """An aiogram whose types/__init__ no longer rebuilds: the shim must notice and step back."""
    out = _fallback("""
        import importlib.abc, importlib.machinery, importlib.util, sys
        class NoLoop(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                if name != "aiogram.types":
                    return None
                real = importlib.machinery.PathFinder.find_spec(name, path)
                self.source = open(real.origin).read().split("# Load typing forward refs")[0]
                return importlib.util.spec_from_file_location(
                    name, real.origin, loader=self,
                    submodule_search_locations=real.submodule_search_locations)
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                exec(compile(self.source, module.__spec__.origin, "exec"), module.__dict__)
        sys.meta_path.insert(0, NoLoop())
    """)
    assert "rebuild loop was not seen" in out["records"][0]["reason"]


def test_fallback_when_aiogram_was_imported_first() -> None:
    out = _fallback("import aiogram\n")
    assert out["update_built"] and out["send_built"]
    assert out["records"][0]["reason"] == "already imported"


def _built_at_creation(module: str, cls: str) -> str:
    """Setup code: `module` is imported once with `cls` built as soon as it is created (the
    stock re-import after the fallback gets aiogram's own module)."""
    return f"""
        import importlib.abc, importlib.machinery, importlib.util, sys
        class BuiltAtCreation(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                if name != {module!r} or getattr(self, "done", False):
                    return None
                real = importlib.machinery.PathFinder.find_spec(name, path)
                self.source = open(real.origin).read() + "\\n{cls}.model_rebuild(force=True)\\n"
                return importlib.util.spec_from_file_location(name, real.origin, loader=self)
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                self.done = True
                exec(compile(self.source, module.__spec__.origin, "exec"), module.__dict__)
        sys.meta_path.insert(0, BuiltAtCreation())
    """


@pytest.mark.parametrize("lean_copy", [False, True], ids=["stock-source", "lean"])
def test_fallback_when_a_method_class_is_built_at_creation(
    lean_copy: bool, request: pytest.FixtureRequest
) -> None:
    """A method built when its class is created (at the import, or later with the lean
    methods package) is not what the shim expects: stock aiogram, one warning."""
    out = _fallback(_built_at_creation("aiogram.methods.get_me", "GetMe"),
                    lean=request.getfixturevalue("lean") if lean_copy else None)
    assert "GetMe" in out["records"][0]["reason"]
    assert out["send_built"]


def test_fallback_when_a_lean_type_class_is_built_at_creation(lean: Path) -> None:
    """The binary's lazy aiogram.types with a type built when created: stock aiogram, one
    warning, and every type then built as the installed rebuild loop would have."""
    out = _fallback(_built_at_creation("aiogram.types.user", "User"), lean=lean)
    assert "User" in out["records"][0]["reason"]
    assert out["update_built"] and out["send_built"]


def test_classes_created_on_demand_compile_each_annotation_once(lean_untrimmed: Path) -> None:
    """With the lean aiogram.types the ~220 classes an untrimmed Update reaches (the largest
    batch; trimmed, ~80) are created when the first Response[list[Update]] is made; the memo
    covers that batch too."""
    proc = _python(textwrap.dedent("""
        import builtins, collections, typing
        import gantry.channel.telegram.lazy_aiogram as shim
        from aiogram.methods.base import Response
        from aiogram.types import Update
        seen = collections.Counter()
        real = builtins.compile

        def counting(source, filename, mode, *args, **kwargs):
            if filename == "<string>" and mode == "eval":
                seen[source] += 1
            return real(source, filename, mode, *args, **kwargs)

        builtins.compile = counting
        Response[list[Update]].model_validate({"ok": True, "result": [{"update_id": 1}]})
        builtins.compile = real
        print(shim.state, sum(seen.values()), len(seen), max(seen.values()),
              "compile" in vars(typing))
        """), lean=lean_untrimmed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    state, total, distinct, most, shadowed = proc.stdout.split()
    assert state == "lazy" and shadowed == "False"
    assert int(distinct) > 100  # the batch's annotations did go through ForwardRef
    assert int(total) < 1.2 * int(distinct) and int(most) <= 5


def test_annotation_strings_are_compiled_once_during_the_import() -> None:
    """typing.ForwardRef's compile() is memoised while aiogram's classes are created (each
    distinct annotation string compiled once), and typing is left as it was afterwards."""
    proc = _python(textwrap.dedent("""
        import builtins, collections, typing
        import pydantic, pydantic._internal._mock_val_ser  # compiles of their own, before
        seen = collections.Counter()
        real = builtins.compile

        def counting(source, filename, mode, *args, **kwargs):
            if filename == "<string>" and mode == "eval":
                seen[source] += 1
            return real(source, filename, mode, *args, **kwargs)

        builtins.compile = counting
        import gantry.channel.telegram.lazy_aiogram as shim
        builtins.compile = real
        print(shim.state, sum(seen.values()), len(seen), max(seen.values()),
              "compile" in vars(typing))
        """))
    assert proc.returncode == 0, proc.stderr[-2000:]
    state, total, distinct, most, shadowed = proc.stdout.split()
    assert state == "lazy" and shadowed == "False"
    assert int(distinct) > 300  # aiogram's annotations did go through ForwardRef
    # without the memo: ~4,100 compiles of ~640 strings, the commonest a few hundred times
    assert int(total) < 1.2 * int(distinct) and int(most) <= 5
