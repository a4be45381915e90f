"""build/mcp_lean.py: the lazy mcp package inits the binary is built with.

Checked against the installed mcp: the same names are exported, every one resolves, and the
MCP client path (gantry's host calling a real server) runs without importing the server-side
web stack. A new mcp release that moves or adds exports fails here, not in the image.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from tests.fakes.mcp_servers import static_fixture

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import mcp_lean  # noqa: E402

WEB_STACK = ("starlette", "sse_starlette", "uvicorn", "multipart", "cryptography")


def _all(module: str) -> list[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


def test_lazy_inits_export_what_the_installed_mcp_exports() -> None:
    assert sorted(mcp_lean.MCP_CLIENT) == sorted(_all("mcp.client"))
    assert sorted(mcp_lean.MCP_SERVER) == sorted(_all("mcp.server"))
    import mcp_types

    for name in _all("mcp"):
        assert name in mcp_lean.MCP or hasattr(mcp_types, name), name


def _copy_mcp(root: Path) -> Path:
    for package in ("mcp", "mcp_types"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        shutil.copytree(next(iter(spec.submodule_search_locations)), root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def lean_mcp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the installed mcp and mcp_types with the modules replaced, as the build does."""
    root = _copy_mcp(tmp_path_factory.mktemp("lean"))
    for module, code in mcp_lean.sources(_all("mcp")).items():
        mcp_lean.module_path(module, root).write_text(code)
    return root


