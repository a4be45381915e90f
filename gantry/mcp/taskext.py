"""The 2026-07-28 form of MCP tasks: the `io.modelcontextprotocol/tasks` extension (docs/mcp.md,
"Long operations: tasks"), the wire half that tasks.py picks for a 2026-era session.

The client declares the extension on every request (the SDK stamps it, from the session's
`extensions`); a server that advertises it may answer any tools/call with `resultType: "task"`
and a task (the SDK parses that through a result claim, and hands it back untouched). The
task is then polled with tasks/get, which carries the result (or the JSON-RPC error) inline
once it is over, and its `inputRequests` while it waits for the user: those are asked through
the same relay as a multi-round-trip request's (mrtr.py) and answered with tasks/update.
tasks/cancel asks the server to stop it. The SDK 2.3 has no client for these three methods:
they are stamped and sent as the session would, with the task id as the `Mcp-Name` header.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio

from gantry.mcp import mrtr
from gantry.mcp.deadline import Deadline
from gantry.mcp.elicitation import Asking

EXTENSION = "io.modelcontextprotocol/tasks"
REQUEST_TIMEOUT = 30.0  # seconds one tasks/get, tasks/update or tasks/cancel may take
POLL_MIN = 0.2  # seconds between tasks/get, whatever pollIntervalMs the server suggests
POLL_MAX = 5.0
MAX_INPUTS = 50  # input requests one task may make before gantry stops answering it


def offered(capabilities: Any) -> bool:
    """Whether a server's capabilities advertise the tasks extension."""
    extensions = getattr(capabilities, "extensions", None)
    return isinstance(extensions, dict) and EXTENSION in extensions


def session_options() -> dict[str, Any]:
    """ClientSession keyword arguments that declare the extension and let a `task` answer to
    tools/call through the SDK's parsing (the SDK advertises it at 2026-era versions only)."""
    from mcp.client.extension import ResultClaim

    return {"extensions": {EXTENSION: {}},
            "result_claims": {EXTENSION: [ResultClaim(result_type="task", model=_created(),
                                                      resolve=_not_resolved)]}}


async def _not_resolved(result: Any, ctx: Any) -> Any:
    # Only the SDK's high-level Client resolves claims; gantry's sessions return them.
    raise RuntimeError("gantry follows MCP tasks itself (gantry/mcp/tasks.py)")


_CREATED: Any = None


def _created() -> Any:
    """The pydantic model of a CreateTaskResult (Result & Task, flat), built once."""
    global _CREATED
    if _CREATED is None:
        from mcp_types import Result
        from pydantic import ConfigDict, Field

        class CreateTaskResult(Result):
            model_config = ConfigDict(extra="allow", populate_by_name=True)
            result_type: Literal["task"] = Field(alias="resultType")
            task_id: str = Field(alias="taskId", min_length=1, max_length=512)
            status: str = "working"

        _CREATED = CreateTaskResult
    return _CREATED


async def create(session: Any, tool: str, args: dict[str, Any], asking: Asking,
                 deadline: Deadline) -> Any:
    """tools/call that may answer as a task: the created task (it has `task_id`), or the
    CallToolResult of a call the server answered at once. Input asked before the task
    exists (multi-round-trip) is relayed by mrtr.py, as for any call."""

    async def progress(done: float, total: float | None, message: str | None) -> None:
        deadline.alive()

    return await mrtr.call_tool(session, tool, args, progress, asking, deadline, claimed=True)


async def _send(session: Any, method: str, task_id: str, **params: Any) -> dict[str, Any]:
    from mcp.shared.exceptions import MCPError
    from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
    from mcp_types import INVALID_REQUEST

    data: dict[str, Any] = {"method": method, "params": {"taskId": task_id, **params}}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    opts.setdefault("headers", {})[MCP_NAME_HEADER] = encode_header_value(task_id)
    opts["timeout"] = REQUEST_TIMEOUT
    raw = await session._dispatcher.send_raw_request(method, data["params"], opts)
    if not isinstance(raw, dict):
        raise MCPError(code=INVALID_REQUEST, message=f"{method}: the answer is not an object")
    return raw


