"""An MCP server with task tools, in both forms: 2025-11-25 tasks (`task` on tools/call,
CreateTaskResult, tasks/get, tasks/result, tasks/cancel) and, to a 2026-07-28 client that
declares it, the `io.modelcontextprotocol/tasks` extension (`resultType: "task"`, tasks/get
with the result or input requests inline, tasks/update, tasks/cancel). Built on the official
SDK's lowlevel Server, which has no task support of its own. Over stdio, or Streamable
HTTP on 127.0.0.1: `python -m tests.fakes.mcp_tasks [PORT]`.

Tools: `job` (taskSupport "required": runs `seconds`, appending one line to the file at `path`
when it starts, so a test sees how often it really ran, and one to `path`.done when it
finishes; `quiet`: its status message never changes), `maybe` (taskSupport "optional":
answers at once without a task), `ask` (required: the task asks the user one question through
tasks/result, and answers with what they said). Tasks live in the server process, so a
client that restarts finds them again (over HTTP the server outlives it).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

EXTENSION = "io.modelcontextprotocol/tasks"
TTL_MS = 600_000
POLL_MS = 100


class Job:
    def __init__(self, tool: str, args: dict[str, Any]) -> None:
        self.id = uuid.uuid4().hex
        self.tool = tool
        self.args = args
        self.status: str = "working"
        self.message = "started"
        self.result: types.CallToolResult | None = None
        self.created = datetime.now(UTC)
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.answer: str | None = None

    def task(self) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat()
        return {"taskId": self.id, "status": self.status, "statusMessage": self.message,
                "createdAt": self.created.isoformat(), "lastUpdatedAt": now, "ttl": TTL_MS,
                "pollInterval": POLL_MS}

    def task26(self) -> dict[str, Any]:
        """The task as the 2026 extension's tasks/get shows it (a DetailedTask)."""
        task = self.task()
        task["ttlMs"] = task.pop("ttl")
        task["pollIntervalMs"] = task.pop("pollInterval")
        if self.status == "completed" and self.result is not None:
            task["result"] = self.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        if self.status == "input_required":
            task["inputRequests"] = {"colour": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "Which colour?", "requestedSchema": COLOUR}}}
        return task

    def finish(self, status: str, text: str) -> None:
        if self.status in ("completed", "failed", "cancelled"):
            return
        self.result = types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        self.status, self.message = status, text[:100]
        self.done.set()


jobs: dict[str, Job] = {}
COLOUR = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}


def _run(job: Job) -> None:
    with open(job.args["path"], "a") as fh:
        fh.write("ran\n")
    end = time.monotonic() + float(job.args.get("seconds", 1))
    while time.monotonic() < end:
        if job.cancelled.wait(0.05):
            return
        if not job.args.get("quiet"):  # a status that changes is life, as progress is
            job.message = f"{end - time.monotonic():.1f} s left"
    with open(job.args["path"] + ".done", "a") as fh:
        fh.write("finished\n")
    job.finish("completed", f"job done after {job.args.get('seconds', 1)} s")


TOOLS = [
    types.Tool(name="job", description="A long job, run as a task.",
               input_schema={"type": "object", "properties": {
                   "path": {"type": "string"}, "seconds": {"type": "number"},
                   "quiet": {"type": "boolean"}},
                   "required": ["path"]},
               execution=types.ToolExecution(task_support="required")),
    types.Tool(name="maybe", description="Answers at once, with or without a task.",
               input_schema={"type": "object", "properties": {}},
               execution=types.ToolExecution(task_support="optional")),
    types.Tool(name="ask", description="Asks the user a question, as a task.",
               input_schema={"type": "object", "properties": {}},
               execution=types.ToolExecution(task_support="required")),
]


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
    if params.name == "maybe":
        return types.CallToolResult(content=[types.TextContent(type="text", text="plain")])
    from mcp.shared.exceptions import MCPError

    raise MCPError(code=types.METHOD_NOT_FOUND, message=f"{params.name} needs a task")


def _declares_extension(params: dict[str, Any]) -> bool:
    meta = params.get("_meta") or {}
    caps = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
    return EXTENSION in (caps.get("extensions") or {})