@pytest.mark.slow
def test_the_client_path_runs_without_the_web_stack(lean_mcp: Path) -> None:
    server = str(static_fixture())
    code = f"""
import json, os, sys, anyio
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry

async def main():
    reg = Registry()
    host = Host(parse('[[server]]\\nname = "st"\\ncommand = {json.dumps(server)}\\n', os.environ),
                reg, os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        result = await reg.call("st__echo", '{{"text": "lean"}}')
        tg.cancel_scope.cancel()
    import mcp_types.methods
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({list(WEB_STACK)!r}))
    loaded += [m for m in sys.modules for n in {list(mcp_lean.NOT_FOLLOWED)!r}
               if m == n or m.startswith(n + ".")]
    import mcp
    names = [n for n in mcp.__all__ if getattr(mcp, n, None) is None]
    print(json.dumps({{"text": result.text, "web": loaded, "missing": names,
                      "file": mcp.__file__, "methods": mcp_types.methods.__file__}}))

anyio.run(main)
"""
    env = {**os.environ, "PYTHONPATH": f"{lean_mcp}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["file"].startswith(str(lean_mcp))
    assert out["methods"].startswith(str(lean_mcp))
    assert out["text"] == "lean"
    assert out["web"] == []
    assert out["missing"] == []  # every export still resolves, on first use


@pytest.mark.slow
def test_gantry_mcp_memory_runs_on_the_web_free_lowlevel_server(
    lean_mcp: Path, tmp_path: Path
) -> None:
    """`gantry mcp-memory` (the server half the binary runs) on the rewritten server.py:
    store and recall over stdio work, and the child never imports the web stack."""
    report = tmp_path / "web.json"
    child = tmp_path / "child.py"
    web = [*WEB_STACK, "click", "python_multipart"]
    child.write_text(
        "import atexit, json, sys\n"
        "def _report():\n"
        "    import mcp.server.lowlevel.server as s\n"
        f"    loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({web!r}))\n"
        f"    loaded += [m for m in sys.modules for n in {list(mcp_lean.NOT_FOLLOWED)!r}\n"
        "               if m == n or m.startswith(n + '.')]\n"
        "    import mcp_types.methods as m\n"
        "    versions = sorted(n for n in sys.modules if n.startswith('mcp_types._v'))\n"
        f"    open({str(report)!r}, 'w').write(json.dumps({{'web': loaded, 'file': s.__file__,\n"
        "        'methods': m.__file__, 'versions': versions}))\n"
        "atexit.register(_report)\n"
        "from gantry.cli import main\n"
        f"sys.exit(main(['mcp-memory', '--data-dir', {str(tmp_path / 'data')!r},"
        f" '--persona-dir', {str(tmp_path)!r}]))\n"
    )
    pythonpath = f"{lean_mcp}{os.pathsep}{ROOT}"
    manifest = (f'[[server]]\nname = "mem"\ncommand = {json.dumps(sys.executable)}\n'
                f'args = [{json.dumps(str(child))}]\n'
                f'env = {{ PYTHONPATH = {json.dumps(pythonpath)} }}\n')
    code = f"""
import json, os, anyio
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry

async def main():
    reg = Registry()
    host = Host(parse({manifest!r}, os.environ), reg, os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        await reg.call("mem__memory_store",
                       '{{"kind": "fact", "subject": "tea", "content": "likes oolong"}}')
        recalled = await reg.call("mem__memory_recall", '{{"query": "oolong"}}')
        tg.cancel_scope.cancel()
    print(json.dumps({{"recalled": recalled.text, "error": recalled.error}}))

anyio.run(main)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert "likes oolong" in out["recalled"] and not out["error"], out
    for _ in range(100):  # the child writes its report as it exits, after the host stops it
        if report.exists():
            break
        time.sleep(0.1)
    seen = json.loads(report.read_text())
    assert seen["file"].startswith(str(lean_mcp))
    assert seen["methods"].startswith(str(lean_mcp))
    assert seen["web"] == []
    # gantry's host opens a 2026-07-28 session (protocol = "auto"): only its models are used.
    assert seen["versions"] == ["mcp_types._v2026_07_28"]


def test_rewrite_refuses_a_web_name_used_outside_a_function(tmp_path: Path) -> None:
    bad = tmp_path / "server.py"
    bad.write_text("from __future__ import annotations\n"
                   "from starlette.routing import Route\n"
                   "ROUTES = [Route]\n")
    with pytest.raises(mcp_lean.LeanError, match="Route"):
        mcp_lean.lowlevel_server_source(bad)


def test_rewrite_refuses_a_web_name_evaluated_as_a_default(tmp_path: Path) -> None:
    bad = tmp_path / "server.py"
    bad.write_text("from __future__ import annotations\n"
                   "from starlette.routing import Route\n"
                   "def f(kind=Route):\n"
                   "    return kind\n")
    with pytest.raises(mcp_lean.LeanError, match="def time"):
        mcp_lean.lowlevel_server_source(bad)


def test_rewrite_inlines_constant_defaults_and_moves_imports(tmp_path: Path) -> None:
    src = tmp_path / "server.py"
    src.write_text("from __future__ import annotations\n"
                   "from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE\n"
                   "from starlette.applications import Starlette\n"
                   "def app(size: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> Starlette:\n"
                   "    'doc'\n"
                   "    return Starlette(debug=size > 0)\n")
    out = mcp_lean.lowlevel_server_source(src)
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

    assert f"DEFAULT_MAX_REQUEST_BODY_SIZE = {DEFAULT_MAX_REQUEST_BODY_SIZE}" in out
    lines = out.splitlines()
    moved = lines.index("    from starlette.applications import Starlette")
    assert lines[moved - 1].strip() in ("'doc'", '"""doc"""')
    assert not any(ln.startswith("from starlette") for ln in lines)
    namespace: dict[str, object] = {}
    exec(compile(out, "server.py", "exec"), namespace)
    assert type(namespace["app"]()).__name__ == "Starlette"  # type: ignore[operator]


def test_package_config_is_yaml_nuitka_reads() -> None:
    """Parsed as YAML (as Nuitka does), every entry gives back exactly the replacement source."""
    sources = mcp_lean.sources(_all("mcp"))
    config = yaml.safe_load(mcp_lean.package_config(_all("mcp")))
    assert [entry["module-name"] for entry in config] == list(sources)
    assert len(config) == 6
    for entry in config:
        (rule,) = entry["anti-bloat"]
        assert rule["description"].startswith("gantry: ")
        assert rule["module_code"] == sources[entry["module-name"]]
        compile(rule["module_code"], entry["module-name"], "exec")


# ------------------------------------------------------------------ mcp_types.methods, lazily

def _lean_methods() -> Any:
    """The rewritten methods module, loaded beside the stock one under another name."""
    module = types.ModuleType("lean_methods")
    exec(compile(mcp_lean.methods_source(), "lean_methods.py", "exec"), module.__dict__)
    return module


def test_lazy_maps_have_the_stock_keys_and_the_very_same_values() -> None:
    import mcp_types.methods as stock

    lean = _lean_methods()
    lazy = [n for n in stock.__all__ if type(getattr(lean, n)).__name__ == "_LazyMap"]
    assert sorted(lazy) == ["CLIENT_NOTIFICATIONS", "CLIENT_REQUESTS", "CLIENT_RESULTS",
                            "SERVER_NOTIFICATIONS", "SERVER_REQUESTS", "SERVER_RESULTS"]
    for name in stock.__all__:
        old, new = getattr(stock, name), getattr(lean, name)
        if name not in lazy:
            assert type(old) is type(new), name
            if isinstance(old, frozenset | MappingProxyType):
                assert old == new, name
            continue
        assert isinstance(new, Mapping) and list(new) == list(old) and len(new) == len(old)
        for key in old:
            assert key in new and new[key] is old[key] and new.get(key) is old[key], (name, key)
        assert list(new.items()) == list(old.items()) and new == old
        assert ("nope", "2025-11-25") not in new and new.get(("nope", "2025-11-25")) is None
        with pytest.raises(KeyError):
            new[("nope", "2025-11-25")]
        assert {**new} == dict(old) and new | {} == dict(old) and {} | new == dict(old)
        with pytest.raises(TypeError):
            new[("x", "y")] = int  # type: ignore[index]
    for version, ok in (("2025-11-25", True), ("2026-07-28", False)):
        try:
            lean.validate_client_request("initialize", version, {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}})
        except KeyError:
            assert not ok  # the version gate, as stock: no initialize at 2026-07-28
        else:
            assert ok
    lean.validate_server_result("tools/list", "2025-11-25", {"tools": []})
    with pytest.raises(KeyError):  # the default surface, looked up as stock does
        lean.validate_server_result("initialize", "2026-07-28", {})


@pytest.mark.slow
def test_the_lean_methods_module_imports_no_version_module_until_a_lookup(
    lean_mcp: Path,
) -> None:
    code = """
import json, sys
import mcp_types.methods as m
seen = [sorted(n for n in sys.modules if n.startswith("mcp_types._v"))]
assert "initialize" in m.SPEC_CLIENT_METHODS and ("ping", "2026-07-28") not in m.SERVER_RESULTS
seen.append(sorted(n for n in sys.modules if n.startswith("mcp_types._v")))
m.SERVER_RESULTS[("ping", "2025-11-25")]
seen.append(sorted(n for n in sys.modules if n.startswith("mcp_types._v")))
print(json.dumps({"file": m.__file__, "seen": seen}))
"""
    env = {**os.environ, "PYTHONPATH": f"{lean_mcp}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["file"].startswith(str(lean_mcp))
    assert out["seen"] == [[], [], ["mcp_types._v2025_11_25"]]


VERSIONS_SEEN = """
import json, os, sys, anyio
from gantry.mcp import catalog as C
from gantry.mcp import host as H
from gantry.mcp.manifest import parse
from gantry.tools import Registry

def versions():
    return sorted(n for n in sys.modules if n.startswith("mcp_types._v"))

async def main():
    seen = {{}}
    list_tools = C.Catalog.list_tools

    async def spy(self, session):
        seen["initialized"] = versions()
        seen["negotiated"] = session._negotiated_version
        await list_tools(self, session)
        seen["listed"] = versions()

    C.Catalog.list_tools = spy
    reg = Registry()
    host = H.Host(parse({manifest!r}, os.environ), reg, os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        result = await reg.call({tool!r}, {args!r})
        tg.cancel_scope.cancel()
    seen["called"] = versions()
    seen["result"] = {{"text": result.text, "error": result.error}}
    import mcp_types.methods, mcp.client.session
    seen["files"] = [mcp_types.methods.__file__, mcp.client.session.__file__]
    print(json.dumps(seen))

anyio.run(main)
"""


def _real_server(name: str, lean: Path, tmp: Path) -> tuple[str, str, str]:
    """(manifest, tool, arguments) of one real server gantry's host can call."""
    from tests.fakes.mcp_servers import time_command, toml_server

    if name == "static":
        return toml_server("st", [str(static_fixture())]), "st__echo", '{"text": "lean"}'
    if name == "time":
        return (toml_server("time", [time_command()]), "time__get_current_time",
                '{"timezone": "UTC"}')
    # gantry's own server, run from the same lean copy (its server half is built on the SDK)
    argv = [sys.executable, "-m", "gantry", "mcp-memory", "--data-dir", str(tmp / "data"),
            "--persona-dir", str(tmp)]
    return (toml_server("mem", argv, env={"PYTHONPATH": f"{lean}{os.pathsep}{ROOT}"},
                        cwd=str(ROOT)),
            "mem__memory_store", '{"kind": "fact", "subject": "tea", "content": "oolong"}')


def _versions_seen(lean: Path, server: str, tmp: Path) -> dict[str, Any]:
    manifest, tool, args = _real_server(server, lean, tmp)
    code = VERSIONS_SEEN.format(manifest=manifest, tool=tool, args=args)
    env = {**os.environ, "PYTHONPATH": f"{lean}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert all(f.startswith(str(lean)) for f in seen["files"]), seen["files"]
    assert not seen["result"]["error"], seen["result"]
    return seen


# What each real server negotiates with gantry's `protocol = "auto"`: mcp-server-time and
# `gantry mcp-memory` run on the SDK 2.3, which answers server/discover, so they speak the
# 2026-07-28 revision; the C fixture has no discover and shakes hands at the version it
# hard-codes. Every pre-2026 row of mcp_types.methods uses the 2025 models.
REAL_SERVERS = [("static", "2025-06-18"), ("time", "2026-07-28"), ("memory", "2026-07-28")]


def _models(version: str) -> list[str]:
    return ["mcp_types._v2026_07_28" if version.startswith("2026") else "mcp_types._v2025_11_25"]


@pytest.mark.slow
@pytest.mark.parametrize(("server", "version"), REAL_SERVERS)
def test_a_session_imports_only_its_negotiated_version_module(
    lean_mcp: Path, tmp_path: Path, server: str, version: str
) -> None:
    """gantry's host on the lean methods + session modules against real servers: initialize,
    tools/list and a successful tool call import the negotiated era's models and no other."""
    seen = _versions_seen(lean_mcp, server, tmp_path)
    assert seen["negotiated"] == version
    assert set(seen["initialized"]) <= set(_models(version))  # discover may need none yet
    assert seen["listed"] == _models(version)
    assert seen["called"] == _models(version)
    if server == "static":
        assert seen["result"]["text"] == "lean"


@pytest.fixture(scope="module")
def methods_only_mcp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lean copy without the session.py replacement (what 8d40302 shipped alone)."""
    root = _copy_mcp(tmp_path_factory.mktemp("methods-only"))
    for module, code in mcp_lean.sources(_all("mcp")).items():
        if module != mcp_lean.SESSION:
            mcp_lean.module_path(module, root).write_text(code)
    return root


@pytest.mark.slow
def test_without_the_session_rewrite_tools_list_imports_the_2026_models_too(
    methods_only_mcp: Path, tmp_path: Path
) -> None:
    """Why the session rewrite exists: with the lazy methods module alone, the SDK's
    `_later_revision_fields` reads the 2026 rows at the first tools/list."""
    seen = _versions_seen(methods_only_mcp, "static", tmp_path)
    assert seen["initialized"] == ["mcp_types._v2025_11_25"]
    assert seen["listed"] == ["mcp_types._v2025_11_25", "mcp_types._v2026_07_28"]


# ------------------------------------------------ mcp.client.session, later fields precomputed

def _lean_session() -> Any:
    """The rewritten session module, loaded beside the stock one under another name."""
    module = types.ModuleType("lean_session")
    sys.modules[module.__name__] = module  # its dataclasses look their module up by name
    try:
        exec(compile(mcp_lean.session_source(), "lean_session.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def test_the_later_fields_table_answers_as_the_installed_function() -> None:
    import mcp_types.methods as methods
    from mcp.client import session as stock

    lean = _lean_session()
    table = lean._GANTRY_LATER_REVISION_FIELDS
    assert set(table) == set(methods.SERVER_RESULTS)
    assert any(table.values()) and any(not v for v in table.values())

    def no_fallback(method: str, version: str) -> frozenset[str]:
        raise AssertionError(f"fallback called for {(method, version)}")

    computed, lean._gantry_computed_later_revision_fields = (
        lean._gantry_computed_later_revision_fields, no_fallback)
    for key in methods.SERVER_RESULTS:
        got = lean._later_revision_fields(*key)
        assert type(got) is frozenset and got == stock._later_revision_fields(*key), key
    lean._gantry_computed_later_revision_fields = computed
    # Pairs with no row: the original function, which reads no row and answers empty.
    for key in (("nope", "2025-11-25"), ("tools/list", "1999-01-01"), ("initialize",
                                                                        "2026-07-28")):
        assert lean._later_revision_fields(*key) == stock._later_revision_fields(*key) == set()
    assert lean._later_revision_fields("tools/list", "2025-06-18") >= {"ttlMs", "cacheScope"}


# A raw stdio server: initialize answers the version in argv[1]; tools/list and tools/call
# answer with a later revision's result fields mixed in (the values from argv[2]).
LATER_FIELDS_SERVER = """
import json, sys
version, extra = sys.argv[1], json.loads(sys.argv[2])
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg["method"]
    if method == "initialize":
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": "later", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}],
                  **extra["list"]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "hi"}], **extra["call"]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""

LATER_FIELDS_CLIENT = """
import json, sys, anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

def outcome(call):
    async def run(session):
        try:
            result = await call(session)
        except Exception as exc:
            return {"error": type(exc).__name__}
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return run

async def main():
    params = StdioServerParameters(command=sys.executable, args=sys.argv[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            out = {"list": await outcome(lambda s: s.list_tools())(session),
                   "call": await outcome(lambda s: s.call_tool("echo", {}))(session),
                   "versions": sorted(n for n in sys.modules if n.startswith("mcp_types._v")),
                   "file": sys.modules["mcp.client.session"].__file__}
    print(json.dumps(out))

anyio.run(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
@pytest.mark.parametrize("extra", [
    {"list": {"ttlMs": 5000, "cacheScope": "public"}, "call": {"resultType": "complete"}},
    {"list": {"ttlMs": "soon", "cacheScope": 7, "nextCursor": "c"},
     "call": {"resultType": 3, "requestState": 1, "isError": False}},
], ids=["valid-later-values", "invalid-later-values"])
def test_a_later_revisions_fields_are_treated_as_stock_mcp_treats_them(
    lean_mcp: Path, tmp_path: Path, version: str, extra: dict[str, Any]
) -> None:
    """A pre-2026 session receiving 2026 result fields: stock mcp drops them (the `foreign`
    keys of `_later_revision_fields`) before parsing; the lean session gives the same result."""
    server = tmp_path / "later.py"
    server.write_text(LATER_FIELDS_SERVER)
    outs = {}
    for label, path in (("stock", ""), ("lean", str(lean_mcp))):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, str(ROOT)) if p)}
        proc = subprocess.run([sys.executable, "-c", LATER_FIELDS_CLIENT, str(server), version,
                               json.dumps(extra)], env=env, capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs[label] = json.loads(proc.stdout.splitlines()[-1])
    assert outs["lean"]["file"].startswith(str(lean_mcp))
    assert not outs["stock"]["file"].startswith(str(lean_mcp))
    assert outs["lean"]["versions"] == ["mcp_types._v2025_11_25"]
    assert outs["lean"]["list"] == outs["stock"]["list"]
    assert outs["lean"]["call"] == outs["stock"]["call"]
    listed = outs["lean"]["list"]
    assert "error" not in listed and listed["tools"][0]["name"] == "echo", listed
    # Dropped before parsing: the model's defaults, never the server's values, are left.
    assert all(listed.get(k) != v for k, v in extra["list"].items() if k != "nextCursor")
    if "nextCursor" in extra["list"]:  # a field of the negotiated revision stays
        assert listed["nextCursor"] == "c"
    assert "error" not in outs["lean"]["call"], outs["lean"]["call"]


@pytest.mark.parametrize(("body", "match"), [
    ("", r"session\.py: expected one module-level `def _later_revision_fields`, found 0"),
    ("def _later_revision_fields(m, v):\n    return frozenset()\n"
     "def _later_revision_fields(m, v):\n    return frozenset()\n", r"found 2"),
    ("{later}ALIAS = _later_revision_fields\n", r"session\.py:5: .* other than by a plain call"),
    ("{later}def f(m, v, fields=_later_revision_fields):\n    return fields(m, v)\n",
     r"session\.py:5: .* other than by a plain call"),
    ("{later}def f(m, v):\n    g = _later_revision_fields\n    return g(m, v)\n",
     r"session\.py:6: .* other than by a plain call"),
    ("{later}FIELDS = _later_revision_fields('tools/list', '2025-06-18')\n",
     r"session\.py:5: .* other than by a plain call"),
    ("{later}class C:\n    fields = staticmethod(_later_revision_fields)\n",
     r"session\.py:6: .* other than by a plain call"),
    ("{later}@_later_revision_fields\ndef f():\n    pass\n", r"session\.py:5: .* plain call"),
    ("{later}def f():\n    return map(_later_revision_fields, ['a'], ['b'])\n",
     r"session\.py:6: .* other than by a plain call"),
    ("{later}def f():\n    global _later_revision_fields\n", r"session\.py:6: `global`"),
    ("{later}from functools import partial as _later_revision_fields\n",
     r"session\.py:5: .* imported or aliased"),
    ("{later}def f():\n    return globals()['_later_revision_fields']\n",
     r"session\.py:6: .* named in a string"),
    ("{later}import sys\ndef f():\n    return sys.modules[__name__]._later_revision_fields\n",
     r"session\.py:7: .* as an attribute"),
])
def test_session_rewrite_refuses_a_later_fields_function_it_cannot_replace(
    tmp_path: Path, body: str, match: str
) -> None:
    later = ("@cache\ndef _later_revision_fields(method, version):\n    return frozenset()\n")
    bad = tmp_path / "session.py"
    bad.write_text("from functools import cache\n" + body.replace("{later}", later))
    with pytest.raises(mcp_lean.LeanError, match=match):
        mcp_lean.session_source(bad, table={})


def test_session_rewrite_keeps_plain_calls_and_answers_from_the_table(tmp_path: Path) -> None:
    src = tmp_path / "session.py"
    src.write_text("from functools import cache\n"
                   "@cache\ndef _later_revision_fields(method, version):\n"
                   "    return frozenset({'computed'})\n"
                   "class S:\n    async def send(self, m, v):\n"
                   "        return _later_revision_fields(m, v)\n"
                   "def f(m, v):\n    return (lambda: _later_revision_fields(m, v))()\n")
    out = mcp_lean.session_source(src, table={("tools/list", "2025-06-18"): ("ttlMs",)})
    namespace: dict[str, Any] = {}
    exec(compile(out, "session.py", "exec"), namespace)
    assert namespace["f"]("tools/list", "2025-06-18") == frozenset({"ttlMs"})
    assert namespace["f"]("tools/list", "2026-07-28") == frozenset({"computed"})


@pytest.mark.parametrize(("line", "match"), [
    ("MODEL = v2025.PingRequest", r"methods\.py:6: v2025 used at import time"),
    ("def f(kind=v2025.PingRequest):\n    return kind", r"methods\.py:6: v2025 used at import"),
    ("FIRST = MAP[('ping', '2025-11-25')]", r"methods\.py:6: MAP's values used at import"),
    ("ROWS = list(MAP.values())", r"methods\.py:6: MAP's values used at import time"),
    ("PLAIN = {('ping', '2025-11-25'): v2025.PingRequest}", r":6: v2025 used at import time"),
    ("from mcp_types._v2025_11_25 import PingRequest", r"methods\.py:6: `from \.\.\. import`"),
])
def test_methods_rewrite_refuses_a_version_module_used_at_import_time(
    tmp_path: Path, line: str, match: str
) -> None:
    bad = tmp_path / "methods.py"
    bad.write_text("from __future__ import annotations\n"
                   "from types import MappingProxyType\n"
                   "import mcp_types._v2025_11_25 as v2025\n"
                   "MAP = MappingProxyType({('ping', '2025-11-25'): v2025.PingRequest})\n"
                   "KEYS = frozenset(m for m, _ in MAP)\n"
                   f"{line}\n"
                   "def g(surface=MAP):\n"
                   "    return v2025.PingRequest, surface\n")
    with pytest.raises(mcp_lean.LeanError, match=match):
        mcp_lean.methods_source(bad)
    bad.write_text(bad.read_text().replace(line, "OK = 1"))
    assert "_LazyMap({('ping', '2025-11-25'): lambda: v2025.PingRequest})" in (
        mcp_lean.methods_source(bad))
