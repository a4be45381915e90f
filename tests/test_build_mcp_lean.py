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


@pytest.fixture(scope="module")
def lean_mcp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the installed mcp and mcp_types with the modules replaced, as the build does."""
    root = tmp_path_factory.mktemp("lean")
    for package in ("mcp", "mcp_types"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        shutil.copytree(next(iter(spec.submodule_search_locations)), root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
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
    # A 2025-11-25 session served: the server side never needs the 2026 models.
    assert seen["versions"] == ["mcp_types._v2025_11_25"]


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
    text = mcp_lean.package_config(_all("mcp"))
    assert text.count("- module-name: ") == 5
    for module in ("'mcp'", "'mcp.client'", "'mcp.server'", "'mcp.server.lowlevel.server'",
                   "'mcp_types.methods'"):
        assert f"- module-name: {module}" in text
    code_lines = [ln for ln in text.splitlines() if ln.strip().startswith("module_code: ")]
    for line in code_lines:
        compile(json.loads(line.split("module_code: ", 1)[1]), "<lean init>", "exec")


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
from gantry.mcp import host as H
from gantry.mcp.manifest import parse
from gantry.tools import Registry

def versions():
    return sorted(n for n in sys.modules if n.startswith("mcp_types._v"))

async def main():
    seen = {{}}
    list_tools = H.Server._list_tools

    async def spy(self, session):
        seen["initialized"] = versions()
        seen["negotiated"] = session._negotiated_version
        await list_tools(self, session)
        seen["listed"] = versions()

    H.Server._list_tools = spy
    host = H.Host(parse({manifest!r}, os.environ), Registry(), os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        tg.cancel_scope.cancel()
    import mcp_types.methods
    seen["methods"] = mcp_types.methods.__file__
    print(json.dumps(seen))

anyio.run(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("server", "version"), [("static", "2025-06-18"),
                                               ("time", "2025-11-25")])
def test_the_client_imports_the_version_modules_its_session_needs(
    lean_mcp: Path, server: str, version: str
) -> None:
    """gantry's host on the lean methods module against real servers. Both negotiate a
    pre-2026 version (the initialize handshake): initialize needs only the 2025 models; the SDK's
    tools/list then also reads the 2026 row of SERVER_RESULTS (`_later_revision_fields`, to
    drop newer-revision fields), which imports the 2026 models too."""
    from tests.fakes.mcp_servers import time_command, toml_server

    argv = [str(static_fixture())] if server == "static" else [time_command()]
    code = VERSIONS_SEEN.format(manifest=toml_server(server, argv))
    env = {**os.environ, "PYTHONPATH": f"{lean_mcp}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["methods"].startswith(str(lean_mcp))
    assert seen["negotiated"] == version
    assert seen["initialized"] == ["mcp_types._v2025_11_25"]
    assert seen["listed"] == ["mcp_types._v2025_11_25", "mcp_types._v2026_07_28"]


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
