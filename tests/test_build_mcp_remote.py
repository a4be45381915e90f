"""The binary's mcp (build/mcp_lean.py's lazy inits, build/build.py's not-followed modules)
still reaches remote servers: the SDK's streamable_http and sse client transports and httpx2
run with the lean sources, and nothing they import is a module the build leaves out."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.mcp_remote import everything_http, toml_remote
from tests.test_build_mcp_lean import lean_mcp  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


def _not_followed() -> list[str]:
    spec = importlib.util.spec_from_file_location("gantry_build_script_remote",
                                                  ROOT / "build" / "build.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return [*mod.NOFOLLOW, *mod.UNUSED_STDLIB, *mod.MCP_WEB_MODULES]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["streamableHttp", "sse"])
def test_the_remote_client_path_runs_on_what_the_binary_carries(
    lean_mcp: Path, mode: str,  # noqa: F811
) -> None:
    cut = _not_followed()
    with everything_http(mode) as srv:
        manifest = toml_remote("every", srv.url, transport="sse" if mode == "sse" else None,
                               headers={"X-Probe": "1"})
        code = f"""
import json, os, sys, anyio
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry

async def main():
    reg = Registry()
    host = Host(parse({manifest!r}, os.environ), reg, os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        result = await reg.call("every__echo", '{{"message": "lean"}}')
        tg.cancel_scope.cancel()
    cut = {cut!r}
    loaded = sorted(m for m in sys.modules for n in cut if m == n or m.startswith(n + "."))
    import mcp
    print(json.dumps({{"text": result.text, "cut": loaded, "file": mcp.__file__}}))

anyio.run(main)
"""
        env = {**os.environ, "PYTHONPATH": f"{lean_mcp}{os.pathsep}{ROOT}"}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["file"].startswith(str(lean_mcp))
    assert out["text"] == "Echo: lean"
    assert out["cut"] == []
