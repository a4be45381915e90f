"""A small MCP stdio server (official SDK) that misbehaves on demand.

Run as `python -m tests.fakes.mcp_fixture`. Tools: `echo`, `count` (appends to a file, so a
test can see how often it really ran), `crash` (exits at once), `hang` (sleeps, the server
stays responsive), `freeze` (blocks the whole process: no ping answers), `big` (a result of
N chars), `grow` (adds a tool and sends tools/list_changed), `size` (takes an integer) and
`reshape` (swaps `size` for one taking a string, sends tools/list_changed), `flood` (N stderr
lines), `grandchild` (spawns a sleeping grandchild and returns its pid), `env` (one variable
of its environment), `picture` (an image block), `fail` (an isError result), `nag` (asks the
user a question, again after each one not answered), `slow` (sleeps; writes down whether the
client cancelled it with notifications/cancelled), `add_prompt` and `add_doc` (add a prompt
or a resource, and send prompts/list_changed or resources/list_changed), `tally` / `peek`
(read-only) / `settle` (idempotent): each appends a line to a file (the server's own count of
executions) and, the first time for that file, exits mid-call after running, so the client's
stream breaks. It starts with no prompts and no resources.

Environment knobs: FIXTURE_CRASH_AFTER=N exits on the N-th tool call; FIXTURE_BOOT=fail
exits before answering initialize (after writing to stderr); FIXTURE_STDERR_AT_START=N
writes N stderr lines at start.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ImageContent, ToolAnnotations
from pydantic import BaseModel

server = MCPServer("fixture", instructions="A fixture server for gantry's tests.")
calls = 0


def _tick() -> None:
    global calls
    calls += 1
    limit = int(os.environ.get("FIXTURE_CRASH_AFTER", "0") or 0)
    if limit and calls >= limit:
        sys.stderr.write(f"fixture: crashing on call {calls}\n")
        sys.stderr.flush()
        os._exit(3)


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged.

    Second line of the description.
    """
    _tick()
    return text


@server.tool()
def count(path: str, label: str = "") -> str:
    """Append one line to the file at path and return how many lines it has."""
    _tick()
    with open(path, "a") as fh:
        fh.write(f"{label}\n")
    with open(path) as fh:
        return str(sum(1 for _ in fh))


@server.tool()
def crash() -> str:
    """Exit the server process immediately."""
    sys.stderr.write("fixture: crash requested\n")
    sys.stderr.flush()
    os._exit(7)


@server.tool()
async def hang(seconds: float = 3600) -> str:
    """Sleep for `seconds` (the server keeps answering other requests)."""
    _tick()
    await anyio.sleep(seconds)
    return "woke up"


@server.tool()
async def freeze(seconds: float = 3600) -> str:
    """Block the whole server process (it stops answering pings)."""
    time.sleep(seconds)  # in the event loop on purpose: sync tools would run in a thread
    return "thawed"


@server.tool()
def big(chars: int = 1_000_000) -> str:
    """Return a result of `chars` characters."""
    _tick()
    return "x" * chars


async def _tools_changed(ctx: Context) -> None:
    """Both eras' spelling: a 2025 notification on the session, a 2026 subscriptions/listen
    event on the bus (each reaches only the clients of its era)."""
    await ctx.session.send_tool_list_changed()
    await ctx.notify_tools_changed()


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `extra` and tell the client the tool list changed."""

    def extra() -> str:
        """A tool added at run time."""
        return "extra!"

    server.add_tool(extra)
    await _tools_changed(ctx)
    return "grown"


@server.tool()
def size(n: int) -> str:
    """Take an integer (until `reshape` swaps this tool for one that takes a string)."""
    return f"int {n}"


@server.tool()
async def reshape(ctx: Context) -> str:
    """Replace `size` with a same-named tool whose `n` is a string; tell the client."""

    def size(n: str) -> str:
        """Take a string (the reshaped `size`)."""
        return f"str {n}"

    server.remove_tool("size")
    server.add_tool(size)
    await _tools_changed(ctx)
    return "reshaped"


@server.tool()
def flood(lines: int = 1000) -> str:
    """Write `lines` lines to stderr."""
    for i in range(lines):
        sys.stderr.write(f"flood line {i} " + "y" * 50 + "\n")
    sys.stderr.flush()
    return f"wrote {lines} lines"


@server.tool()
def grandchild() -> str:
    """Spawn a long-sleeping grandchild process and return its pid."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return str(proc.pid)


