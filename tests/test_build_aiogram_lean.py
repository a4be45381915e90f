"""build/aiogram_lean.py: the lazy aiogram.methods and aiogram.types and rewritten
client/bot.py of the binary.

Checked against the installed aiogram: the same names are exported and resolve to the same
classes, gantry's Telegram channel runs end to end on a copy of aiogram with the
replacements (as the binary has it) and creates only the method classes it sends, and the
rewrites refuse what they cannot handle safely.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.fakes.openai import FakeOpenAI, Reply
from tests.fakes.telegram import FakeTelegram

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import aiogram_lean  # noqa: E402

TOKEN = "123456789:AAE_fake-token-for-tests-only_xyz"
USER = 4242
# The method modules gantry.channel.telegram sends through, plus aiogram.methods.base.
CHANNEL_METHODS = {"base", "get_me", "delete_webhook", "set_my_commands", "get_updates",
                   "send_chat_action", "send_message", "edit_message_text",
                   "set_message_reaction"}  # (TELEGRAM_REACTIONS defaults on)


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return aiogram_lean.write_lean_copy(tmp_path_factory.mktemp("lean-aiogram"))


def _python(code: str, lean: Path, timeout: float = 300) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": f"{lean}{os.pathsep}{ROOT}"}
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict[str, object] = json.loads(r.stdout.splitlines()[-1])
    return out


def test_lazy_methods_export_the_installed_names_and_classes(lean: Path) -> None:
    import aiogram.methods

    where, all_names = aiogram_lean.methods_map()
    assert all_names == tuple(aiogram.methods.__all__)
    out = _python("""
import importlib, json, sys
import aiogram.methods as m
before = sorted(n for n in sys.modules if n.startswith("aiogram.methods."))
wrong = [n for n, (mod, attr) in m._LAZY_WHERE.items()
         if getattr(m, n) is not getattr(importlib.import_module(mod, m.__name__), attr)]
print(json.dumps({"file": m.__file__, "all": list(m.__all__), "wrong": wrong,
                  "before": before, "dir": "SendMessage" in dir(m)}))
""", lean)
    assert str(out["file"]).startswith(str(lean))
    assert out["all"] == list(aiogram.methods.__all__)
    assert out["wrong"] == []
    assert out["dir"] is True
    # `import aiogram` creates only the method aiogram's Dispatcher imports at module level.
    assert out["before"] == ["aiogram.methods.base", "aiogram.methods.get_updates"]
    for name in all_names:
        assert getattr(aiogram.methods, name) is getattr(  # the same mapping as stock
            sys.modules["aiogram.methods" + where[name][0]], where[name][1])


def test_lazy_types_export_the_installed_names_and_classes(lean: Path) -> None:
    """The lean aiogram.types: the installed names, each the class its submodule defines,
    no rebuild loop run (nothing built), the loop's extra namespace names kept."""
    import aiogram.types

    where, all_names, _kept, extra = aiogram_lean.types_map()
    assert all_names == tuple(aiogram.types.__all__)
    assert extra == {"List": "list", "Optional": "Optional", "Union": "Union",
                     "Literal": "Literal", "Default": "_Default"}
    out = _python("""
import importlib, json, sys
import aiogram.types as t
from aiogram.client.default import Default
before = sorted(n for n in sys.modules if n.startswith("aiogram.types."))
wrong = [n for n, (mod, attr) in t._LAZY_WHERE.items()
         if getattr(t, n) is not getattr(importlib.import_module(mod, t.__name__), attr)]
built = [n for n in t.__all__ if getattr(getattr(t, n), "__pydantic_complete__", False)]
extra = {k: repr(v) for k, v in t._NAMESPACE_EXTRA.items()}
print(json.dumps({"file": t.__file__, "all": list(t.__all__), "wrong": wrong, "built": built,
                  "before": before, "dir": "Update" in dir(t), "extra": extra,
                  "default": t._NAMESPACE_EXTRA["Default"] is Default}))
""", lean)
    assert str(out["file"]).startswith(str(lean))
    assert out["all"] == list(aiogram.types.__all__)
    assert out["wrong"] == [] and out["built"] == [] and out["dir"] is True
    assert out["default"] is True
    assert out["extra"] == {"List": "<class 'list'>", "Optional": "typing.Optional",
                            "Union": "typing.Union", "Literal": "typing.Literal",
                            "Default": "<class 'aiogram.client.default.Default'>"}
    # What `import aiogram` takes (its dispatcher, handlers and filters), not ~450 modules.
    assert len(out["before"]) <= 30, out["before"]
    assert "aiogram.types.sticker" not in out["before"]
    for name in all_names:
        assert getattr(aiogram.types, name) is getattr(  # the same mapping as stock
            sys.modules["aiogram.types" + where[name][0]], where[name][1])


