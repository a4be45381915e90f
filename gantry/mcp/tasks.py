"""MCP tool calls made as tasks: exactly once for long operations (docs/mcp.md, "Long
operations: tasks").

A tool whose `execution.taskSupport` is "optional" or "required", on a server that offers
task-augmented tools/call, is called with `task`; the server answers at once with a task id,
which is written to gantry.db (taskbook.py) before anything else happens, keyed by the
recorded tool call. The call then polls tasks/get (each new status moves the deadline, as
progress does) and fetches the result with tasks/result, which is also where the server asks
its questions (elicitation/create, relayed as for any call). A restart after a kill -9 finds
the task id and polls the same task; a call whose task id never arrived is not sent again.
A user's stop sends tasks/cancel. A task that outlives the deadline is left running: the
model is told, and the result goes to the chat later (finisher.py).

Two forms are spoken, picked per session by its era (`wire()`): at 2025-11-25, tasks in the
core protocol, which the SDK 2.3 has types for but no client for: its tools/call parsing has
no CreateTaskResult arm, so that one request goes through the session's dispatcher;
tasks/get, tasks/result and tasks/cancel are plain typed requests. At 2026-07-28, the
`io.modelcontextprotocol/tasks` extension (taskext.py): the server decides per call whether
to answer with a task, so on a server that offers it every call goes this way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio

from gantry.mcp import era, taskext
from gantry.mcp.deadline import MAX_CALL_SECONDS, Deadline
from gantry.mcp.elicitation import Asking
from gantry.mcp.taskbook import SENDING, TaskBook
from gantry.turns import current_call, stopped_by_user

log = logging.getLogger("gantry.mcp")

TTL_MS = 7 * 24 * 3600 * 1000  # asked of the server: keep the task a week (it may say less)
POLL_MIN = 0.2  # seconds between tasks/get, whatever pollInterval the server suggests
POLL_MAX = 5.0
CANCEL_WAIT = 5.0  # a stop's tasks/cancel waits this long for the server, then gives up
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def task_support(tool: Any) -> str:
    """A listed MCP tool's taskSupport: "forbidden" (absent), "optional" or "required"."""
    return getattr(getattr(tool, "execution", None), "task_support", None) or "forbidden"


def server_runs_tasks(capabilities: Any) -> bool:
    """Whether the server's capabilities offer task-augmented tools/call (2025 form)."""
    requests = getattr(getattr(capabilities, "tasks", None), "requests", None)
    return getattr(getattr(requests, "tools", None), "call", None) is not None


def text_result(text: str, error: bool = False) -> Any:
    """A CallToolResult that only says `text`: what a call that is not over answers."""
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


def _dump(result: Any) -> str:
    return str(result.model_dump_json(by_alias=True, exclude_none=True))


def _load(raw: str) -> Any:
    from mcp_types import CallToolResult

    return CallToolResult.model_validate_json(raw)


async def start(session: Any, tool: str, args: dict[str, Any], asking: Asking,
                deadline: Deadline) -> Any:
    """The call, made so that it may answer as a task, in the session's era's form."""
    if era.modern(session):
        return await taskext.create(session, tool, args, asking, deadline)
    return await create(session, tool, args)


async def create(session: Any, tool: str, args: dict[str, Any]) -> Any:
    """tools/call with `task`: the server's Task (CreateTaskResult.task), or the
    CallToolResult of a server that answered at once after all.

    The SDK validates every tools/call result as a CallToolResult at 2025-11-25, so this
    request is stamped and sent as the session would, and its answer parsed here."""
    from mcp_types import (
        CallToolRequest,
        CallToolRequestParams,
        CallToolResult,
        CreateTaskResult,
        TaskMetadata,
    )

    request = CallToolRequest(params=CallToolRequestParams(
        name=tool, arguments=args, task=TaskMetadata(ttl=TTL_MS)))
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    raw = await session._dispatcher.send_raw_request("tools/call", data["params"], opts)
    if "task" not in raw:
        return CallToolResult.model_validate(raw)
    return CreateTaskResult.model_validate(raw).task


async def status(session: Any, task_id: str) -> Any:
    from mcp_types import GetTaskRequest, GetTaskRequestParams, GetTaskResult

    return await session.send_request(
        GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), GetTaskResult)


async def payload(session: Any, task_id: str) -> Any:
    """tasks/result: the task's CallToolResult, once it is over (the server holds the answer
    until then, asking its questions meanwhile)."""
    from mcp_types import CallToolResult, GetTaskPayloadRequest, GetTaskPayloadRequestParams

    return await session.send_request(
        GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task_id)),
        CallToolResult)


