"""MCP tool calls made as tasks (gantry/mcp/tasks.py) against real servers: the SDK's own
lowlevel Server with task tools (tests/fakes/mcp_tasks.py), over stdio and Streamable HTTP,
and npm server-everything's `simulate-research-query`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gantry import db
from gantry.mcp.taskbook import DELIVERED, DETACHED, DONE, RUNNING, TaskBook
from gantry.turns import recorded_call
from tests.fakes.mcp_servers import ROOT, everything_command, toml_server
from tests.test_mcp_host import BOOT, running, until

pytestmark = pytest.mark.anyio


def tasks_toml(name: str = "tk", timeout: float | None = None) -> str:
    return toml_server(name, [sys.executable, "-m", "tests.fakes.mcp_tasks"], cwd=str(ROOT),
                       timeout=timeout)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    """The task fixture over Streamable HTTP in its own process: it outlives a client."""
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.mcp_tasks", str(port)],
                            cwd=str(ROOT))
    try:
        deadline = time.monotonic() + BOOT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the HTTP task fixture did not start")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def http_toml(url: str, timeout: float | None = None) -> str:
    extra = f"timeout_seconds = {timeout}\n" if timeout is not None else ""
    return f'[[server]]\nname = "tk"\nurl = "{url}"\n{extra}'


@pytest.fixture
def book(tmp_path: Path) -> Iterator[TaskBook]:
    conn = db.connect(tmp_path / "gantry.db")
    try:
        yield TaskBook(conn)
    finally:
        conn.close()


async def test_a_required_task_tool_is_offered_and_runs_once_as_a_task(tmp_path: Path) -> None:
    """Issue 42 #4: taskSupport "required" tools are offered now, and called as tasks
    (a plain tools/call is refused by the server); "optional" ones are called as tasks too."""
    async with running(tasks_toml()) as (host, reg):
        assert {"tk__job", "tk__ask", "tk__maybe"} <= set(reg.names())
        assert "task-only" not in host.status_lines()[0]
        out = tmp_path / "count"
        result = await reg.call("tk__job", f'{{"path": "{out}", "seconds": 0.3}}')
        assert (result.text, result.error) == ("job done after 0.3 s", False)
        assert lines(out) == 1
        maybe = await reg.call("tk__maybe", "{}")
        assert maybe.text == "as a task"


async def test_a_task_resumes_after_a_restart_without_running_again(
    http_server: str, book: TaskBook, tmp_path: Path,
) -> None:
    """★ A gantry that stops mid-task (its host torn down, as a kill would) and starts again
    polls the same task: the server ran the job once, and the call gets its result."""
    out = tmp_path / "count"
    args = f'{{"path": "{out}", "seconds": 2}}'
    async with running(http_toml(http_server)) as (host, reg):
        host.use_tasks(book)
        with anyio.move_on_after(60):
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    with recorded_call("telegram:1", "call-1"):
                        await reg.call("tk__job", args)

                tg.start_soon(call)
                await until(lambda: (r := book.get("telegram:1", "call-1")) is not None
                            and r.state == RUNNING, what="the task id recorded")
                tg.cancel_scope.cancel()  # cut as a shutdown cuts it: the task runs on
    row = book.get("telegram:1", "call-1")
    assert row is not None and row.task_id
    assert lines(out) == 1
    async with running(http_toml(http_server)) as (host, reg):
        host.use_tasks(book)
        with recorded_call("telegram:1", "call-1"):
            result = await reg.call("tk__job", args)
    assert (result.text, result.error) == ("job done after 2 s", False)
    assert lines(out) == 1
    again = book.get("telegram:1", "call-1")
    assert again is not None and again.state == DONE and again.task_id == row.task_id
