"""★ Issue 42 #4 in the frozen binary: a tool call made as an MCP task (the SDK's server with
task tools, tests/fakes/mcp_tasks.py, over Streamable HTTP on a loopback port outside the
sandbox) survives a kill -9 of `gantry run`: the restarted binary polls the same task, the
server's own counter shows one execution, and the answer reaches the chat once. Needs the
build to carry mcp_types' task models (tasks/get, tasks/result, tasks/cancel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary_mcp_remote import _Run
from tests.fakes.mcp_servers import kill_tree
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_mcp_tasks import http_server, http_toml, lines

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["http_server"]  # fixture used by name

KEY = "sk-binary-smoke"  # the fake_openai fixture's key


def test_a_task_resumes_after_kill_9_in_the_frozen_binary(
    sandbox: Sandbox, http_server: str, persona_dir: Path, fake_openai: Any, tmp_path: Path
) -> None:
    fake: FakeOpenAI = fake_openai
    counter = tmp_path / "runs.txt"  # written by the server, outside the sandbox
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "mcp.toml").write_text(http_toml(http_server))
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": KEY,
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
           "MCP_MANIFEST": "/etc/gantry/mcp.toml"}
    binds = {"/persona": persona_dir, "/etc/gantry": etc}
    data = sandbox.new_data_dir("data-tasks")
    fake.push(ToolCalls([Call("tk__job", {"path": str(counter), "seconds": 8}, id="j1")]))
    first = _Run(sandbox.popen([INSTALL_PATH, "run"], env=env, binds=binds, data=data))
    try:
        first.send("run the long job")
        first.wait_stderr("mcp task started")
        kill_tree(first.proc.pid)  # gantry itself, not only the onefile bootstrap
        first.proc.wait(10)
    finally:
        first.kill()
    assert lines(counter) == 1 and len(fake.requests) == 1
    fake.push(Reply("The job is done."))
    again = _Run(sandbox.popen([INSTALL_PATH, "run"], env=env, binds=binds, data=data))
    try:
        again.send("run the long job")
        out = again.expect("The job is done.\n")
        again.wait_stderr("mcp task resumed after a restart")
        assert out.count("The job is done.") == 1
        again.close_stdin()
        assert again.wait_exit(20) == 0, again.stderr[-3000:]
    finally:
        again.kill()
    assert lines(counter) == 1 and lines(Path(f"{counter}.done")) == 1
    results = [m["content"] for m in fake.requests[1].messages if m["role"] == "tool"]
    assert results == ["job done after 8 s"]
    assert "Traceback" not in first.stderr + again.stderr