def test_bot_imports_no_method_or_type_at_module_level(lean: Path) -> None:
    out = _python("""
import json, sys
import aiogram.client.bot as b
import aiogram.methods as m, aiogram.types as t
print(json.dumps({"file": b.__file__,
                  "names": sorted(n for n in (*m.__all__, *t.__all__)
                                  if n in vars(b) and n != "Default"),
                  "modules": sorted(n for n in sys.modules if n.startswith("aiogram.methods.")),
                  "types": sorted(n for n in sys.modules if n.startswith("aiogram.types."))}))
""", lean)
    assert str(out["file"]).startswith(str(lean))
    assert out["names"] == []
    assert len(out["modules"]) <= 3, out["modules"]  # base and what aiogram's dispatcher takes
    assert len(out["types"]) <= 30, out["types"]  # what `import aiogram` takes, not ~450


@pytest.mark.slow
def test_telegram_channel_runs_on_lean_aiogram_and_creates_few_methods(
    lean: Path, tmp_path: Path
) -> None:
    """`gantry run` (CHANNEL=telegram, streamed replies) on the lean copy against the fake Bot
    API: it answers, and at exit only the method modules the channel sends are imported."""
    tg, llm = FakeTelegram(token=TOKEN), FakeOpenAI()
    tg.start_in_thread()
    llm.start_in_thread()
    report = tmp_path / "modules.json"
    child = tmp_path / "child.py"
    child.write_text(
        "import atexit, json, sys\n"
        "def _report():\n"
        "    import aiogram, gantry.channel.telegram.lazy_aiogram as lazy\n"
        f"    open({str(report)!r}, 'w').write(json.dumps({{'state': lazy.state,\n"
        "        'file': aiogram.__file__, 'unittest': 'unittest' in sys.modules,\n"
        "        'methods': sorted(n for n in sys.modules if n.startswith('aiogram.methods.'))}))\n"
        "atexit.register(_report)\n"
        "from gantry.cli import main\n"
        "sys.exit(main(['run']))\n"
    )
    (tmp_path / "persona").mkdir()
    (tmp_path / "persona" / "PERSONA.md").write_text("You are a test bot.")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{lean}{os.pathsep}{ROOT}",
           "CHANNEL": "telegram", "TELEGRAM_BOT_TOKEN": TOKEN,
           "TELEGRAM_ALLOWED_USERS": str(USER), "TELEGRAM_API_URL": tg.base_url,
           "LLM_BASE_URL": llm.base_url, "LLM_API_KEY": "sk-lean", "LLM_MODEL": "fake-model",
           "DATA_DIR": str(tmp_path / "data"), "PERSONA_DIR": str(tmp_path / "persona"),
           "STREAM_REPLIES": "true"}
    reply = "Streaming " + " ".join(f"token{i}" for i in range(30))
    llm.push(Reply(reply, chunk_size=8, chunk_delay=0.08))
    proc = subprocess.Popen([sys.executable, str(child)], env=env, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        tg.push_text(USER, "stream it")
        tg.push_text(USER, "hello")
        want = [reply, "echo: hello"]
        deadline = time.monotonic() + 90
        while tg.current_texts(USER) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        texts = tg.current_texts(USER)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        tg.stop()
        llm.stop()
    assert texts == [reply, "echo: hello"], err[-3000:]
    assert tg.calls("editMessageText") and tg.calls("sendChatAction")
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "lazy model building not applied" not in err
    seen = json.loads(report.read_text())
    assert seen["state"] == "lazy"
    assert seen["file"].startswith(str(lean))
    assert seen["unittest"] is False  # aiogram's markers without unittest.mock (issue 44)
    methods = {m.removeprefix("aiogram.methods.") for m in seen["methods"]}
    assert methods >= CHANNEL_METHODS, sorted(CHANNEL_METHODS - methods)
    assert "answer_inline_query" not in methods and "send_photo" not in methods
    assert len(methods) <= len(CHANNEL_METHODS) + 3, sorted(methods)


# ------------------------------------------------------------------ what the rewrite refuses


def test_markers_replace_unittest_sentinels_one_per_name(tmp_path: Path) -> None:
    path = tmp_path / "base.py"
    path.write_text("from unittest.mock import sentinel\nA = sentinel.UNSET\n"
                    "B = sentinel.UNSET\nC = sentinel.OTHER\n")
    ns: dict[str, object] = {}
    exec(aiogram_lean.sentinel_source("m", path), ns)
    assert ns["A"] is ns["B"] and ns["A"] is not ns["C"]
    assert repr(ns["A"]) == "sentinel.UNSET" and type(ns["A"]) is type(ns["C"])


@pytest.mark.parametrize("body", [
    "from unittest.mock import sentinel\nX = sentinel\n",  # the namespace itself
    "from unittest.mock import sentinel as s\nX = s.A\n",  # another name
    "from unittest.mock import sentinel, Mock\nX = sentinel.A\n",
    "from unittest.mock import sentinel\nimport unittest\nX = sentinel.A\n",
    "from unittest.mock import sentinel\nsentinel.A = 1\n",
    "from unittest.mock import sentinel\n_Marker = 1\nX = sentinel.A\n",
    "X = 1\n",  # no such import at all
])
def test_markers_refuse_other_uses_of_sentinel(tmp_path: Path, body: str) -> None:
    path = tmp_path / "base.py"
    path.write_text(body)
    with pytest.raises(aiogram_lean.LeanError):
        aiogram_lean.sentinel_source("m", path)


def _bot(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bot.py"
    path.write_text("from __future__ import annotations\n"
                    "from ..methods import GetMe, SendMessage\n"
                    "from ..types import Chat\n" + body)
    return path


def test_rewrite_moves_method_imports_into_the_functions_using_them(tmp_path: Path) -> None:
    out = aiogram_lean.bot_source(_bot(tmp_path, (
        "class Bot:\n"
        "    async def get_me(self, timeout: GetMe | None = None) -> int:\n"
        "        'doc'\n"
        "        return await self(GetMe())\n"
        "    def other(self) -> None:\n"
        "        return None\n")))
    lines = out.splitlines()
    assert not any(ln.startswith("from ..methods") for ln in lines)
    moved = lines.index("        from ..methods import GetMe")
    assert lines[moved - 1].strip() in ("'doc'", '"""doc"""')
    assert out.count("from ..methods import") == 1  # not into other(), not for SendMessage


def test_rewrite_moves_type_imports_too_and_drops_annotation_only_ones(tmp_path: Path) -> None:
    path = tmp_path / "bot.py"
    path.write_text("from __future__ import annotations\n"
                    "from ..methods import GetMe\n"
                    "from ..types import Message, User\n"
                    "class Bot:\n"
                    "    async def get_me(self) -> User:\n"
                    "        return await self(GetMe())\n"
                    "    def check(self, m: Message) -> bool:\n"
                    "        return isinstance(m, Message)\n")
    lines = aiogram_lean.bot_source(path).splitlines()
    assert not any(ln.startswith("from ..") for ln in lines)
    assert "        from ..types import Message" in lines
    assert "        from ..methods import GetMe" in lines
    assert not any("import User" in ln for ln in lines)  # an annotation only: a string
    only_methods = aiogram_lean.bot_source(path, packages=("methods",)).splitlines()
    assert "from ..types import Message, User" in only_methods


@pytest.mark.parametrize("body, match", [
    ("class Bot:\n    DEFAULT = SendMessage\n", "class level"),
    ("class Bot:\n    def send(self, m=SendMessage) -> None:\n        pass\n", "def time"),
    ("class Bot:\n    @GetMe.wrap\n    def me(self) -> None:\n        pass\n", "def time"),
    ("class Bot(GetMe):\n    pass\n", "bases"),
    ("ALIAS = GetMe\n", "module level"),
    ("def f() -> None:\n    global GetMe\n    GetMe = 1\n", "global"),
    ("from ..types import User\nclass Bot:\n    ME = User\n", "class level"),
    ("from ..types import User\ndef f(u=User) -> None:\n    pass\n", "def time"),
    ("from ..types import User\nCHECK = (User,)\n", "module level"),
    ("from ..types import User as U\n", "as U"),
    ("from ..types import GetMe\n", "imported again"),
])
def test_rewrite_refuses_a_method_name_used_outside_a_function_body(
    tmp_path: Path, body: str, match: str
) -> None:
    with pytest.raises(aiogram_lean.LeanError, match=match):
        aiogram_lean.bot_source(_bot(tmp_path, body))


def test_rewrite_refuses_a_bot_without_future_annotations(tmp_path: Path) -> None:
    path = tmp_path / "bot.py"
    path.write_text("from ..methods import GetMe\ndef f() -> GetMe:\n    return GetMe()\n")
    with pytest.raises(aiogram_lean.LeanError, match="__future__"):
        aiogram_lean.bot_source(path)


@pytest.mark.parametrize("source, match", [
    ("from .get_me import GetMe\nGetMe.model_rebuild()\n__all__ = ('GetMe',)\n", "unexpected"),
    ("from .get_me import GetMe\nfrom . import get_me\n__all__ = ('GetMe',)\n", "unexpected"),
    ("from .get_me import GetMe\n__all__ = ('GetMe', 'SendMessage')\n", "SendMessage"),
    ("from .get_me import *\n__all__ = ()\n", "star"),
    ("from .get_me import GetMe\n", "no __all__"),
])
def test_methods_map_refuses_an_init_it_does_not_understand(
    tmp_path: Path, source: str, match: str
) -> None:
    path = tmp_path / "__init__.py"
    path.write_text(source)
    with pytest.raises(aiogram_lean.LeanError, match=match):
        aiogram_lean.methods_map(path)


TYPES_INIT = (
    "from typing import Optional\n"
    "from .user import User\n"
    "__all__ = ('User',)\n"
    "from ..client.default import Default as _Default\n"
    "_types_namespace = {'Optional': Optional, 'Default': _Default, "
    "**{name: globals()[name] for name in __all__}}\n"
    "for _entity_name in __all__:\n"
    "    _entity = globals()[_entity_name]\n"
    "    if hasattr(_entity, 'model_rebuild'):\n"
    "        _entity.model_rebuild(_types_namespace=_types_namespace)\n"
    "del _entity\n"
    "del _entity_name\n"
    "del _types_namespace\n"
)


def test_types_map_reads_the_shape_it_knows(tmp_path: Path) -> None:
    path = tmp_path / "__init__.py"
    path.write_text(TYPES_INIT)
    where, all_names, kept, extra = aiogram_lean.types_map(path)
    assert where == {"User": (".user", "User")} and all_names == ("User",)
    assert kept == ["from typing import Optional",
                    "from ..client.default import Default as _Default"]
    assert extra == {"Optional": "Optional", "Default": "_Default"}
    source = aiogram_lean.types_source(path)
    compile(source, "types", "exec")
    assert "model_rebuild" not in source
    assert "_NAMESPACE_EXTRA = {'Optional': Optional, 'Default': _Default}" in source


@pytest.mark.parametrize("old, new, match", [
    ("model_rebuild(_types_namespace=_types_namespace)",
     "model_rebuild(force=True, _types_namespace=_types_namespace)", "unexpected For"),
    ("for _entity_name in __all__:", "for _entity_name in sorted(__all__):", "unexpected For"),
    ("**{name: globals()[name] for name in __all__}", "**globals()", "spreads"),
    ("'Default': _Default, ", "'Default': _Default, 'Extra': Missing, ", "Missing"),
    ("'Default': _Default, ", "'Default': _Default, NAME: 1, ", "computed key"),
    ("del _entity\n", "del _entity\nUser.model_rebuild()\n", "unexpected Expr"),
    ("del _entity\n", "del _entity\nfrom typing import Any\n", "unexpected ImportFrom"),
    ("_types_namespace = {", "_other_namespace = {", "unexpected Assign"),
    ("__all__ = ('User',)\n", "__all__ = ('User', 'Chat')\n", "Chat"),
])
def test_types_map_refuses_an_init_it_does_not_understand(
    tmp_path: Path, old: str, new: str, match: str
) -> None:
    assert old in TYPES_INIT
    path = tmp_path / "__init__.py"
    path.write_text(TYPES_INIT.replace(old, new))
    with pytest.raises(aiogram_lean.LeanError, match=match):
        aiogram_lean.types_map(path)


def test_types_map_refuses_an_init_without_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "__init__.py"
    path.write_text(TYPES_INIT.split("_types_namespace = ")[0])
    with pytest.raises(aiogram_lean.LeanError, match="rebuild loop"):
        aiogram_lean.types_map(path)


def test_package_config_is_yaml_nuitka_reads() -> None:
    config = yaml.safe_load(aiogram_lean.package_config())
    assert [c["module-name"] for c in config] == ["aiogram.methods", "aiogram.types",
                                                  "aiogram.client.bot",
                                                  *aiogram_lean.SENTINEL_MODULES,
                                                  *aiogram_lean.aiogram_trim.KEEP]
    for entry in config:
        (rule,) = entry["anti-bloat"]
        compile(rule["module_code"], entry["module-name"], "exec")
        assert rule["module_code"] == aiogram_lean.sources()[entry["module-name"]]
    methods, _ = aiogram_lean.methods_map()
    types, *_ = aiogram_lean.types_map()
    for entry, where in ((config[0], methods), (config[1], types)):
        package = entry["module-name"]
        (implicit,) = entry["implicit-imports"]
        package_dir = Path(aiogram_lean.installed(package)).parent
        on_disk = {f"{package}.{p.stem}" for p in package_dir.glob("*.py")
                   if p.stem != "__init__"}
        assert set(implicit["depends"]) == {package + m for m, _ in where.values()}
        assert set(implicit["depends"]) <= on_disk
    assert "implicit-imports" not in config[2]
