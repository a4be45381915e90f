"""`gantry check` and `gantry tools list` with remote servers: a live server-everything over
Streamable HTTP, an optional server that is down, and a header secret that never shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.mcp_remote import everything_http, free_port, toml_remote
from tests.fakes.openai import FakeOpenAI, Reply

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-remote-cli-0123456789"
HEADER_SECRET = "remote-hdr-secret-0123456789"


def _env(tmp_path: Path, manifest: Path, base_url: str) -> dict[str, str]:
    persona = tmp_path / "persona"
    persona.mkdir(exist_ok=True)
    (persona / "PERSONA.md").write_text("Be brief.")
    return {"PATH": os.environ["PATH"], "CHANNEL": "stdio", "LLM_BASE_URL": base_url,
            "LLM_API_KEY": KEY, "LLM_MODEL": "fake-model", "DATA_DIR": str(tmp_path / "data"),
            "PERSONA_DIR": str(persona), "MCP_MANIFEST": str(manifest),
            "MCP_TOKEN": HEADER_SECRET, "NO_PROXY": "127.0.0.1"}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "gantry", *args], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=180)
    out = result.stdout + result.stderr
    assert "Traceback" not in out
    assert HEADER_SECRET not in out and KEY not in out
    return result


def test_check_and_tools_list_cover_remote_and_optional_servers(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    with everything_http() as srv, FakeOpenAI(api_key=KEY) as model:
        manifest = tmp_path / "mcp.toml"
        manifest.write_text(
            toml_remote("every", srv.url, headers={"Authorization": "Bearer ${MCP_TOKEN}"})
            + toml_remote("opt", down, required=False))
        env = _env(tmp_path, manifest, model.base_url)
        check = _run(["check"], env)
        listing = _run(["tools", "list"], env)
    lines = {line[5:].split("  ", 1)[0]: line for line in check.stdout.splitlines()
             if line[:4] in ("ok  ", "warn", "FAIL")}
    # 15: server-everything adds its elicitation tools for a client declaring the capability
    assert lines["mcp every"].startswith("ok") and "connected, 15 tools" in lines["mcp every"]
    assert lines["mcp opt"].startswith("warn"), check.stdout
    assert "optional, not connected" in lines["mcp opt"] and "ConnectError" in lines["mcp opt"]
    assert check.returncode == 0, check.stdout  # an optional server down is not a failure
    assert listing.returncode == 0, listing.stderr
    assert "every__echo" in listing.stdout
    assert "not connected: MCP server opt (optional" in listing.stdout
    assert "not connected: MCP server every" not in listing.stdout  # up while listed


def test_run_calls_a_remote_tool_and_status_shows_the_server(tmp_path: Path) -> None:
    from tests.fakes.openai import Call, Reply, ToolCalls
    from tests.procs import ChildIO

    with everything_http() as srv, FakeOpenAI(api_key=KEY) as model:
        manifest = tmp_path / "mcp.toml"
        manifest.write_text(
            toml_remote("every", srv.url, headers={"Authorization": "Bearer ${MCP_TOKEN}"}))
        model.push(ToolCalls([Call("every__echo", {"message": "over http"}, id="r1")]),
                   Reply("remote ok"))
        proc = subprocess.Popen([sys.executable, "-m", "gantry", "run"], cwd=ROOT,
                                env=_env(tmp_path, manifest, model.base_url),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        run = ChildIO(proc)
        try:
            run.send("use the remote tool")
            run.expect("remote ok\n", timeout=120)
            tool = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
            assert tool == ["Echo: over http"]
            run.send("/status")
            assert "mcp every: up, 15 tools" in run.expect("restarts\n")
            run.close_stdin()
            assert run.wait_exit(30) == 0, run.stderr[-3000:]
        finally:
            run.kill()
    assert "Traceback" not in run.stderr
    assert HEADER_SECRET not in run.stderr + run.stdout and KEY not in run.stderr


ZAP = "zap-path-key-5f0c9e1d2b3a"


def test_a_key_in_a_remote_url_path_is_never_printed(tmp_path: Path) -> None:
    """Issue 35 item 4: `url = ".../mcp/${ZAP_KEY}/sse"` (hosted servers carry keys so): the
    path 404s here, and neither check, tools list, a run's logs (at debug) nor /status print
    the key, in the server's address or in the errors that quote the URL."""
    from tests.procs import ChildIO

    with everything_http() as srv, FakeOpenAI(api_key=KEY) as model:
        manifest = tmp_path / "mcp.toml"
        manifest.write_text(toml_remote("zap", f"http://127.0.0.1:{srv.port}/mcp/${{ZAP_KEY}}/sse",
                                        required=False))
        env = {**_env(tmp_path, manifest, model.base_url), "ZAP_KEY": ZAP, "LOG_LEVEL": "debug"}
        check = _run(["check"], env)
        listing = _run(["tools", "list"], env)
        model.push(Reply("hi"))
        run = ChildIO(subprocess.Popen([sys.executable, "-m", "gantry", "run"], cwd=ROOT, env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE))
        try:
            run.send("hello")
            run.expect("hi\n", timeout=60)
            run.send("/status")
            status = run.expect("restarts\n", timeout=30)
            run.close_stdin()
            assert run.wait_exit(30) == 0, run.stderr[-3000:]
        finally:
            run.kill()
    shown = "/mcp/[REDACTED]/sse"
    assert "mcp zap" in check.stdout and shown in check.stdout, check.stdout
    assert "404" in check.stdout  # the error is there, its URL redacted
    assert shown in listing.stdout + listing.stderr
    assert "mcp zap:" in status and shown in status, status
    assert shown in run.stderr and "404" in run.stderr
    for out in (check.stdout, check.stderr, listing.stdout, listing.stderr, run.stdout,
                run.stderr):
        assert ZAP not in out, out[-3000:]
