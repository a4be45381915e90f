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


ERAS = pytest.mark.parametrize("protocol", ["2025", "2026"])  # the two forms of tasks


def tasks_toml(name: str = "tk", timeout: float | None = None, protocol: str = "2025") -> str:
    """The task fixture, pinned to one era (by default 2025-11-25, core-protocol tasks; at
    2026-07-28 it serves the tasks extension)."""
    return toml_server(name, [sys.executable, "-m", "tests.fakes.mcp_tasks"], cwd=str(ROOT),
                       timeout=timeout) + f'protocol = "{protocol}"\n'



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


def http_toml(url: str, timeout: float | None = None, protocol: str = "2025") -> str:
    extra = f"timeout_seconds = {timeout}\n" if timeout is not None else ""
    return f'[[server]]\nname = "tk"\nurl = "{url}"\nprotocol = "{protocol}"\n{extra}'


@pytest.fixture
def book(tmp_path: Path) -> Iterator[TaskBook]:
    conn = db.connect(tmp_path / "gantry.db")
    try:
        yield TaskBook(conn)
    finally:
        conn.close()


@ERAS
async def test_a_required_task_tool_is_offered_and_runs_once_as_a_task(
    tmp_path: Path, protocol: str,
) -> None:
    """Issue 42 #4: taskSupport "required" tools are offered now, and called as tasks
    (a plain tools/call is refused by the server); "optional" ones are called as tasks too
    (at 2026 the server decides: it answers `maybe` at once)."""
    async with running(tasks_toml(protocol=protocol)) as (host, reg):
        assert {"tk__job", "tk__ask", "tk__maybe"} <= set(reg.names())
        assert "task-only" not in host.status_lines()[0]
        out = tmp_path / "count"
        result = await reg.call("tk__job", f'{{"path": "{out}", "seconds": 0.3}}')
        assert (result.text, result.error) == ("job done after 0.3 s", False)
        assert lines(out) == 1
        maybe = await reg.call("tk__maybe", "{}")
        assert maybe.text == ("as a task" if protocol == "2025" else "plain")


@ERAS
async def test_a_task_resumes_after_a_restart_without_running_again(
    http_server: str, book: TaskBook, tmp_path: Path, protocol: str,
) -> None:
    """★ A gantry that stops mid-task (its host torn down, as a kill would) and starts again
    polls the same task: the server ran the job once, and the call gets its result."""
    out = tmp_path / "count"
    args = f'{{"path": "{out}", "seconds": 2}}'
    async with running(http_toml(http_server, protocol=protocol)) as (host, reg):
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
    async with running(http_toml(http_server, protocol=protocol)) as (host, reg):
        host.use_tasks(book)
        with recorded_call("telegram:1", "call-1"):
            result = await reg.call("tk__job", args)
    assert (result.text, result.error) == ("job done after 2 s", False)
    assert lines(out) == 1
    again = book.get("telegram:1", "call-1")
    assert again is not None and again.state == DONE and again.task_id == row.task_id


@ERAS
async def test_a_stop_cancels_the_task_on_the_server(http_server: str, book: TaskBook,
                                                     tmp_path: Path, protocol: str) -> None:
    """The user's stop (Telegram /stop) sends tasks/cancel: the job never finishes, and the
    call is recorded as cancelled (a restart does not poll it again)."""
    from gantry.channel.base import Inbound, TurnStopped
    from gantry.turns import Turns, tool_call

    out = tmp_path / "count"
    async with running(http_toml(http_server, protocol=protocol)) as (host, reg):
        host.use_tasks(book)

        async def respond(msg: Inbound, stream: object) -> str:
            with tool_call(cancellable=True), recorded_call(msg.session_id, "call-9"):
                await reg.call("tk__job", f'{{"path": "{out}", "seconds": 3}}')
            await anyio.sleep(5)  # the turn's next checkpoint (the model call, in the agent)
            return "unreachable"

        shielded = Turns().wrap(respond)
        msg = Inbound("telegram", "5", "u", "run the job")
        stopped: list[BaseException] = []

        async def turn() -> None:
            try:
                await shielded(msg, None)
            except TurnStopped as exc:
                stopped.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            await until(lambda: (r := book.get("telegram:5", "call-9")) is not None
                        and r.state == RUNNING, what="the task id recorded")
            assert shielded.stop(msg)
        assert stopped
        row = book.get("telegram:5", "call-9")
        assert row is not None and row.state == DONE and row.error
        from gantry.mcp import era, taskext, tasks

        session = host.servers["tk"].session
        assert era.modern(session) == (protocol == "2026")
        if era.modern(session):
            assert (await taskext.status(session, row.task_id))["status"] == "cancelled"
        else:
            assert (await tasks.status(session, row.task_id)).status == "cancelled"
    await anyio.sleep(3.5)
    assert lines(out) == 1 and lines(Path(f"{out}.done")) == 0