async def cancel(session: Any, task_id: str) -> None:
    if era.modern(session):
        await taskext.cancel(session, task_id)
        return
    from mcp_types import CancelTaskRequest, CancelTaskRequestParams, CancelTaskResult

    await session.send_request(
        CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id)), CancelTaskResult)


async def follow(session: Any, task_id: str, deadline: Deadline | None,
                 asking: Asking | None = None) -> Any:
    """Poll the task until it is over (or asks), then its result; a new status or status
    message is life (`deadline.alive()`), like a progress report. At 2026 its questions come
    with its status, and are asked through `asking` (taskext.py)."""
    if era.modern(session):
        return await taskext.follow(session, task_id, deadline, asking)
    seen: tuple[str, str | None] | None = None
    while True:
        task = await status(session, task_id)
        if (task.status, task.status_message) != seen:
            seen = (task.status, task.status_message)
            if deadline is not None:
                deadline.alive()
        if task.status == "cancelled":
            return text_result(f"the task was cancelled ({task.status_message or 'by the server'})",
                               error=True)
        if task.status in TERMINAL or task.status == "input_required":
            return await payload(session, task_id)
        wait = (task.poll_interval or 1000) / 1000
        await anyio.sleep(min(POLL_MAX, max(POLL_MIN, wait)))


@dataclass
class Tasks:
    """One server's calls made as tasks; `book` (None: nothing is durable) is set at boot."""

    server: str
    book: TaskBook | None = None

    async def call(self, session: Any, tool: str, args: dict[str, Any], asking: Asking,
                   timeout: float, cap: float) -> Any:
        """The tool's CallToolResult, made (or resumed) as a task; see the module docstring."""
        key = current_call() if self.book is not None else None
        book = self.book
        task_id: str | None = None
        if key is not None and book is not None and (row := book.get(*key)) is not None:
            if row.result is not None:  # over, or told already: told the same again
                return _load(row.result)
            if row.state == SENDING:  # it may have reached the server: never sent twice
                told = text_result(
                    f"the tool {tool!r} on MCP server {self.server!r} was being started as a "
                    "task when gantry stopped; whether it started is unknown, so it was not "
                    "sent again", error=True)
                book.lost(*key, _dump(told))
                log.warning("mcp task lost: started before a restart, its id never arrived",
                            extra={"server": self.server, "tool": tool})
                return told
            task_id = row.task_id
            log.info("mcp task resumed after a restart",
                     extra={"server": self.server, "tool": tool, "task": task_id})
        try:
            deadline = Deadline(timeout, cap, MAX_CALL_SECONDS)
            scope = deadline.scope
            with deadline, asking.running(deadline):
                if task_id is None:
                    if key is not None and book is not None:
                        book.sending(*key, self.server, tool)
                    task = await start(session, tool, args, asking, deadline)
                    if not hasattr(task, "task_id"):  # answered at once: no task
                        result = task
                    else:
                        task_id = str(task.task_id)
                        if key is not None and book is not None:
                            book.running(*key, task_id)
                        log.info("mcp task started", extra={
                            "server": self.server, "tool": tool, "task": task_id})
                if task_id is not None:
                    result = await follow(session, task_id, deadline, asking)
        except anyio.get_cancelled_exc_class():
            # The user stopped the turn: the server is told. A shutdown leaves the task
            # running: the turn is retried after the restart, and polls it again.
            if task_id is not None and stopped_by_user():
                with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT):
                    await self._cancel(session, tool, task_id)
                if key is not None and book is not None:
                    book.done(*key, _dump(text_result("cancelled by the user", True)), True)
            raise
        if scope.cancelled_caught:
            if task_id is None:  # no answer to tools/call itself: a plain timeout
                from mcp.shared.exceptions import MCPError
                from mcp_types import REQUEST_TIMEOUT

                raise MCPError(code=REQUEST_TIMEOUT, message="timed out")
            told = text_result(
                f"the tool {tool!r} on MCP server {self.server!r} is still running as a task "
                f"(id {task_id}); it was left running, and its result will be posted to this "
                "chat when it is done")
            if key is not None and book is not None:
                book.detach(*key, _dump(told))
            log.info("mcp task outlived its call; its result will be pushed",
                     extra={"server": self.server, "tool": tool, "task": task_id})
            return told
        if key is not None and book is not None:
            book.done(*key, _dump(result), bool(getattr(result, "is_error", False)))
        return result

    async def _cancel(self, session: Any, tool: str, task_id: str) -> None:
        try:
            await cancel(session, task_id)
            log.info("mcp task cancelled", extra={"server": self.server, "tool": tool,
                                                  "task": task_id})
        except Exception as exc:
            log.warning("mcp tasks/cancel failed", extra={
                "server": self.server, "task": task_id, "error": str(exc)[:200]})