async def extension_call(ctx: Any, call_next: Any) -> Any:
    """The 2026 extension's requests, answered before the SDK's runner (which knows none of
    them, nor a `task` answer to tools/call)."""
    params = dict(ctx.params or {})
    if not _declares_extension(params):
        return await call_next(ctx)
    if ctx.method == "tools/call":
        if params.get("name") == "maybe":
            return {"resultType": "complete", "content": [{"type": "text", "text": "plain"}]}
        job = _start(str(params.get("name")), dict(params.get("arguments") or {}))
        return {"resultType": "task", **{k: v for k, v in job.task26().items()
                                         if k not in ("inputRequests", "result")}}
    if ctx.method == "tasks/get":
        return {"resultType": "complete", **_job(str(params.get("taskId"))).task26()}
    if ctx.method == "tasks/update":
        job = _job(str(params.get("taskId")))
        answer = (params.get("inputResponses") or {}).get("colour") or {}
        said = (answer.get("content") or {}).get("colour") if answer.get(
            "action") == "accept" else None
        job.finish("completed", f"the user said {said!r}")
        return {"resultType": "complete"}
    if ctx.method == "tasks/cancel":
        _cancel(_job(str(params.get("taskId"))))
        return {"resultType": "complete"}
    return await call_next(ctx)


def _start(tool: str, args: dict[str, Any]) -> Job:
    job = Job(tool, args)
    jobs[job.id] = job
    if job.tool == "job":
        threading.Thread(target=_run, args=(job,), daemon=True).start()
    else:
        job.status, job.message = "input_required", "waiting for the user"
    return job


def _cancel(job: Job) -> None:
    job.cancelled.set()
    if job.status not in ("completed", "failed", "cancelled"):
        job.status, job.message = "cancelled", "cancelled by the client"
    job.done.set()


async def task_call(ctx: Any, call_next: Any) -> Any:
    """A task-augmented tools/call, answered before the SDK's runner validates the result
    as a CallToolResult (its 2025-11-25 surface has no CreateTaskResult arm)."""
    params = dict(ctx.params or {})
    if ctx.method != "tools/call" or not isinstance(params.get("task"), dict):
        return await call_next(ctx)
    if params.get("name") == "maybe":
        return {"content": [{"type": "text", "text": "as a task"}]}
    return {"task": _start(str(params.get("name")), dict(params.get("arguments") or {})).task()}


def _job(task_id: str) -> Job:
    from mcp.shared.exceptions import MCPError

    job = jobs.get(task_id)
    if job is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"no task {task_id}")
    return job


async def get_task(ctx: Any, params: types.GetTaskRequestParams) -> types.GetTaskResult:
    return types.GetTaskResult.model_validate(_job(params.task_id).task())


async def task_result(ctx: Any, params: types.GetTaskPayloadRequestParams) -> Any:
    job = _job(params.task_id)
    if job.tool == "ask" and job.status == "input_required":
        answer = await ctx.session.elicit_form(
            "Which colour?", {"type": "object", "properties": {"colour": {"type": "string"}},
                              "required": ["colour"]},
            related_request_id=ctx.request_id)
        said = (answer.content or {}).get("colour") if answer.action == "accept" else None
        job.finish("completed", f"the user said {said!r}")
    while not job.done.is_set():
        await anyio.sleep(0.05)
    assert job.result is not None
    meta = {"io.modelcontextprotocol/related-task": {"taskId": job.id}}
    return job.result.model_copy(update={"meta": meta})


async def cancel_task(ctx: Any, params: types.CancelTaskRequestParams) -> types.CancelTaskResult:
    job = _job(params.task_id)
    _cancel(job)
    return types.CancelTaskResult.model_validate(job.task())


class TaskServer(Server[Any]):
    """The SDK's Server, advertising tasks (it knows the capability's type, not the feature)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        caps.tasks = types.ServerTasksCapability(
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())))
        caps.extensions = {EXTENSION: {}}
        return caps


def build() -> Server[Any]:
    server: Server[Any] = TaskServer("tasks-fixture", on_list_tools=list_tools,
                                 on_call_tool=call_tool)
    server.middleware.append(extension_call)
    server.middleware.append(task_call)
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get_task)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, task_result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel_task)
    return server


def main() -> None:
    server = build()
    if len(sys.argv) < 2:
        from mcp.server.stdio import stdio_server

        async def stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(stdio)
        return
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    manager = StreamableHTTPSessionManager(app=server)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            async with manager.run():
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        await manager.handle_request(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")


if __name__ == "__main__":
    main()