async def test_a_task_that_outlives_its_call_is_pushed_to_the_chat_later(
    http_server: str, book: TaskBook, tmp_path: Path,
) -> None:
    """A task slower than the call's patience is left running; the model is told so, and the
    result reaches the chat once, as a scheduled push (the finisher rides the cron ticker)."""
    from gantry.cron.store import CronStore
    from gantry.cron.ticker import Ticker
    from gantry.mcp.finisher import Finisher

    out = tmp_path / "count"
    pushed: list[tuple[str, str]] = []

    async def push(chat: str, text: str, sent: int = 0, progress: object = None,
                   origin: str = "") -> None:
        pushed.append((chat, text))
        if callable(progress):
            progress(1, 1)

    async def respond(*args: object, **kwargs: object) -> str:
        raise AssertionError("no turn runs for a task result")

    async with running(http_toml(http_server, timeout=1)) as (host, reg):
        host.use_tasks(book)
        ticker = Ticker(CronStore(book.conn), respond, push, "telegram", 30.0)
        ticker.riders.append(Finisher(book, host, ticker))
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            with recorded_call("telegram:7", "call-3"):
                told = await reg.call("tk__job",
                                      f'{{"path": "{out}", "seconds": 3, "quiet": true}}')
            assert not told.error and "still running as a task" in told.text
            row = book.get("telegram:7", "call-3")
            assert row is not None and row.state in (DETACHED, "delivering", DELIVERED)
            await until(lambda: pushed, timeout=30, what="the result pushed")
            await until(lambda: book.state("telegram:7", "call-3") == DELIVERED,
                        what="delivered")
            tg.cancel_scope.cancel()
    assert len(pushed) == 1
    chat, text = pushed[0]
    assert chat == "7" and "job done after 3 s" in text and "'job'" in text
    assert lines(out) == 1


async def test_npm_server_everything_research_query_runs_as_a_task() -> None:
    """server-everything's `simulate-research-query` (taskSupport "required", its SDK's
    2025-11-25 tasks) is offered, and answers through tasks/get and tasks/result."""
    async with running(toml_server("every", everything_command())) as (host, reg):
        assert "every__simulate-research-query" in reg.names()
        assert host.servers["every"].catalog.runs_tasks
        result = await reg.call("every__simulate-research-query", '{"topic": "tides"}')
        assert not result.error, result.text
        assert "# Research Report: tides" in result.text


async def test_a_task_that_needs_input_asks_through_the_elicitation_relay() -> None:
    """A task in `input_required` asks its question through tasks/result; it goes through
    the relay to the turn's user like any call's question (the SDK fixture's `ask`, and
    server-everything's ambiguous research query), and the answer reaches the task."""
    from gantry import elicit
    from gantry.mcp.elicitation import Elicitor
    from tests.test_elicit_host import ME, Script, served

    def answer(q: elicit.Question) -> str:
        if q.text.startswith("MCP server"):
            return elicit.ANSWER
        return "green" if "colour" in q.text.lower() else q.choices[0]

    dialog = Script(answer)
    elicitor = Elicitor(timeout=30)
    elicitor.dialogs["stdio"] = dialog
    async with served(tasks_toml() + toml_server("every", everything_command()),
                      elicitor) as host:
        token = elicit.TURN.set(ME)
        try:
            asked = await host.call("tk", "ask", {})
            research = await host.call("every", "simulate-research-query",
                                       {"topic": "python", "ambiguous": True})
        finally:
            elicit.TURN.reset(token)
    assert (asked.text, asked.error) == ("the user said 'green'", False)
    assert not research.error, research.text
    assert "Clarification" in research.text
    assert any("multiple interpretations" in q.text for q in dialog.asked)
