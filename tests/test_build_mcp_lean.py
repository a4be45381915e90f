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
        (root / module.replace(".", "/") / "__init__.py").write_text(code)
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


def test_package_config_is_yaml_nuitka_reads() -> None:
    text = mcp_lean.package_config(_all("mcp"))
    assert text.count("- module-name: ") == 3
    for module in ("'mcp'", "'mcp.client'", "'mcp.server'"):
        assert f"- module-name: {module}" in text
    code_lines = [ln for ln in text.splitlines() if ln.strip().startswith("module_code: ")]
    for line in code_lines:
        compile(json.loads(line.split("module_code: ", 1)[1]), "<lean init>", "exec")
