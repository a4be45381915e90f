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
from pathlib import Path

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
    """A copy of the installed mcp with the three inits replaced, as the build does."""
    spec = importlib.util.find_spec("mcp")
    assert spec is not None and spec.submodule_search_locations
    root = tmp_path_factory.mktemp("lean")
    shutil.copytree(next(iter(spec.submodule_search_locations)), root / "mcp",
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
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({list(WEB_STACK)!r}))
    loaded += [m for m in sys.modules for n in {list(mcp_lean.NOT_FOLLOWED)!r}
               if m == n or m.startswith(n + ".")]
    import mcp
    names = [n for n in mcp.__all__ if getattr(mcp, n, None) is None]
    print(json.dumps({{"text": result.text, "web": loaded, "missing": names,
                      "file": mcp.__file__}}))

anyio.run(main)
"""
    env = {**os.environ, "PYTHONPATH": f"{lean_mcp}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["file"].startswith(str(lean_mcp))
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
        f"    open({str(report)!r}, 'w').write(json.dumps({{'web': loaded, 'file': s.__file__}}))\n"
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
    assert seen["web"] == []


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
    assert text.count("- module-name: ") == 4
    for module in ("'mcp'", "'mcp.client'", "'mcp.server'", "'mcp.server.lowlevel.server'"):
        assert f"- module-name: {module}" in text
    code_lines = [ln for ln in text.splitlines() if ln.strip().startswith("module_code: ")]
    for line in code_lines:
        compile(json.loads(line.split("module_code: ", 1)[1]), "<lean init>", "exec")