@server.tool()
def env(name: str) -> str:
    """The value of one environment variable of this process, or <unset>."""
    return os.environ.get(name, "<unset>")


@server.tool()
def picture() -> list[ImageContent]:
    """An image content block (a 3,000-byte PNG-labelled payload)."""
    data = base64.b64encode(b"\x89PNG" + b"\0" * 2996).decode()
    return [ImageContent(type="image", data=data, mime_type="image/png")]


@server.tool()
def fail(reason: str = "it went wrong") -> str:
    """Raise, which the SDK turns into an isError result."""
    raise RuntimeError(reason)


class Word(BaseModel):
    word: str


@server.tool()
async def nag(ctx: Context, rounds: int = 20, always: bool = False) -> str:
    """Ask for a word, again after each question not answered (cancel), or after every one
    (`always`), up to `rounds` times; a decline ends it. Returns the actions, in order."""
    seen: list[str] = []
    for _ in range(rounds):
        result = await ctx.elicit("Say a word.", schema=Word)
        seen.append(result.action)
        if result.action == "decline" or (result.action == "accept" and not always):
            break
    return " ".join(seen)


@server.tool()
async def slow(path: str, seconds: float = 30) -> str:
    """Sleep `seconds`; if the client cancels the call meanwhile, append "cancelled" to the
    file at `path` (the SDK stops the handler on notifications/cancelled)."""
    with open(path, "a") as fh:
        fh.write("started\n")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        with open(path, "a") as fh:
            fh.write("cancelled\n")
        raise
    with open(path, "a") as fh:
        fh.write("finished\n")
    return "slept"


@server.tool()
async def add_prompt(ctx: Context, name: str) -> str:
    """Add the prompt `name` (one required argument, `topic`); tell the client."""

    def added(topic: str) -> str:
        return f"Tell me about {topic} ({name})."

    server.prompt(name=name, description=f"Added at run time: {name}")(added)
    await ctx.session.send_prompt_list_changed()
    await ctx.notify_prompts_changed()  # the 2026 era's listen stream
    return "prompt added"


@server.tool()
async def add_doc(ctx: Context, name: str) -> str:
    """Add the text resource fixture://doc/<name>; tell the client."""

    def doc() -> str:
        return f"the document {name}"

    server.resource(f"fixture://doc/{name}", name=name, mime_type="text/plain")(doc)
    await ctx.session.send_resource_list_changed()
    await ctx.notify_resources_changed()
    return "doc added"


def _run_then_break(path: str) -> str:
    """Count one execution in `path`; the first time for it, exit before answering."""
    with open(path, "a") as fh:
        fh.write("ran\n")
    marker = path + ".broke"
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.stderr.write("fixture: breaking the stream after running\n")
        sys.stderr.flush()
        os._exit(5)
    with open(path) as fh:
        return f"ran {sum(1 for _ in fh)} times"


@server.tool()
def tally(path: str) -> str:
    """Count one execution (not idempotent); the first call breaks its stream."""
    return _run_then_break(path)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(path: str) -> str:
    """Count one execution (annotated read-only); the first call breaks its stream."""
    return _run_then_break(path)


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def settle(path: str) -> str:
    """Count one execution (annotated idempotent); the first call breaks its stream."""
    return _run_then_break(path)


def main() -> None:
    for i in range(int(os.environ.get("FIXTURE_STDERR_AT_START", "0") or 0)):
        sys.stderr.write(f"starting up, line {i}\n")
    if os.environ.get("FIXTURE_BOOT") == "fail":
        sys.stderr.write("fixture: cannot open the database (FIXTURE_BOOT=fail)\n")
        sys.stderr.flush()
        sys.exit(2)
    server.run("stdio")


if __name__ == "__main__":
    main()
