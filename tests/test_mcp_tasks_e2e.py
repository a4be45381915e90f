"""★ Issue 42 #4 end to end: a real `gantry run` (stdio, fake model) calls a task tool on a
remote server (the SDK's server with task tools, tests/fakes/mcp_tasks.py, over Streamable
HTTP in its own process), is killed -9 while the task runs, and on restart polls the same
task: the server's own counter shows one execution, and the answer reaches the chat once."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_mcp_e2e import BOOT, manifest, tool_messages
from tests.test_mcp_tasks import http_server, http_toml, lines
from tests.test_stdio_e2e import Gantry, fake, spawn

pytestmark = pytest.mark.slow
__all__ = ["fake", "http_server", "spawn"]  # fixtures used by name below


def test_kill_9_mid_task_resumes_the_same_task_and_runs_it_once(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, http_server: str, tmp_path: Path
) -> None:
    counter = tmp_path / "runs.txt"
    path = manifest(tmp_path, http_toml(http_server))
    g = spawn(MCP_MANIFEST=path)
    fake.push(ToolCalls([Call("tk__job", {"path": str(counter), "seconds": 8}, id="j1")]))
    g.send("run the long job")
    started = g.wait_log("mcp task started", timeout=BOOT)
    os.kill(g.proc.pid, signal.SIGKILL)  # mid-task: the task id is recorded, no result yet
    g.proc.wait(10)
    assert lines(counter) == 1
    assert len(fake.requests) == 1  # the model never saw a result

    again = spawn(MCP_MANIFEST=path)
    fake.push(Reply("The job is done."))
    out = again.ask("run the long job", "The job is done.", timeout=BOOT)
    resumed = again.wait_log("mcp task resumed after a restart")
    assert resumed["task"] == started["task"]
    assert lines(counter) == 1  # the server ran the job once
    assert lines(Path(f"{counter}.done")) == 1
    results = tool_messages(fake.requests[1].messages)
    assert [r["content"] for r in results] == ["job done after 8 s"]
    assert out.count("The job is done.") == 1
    again.close_stdin()
    assert again.wait_exit() == 0
