"""Remote MCP servers from the frozen binary in the distroless-like rootfs: npm
server-everything over Streamable HTTP (and legacy SSE) on a loopback port outside the
sandbox, reached through the SDK's client transports the build must carry (build/build.py,
build/mcp_lean.py). The header secret never reaches stderr or stdout.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.fakes.mcp_remote import HttpServer, everything_http, toml_remote
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]

KEY = "sk-binary-smoke"
SECRET = "remote-binary-header-secret-0123"
WAIT = 90.0


def _etc(tmp: Path, manifest: str) -> dict[str, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "mcp.toml").write_text(manifest)
    (tmp / "mcp.toml").chmod(0o644)
    tmp.chmod(0o755)
    return {"/etc/gantry": tmp}


def _manifest(url: str, transport: str | None = None) -> str:
    return toml_remote("every", url, transport=transport,
                       headers={"Authorization": "Bearer ${MCP_TOKEN}"})


def test_tools_list_reaches_a_remote_server(
    sandbox: Sandbox, every: HttpServer, tmp_path: Path
) -> None:
    done = sandbox.run([INSTALL_PATH, "tools", "list"],
                       env={"MCP_MANIFEST": "/etc/gantry/mcp.toml", "MCP_TOKEN": SECRET},
                       binds=_etc(tmp_path / "etc", _manifest(every.url)), timeout=120)
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert "every__echo" in names and "every__get-sum" in names
    assert SECRET not in done.stdout + done.stderr


def test_tools_list_reaches_a_legacy_sse_server(sandbox: Sandbox, tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node not found: the remote server is npm server-everything")
    with everything_http("sse") as srv:
        done = sandbox.run([INSTALL_PATH, "tools", "list"],
                           env={"MCP_MANIFEST": "/etc/gantry/mcp.toml", "MCP_TOKEN": SECRET},
                           binds=_etc(tmp_path / "etc", _manifest(srv.url, "sse")), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "every__echo" in done.stdout


class _Run(ChildIO):
    default_wait = WAIT


def test_run_calls_a_remote_tool_and_status_shows_it(
    sandbox: Sandbox, every: HttpServer, persona_dir: Path, fake_openai: Any, tmp_path: Path
) -> None:
    fake: FakeOpenAI = fake_openai
    fake.push(ToolCalls([Call("every__echo", {"message": "over http"}, id="r1"),
                         Call("every__get-sum", {"a": 20, "b": 22}, id="r2")]),
              Reply("remote ok"))
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": KEY,
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml", "MCP_TOKEN": SECRET}
    binds = {"/persona": persona_dir, **_etc(tmp_path / "etc", _manifest(every.url))}
    proc = sandbox.popen([INSTALL_PATH, "run"], env=env, binds=binds,
                         data=sandbox.new_data_dir("data-remote"))
    run = _Run(proc)
    try:
        run.send("use the remote tools")
        run.expect("remote ok\n")
        results = [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"]
        assert results[0] == "Echo: over http" and "42" in results[1]
        run.send("/status")
        # 15: server-everything adds its elicitation tools for a client declaring the capability
        assert "mcp every: up, 15 tools" in run.expect("restarts\n")
        run.close_stdin()
        assert run.wait_exit(20) == 0, run.stderr[-3000:]
    finally:
        run.kill()
    assert "Traceback" not in run.stderr
    assert SECRET not in run.stderr + run.stdout and KEY not in run.stderr
