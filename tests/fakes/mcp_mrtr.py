"""An MCP server (official SDK) whose tools ask the user for input, in whichever era the
client opens: 2026-07-28 answers `input_required` and reads the retry's input responses
(multi-round-trip requests), 2025 sends `elicitation/create` mid-call. Run as
`python -m tests.fakes.mcp_mrtr` (stdio) or `python -m tests.fakes.mcp_mrtr PORT`
(Streamable HTTP on 127.0.0.1).

Tools: `book` (asks how many people and where, through an SDK resolver: the same code in
both eras), `link` (URL mode, hand-rolled input_required: the https link, then the result
once the retry carries the user's consent), `nag` (answers input_required every time, never
finishing). FIXTURE_LEGS=path: each tools/call leg appends a line there (the tool, and the
input responses it carried), so a test sees the retries and what they brought.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
    TextContent,
)
from pydantic import BaseModel

server = MCPServer("mrtr-fixture", instructions="Asks its questions by multi-round-trip.")
SIGN_IN = "https://example.com/sign-in?session=abc"


def _leg(tool: str, ctx: Context | None) -> None:
    path = os.environ.get("FIXTURE_LEGS")
    if not path:
        return
    responses = ctx.input_responses if ctx is not None else None
    carried = {k: v.model_dump(mode="json", exclude_none=True)
               for k, v in (responses or {}).items()}
    with open(path, "a") as fh:
        fh.write(json.dumps({"tool": tool, "era": ctx.protocol_version if ctx else None,
                             "responses": carried}) + "\n")


class Table(BaseModel):
    size: int
    seating: Literal["inside", "terrace"] = "inside"


def ask_table(ctx: Context) -> Elicit[Table]:
    _leg("book", ctx)
    return Elicit("How many people, and where?", Table)


@server.tool()
def book(day: str, table: Annotated[Table, Resolve(ask_table)]) -> str:
    """Book a table on `day` (asks the user how many people, and where)."""
    return f"booked a table for {table.size}, {table.seating}, on {day}"


@server.tool()
def link(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Link an account: the user opens an https link (URL-mode input request)."""
    _leg("link", ctx)
    answer = (ctx.input_responses or {}).get("sign-in")
    if answer is not None:
        action = getattr(answer, "action", "?")
        text = "account linked" if action == "accept" else f"not linked: {action}"
        return CallToolResult(content=[TextContent(type="text", text=text)])
    request = ElicitRequest(params=ElicitRequestURLParams(
        message="Sign in to link your account.", url=SIGN_IN, elicitation_id="sign-in-1"))
    return InputRequiredResult(input_requests={"sign-in": request}, request_state="linking")


@server.tool()
def nag(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask a question on every leg and never finish."""
    _leg("nag", ctx)
    round_no = len(ctx.request_state or "")
    request = ElicitRequest(params=ElicitRequestFormParams(
        message=f"Say a word (round {round_no + 1}).",
        requested_schema={"type": "object", "properties": {"word": {"type": "string"}},
                          "required": ["word"]}))
    return InputRequiredResult(input_requests={f"q{round_no}": request},
                               request_state="r" * (round_no + 1))


def main() -> None:
    if len(sys.argv) < 2:
        server.run("stdio")
        return
    import uvicorn

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]),
                log_level="warning")


if __name__ == "__main__":
    main()