async def status(session: Any, task_id: str) -> dict[str, Any]:
    """tasks/get: the task as the server has it now (a DetailedTask)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_REQUEST

    task = await _send(session, "tasks/get", task_id)
    if not isinstance(task.get("status"), str):
        raise MCPError(code=INVALID_REQUEST, message="tasks/get: the task has no status")
    return task


async def cancel(session: Any, task_id: str) -> None:
    await _send(session, "tasks/cancel", task_id)


Dispatch = Callable[[str, Any], Awaitable[Any]]


def _dispatch(session: Any, asking: Asking | None, deadline: Deadline | None) -> Dispatch:
    """Who answers a task's input requests: the call's turn (mrtr.py's relay), or, for a task
    followed after its turn (finisher.py), the session's own callbacks, which ask no one."""
    if asking is not None and deadline is not None:
        return mrtr.dispatcher(session, asking, deadline)

    async def dispatch(key: str, request: Any) -> Any:
        from mcp.client.session import ClientRequestContext

        meta = request.params.meta if request.params is not None else None
        return await session.dispatch_input_request(
            ClientRequestContext(session=session, request_id=key, meta=meta), request)

    return dispatch


async def _answer(session: Any, task_id: str, task: dict[str, Any], answered: set[str],
                  dispatch: Dispatch) -> None:
    """Ask the task's input requests not asked yet (a key is asked once over the task's
    life), then send the answers with tasks/update."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR, ErrorData, InputRequiredResult

    pending = {k: v for k, v in (task.get("inputRequests") or {}).items() if k not in answered}
    if not pending:
        return
    if len(answered) + len(pending) > MAX_INPUTS:
        raise MCPError(code=INTERNAL_ERROR,
                       message=f"the task asked for input more than {MAX_INPUTS} times")
    requests = InputRequiredResult.model_validate(
        {"resultType": "input_required", "inputRequests": pending}).input_requests or {}
    responses: dict[str, Any] = {}
    for key, request in requests.items():
        answer = await dispatch(key, request)
        if isinstance(answer, ErrorData):
            raise MCPError(code=answer.code, message=answer.message)
        responses[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    answered.update(pending)
    await _send(session, "tasks/update", task_id, inputResponses=responses)


async def follow(session: Any, task_id: str, deadline: Deadline | None,
                 asking: Asking | None = None) -> Any:
    """Poll the task until it is over: its CallToolResult (a failed task raises its JSON-RPC
    error as an MCPError). A new status or status message is life (`deadline.alive()`)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR, CallToolResult, TextContent

    dispatch = _dispatch(session, asking, deadline)
    answered: set[str] = set()
    seen: tuple[Any, Any] | None = None
    while True:
        task = await status(session, task_id)
        if (task["status"], task.get("statusMessage")) != seen:
            seen = (task["status"], task.get("statusMessage"))
            if deadline is not None:
                deadline.alive()
        if task["status"] == "completed":
            return CallToolResult.model_validate(task.get("result") or {"content": []})
        if task["status"] == "failed":
            raw = task.get("error")
            error: dict[str, Any] = raw if isinstance(raw, dict) else {}
            code = error.get("code")
            raise MCPError(code=code if isinstance(code, int) else INTERNAL_ERROR,
                           message=str(error.get("message") or task.get("statusMessage")
                                       or "the task failed")[:500])
        if task["status"] == "cancelled":
            why = task.get("statusMessage") or "by the server"
            return CallToolResult(content=[TextContent(
                type="text", text=f"the task was cancelled ({why})")], is_error=True)
        if task["status"] == "input_required":
            await _answer(session, task_id, task, answered, dispatch)
        wait = task.get("pollIntervalMs")
        wait = wait / 1000 if isinstance(wait, int | float) else 1.0
        await anyio.sleep(min(POLL_MAX, max(POLL_MIN, wait)))
