"""Multi-round-trip requests (MCP 2026-07-28): a tools/call a server answers with
`input_required` has its input requests asked of the turn's user through the elicitation
flow (gantry/mcp/elicitation.py) and is retried with the answers, until it finishes.

The SDK's driver runs the loop (responses gathered concurrently, the opaque request_state
echoed, a state-only answer retried with backoff, at most MAX_ROUNDS rounds); gantry gives it
who answers. Unlike a 2025 `elicitation/create`, an input request comes inside its call's
answer, so the call's own turn is asked (never a guess among the calls in flight), with the
same bounds: the call's question budget, its deadline held only while a person is asked.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from gantry import elicit
from gantry.mcp.deadline import Deadline
from gantry.mcp.elicitation import Asking
from gantry.mcp.link import delivery

log = logging.getLogger("gantry.mcp")

MAX_ROUNDS = 10  # input_required answers to one call before it fails (the SDK's default)


async def call_tool(session: Any, tool: str, args: dict[str, Any], progress: Any,
                    asking: Asking, deadline: Deadline, claimed: bool = False) -> Any:
    """tools/call to its end: a CallToolResult, however many input rounds it takes (or,
    `claimed`, a task the server made instead: taskext.py). Every retry is a new request;
    one whose answers never reached the server is not resent (the user would be asked
    again): it fails, as a broken call."""
    # The hot path (one answer, no input rounds) imports nothing per call: the SDK's names
    # are imported once a call needs input.
    first = await session.call_tool(tool, args, math.inf, progress_callback=progress,
                                    allow_input_required=True, allow_claimed=claimed)
    if not _needs_input(first):
        return first

    from mcp.client._input_required import (
        InputRequiredRoundsExceededError,
        run_input_required_driver,
    )
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR

    async def send(responses: Any, state: str | None) -> Any:
        return await session.call_tool(tool, args, math.inf, progress_callback=progress,
                                       input_responses=responses, request_state=state,
                                       allow_input_required=True, allow_claimed=claimed)

    async def retry(responses: Any, state: str | None) -> Any:
        with delivery():  # its own ticket: the first request's tells whether to resend all
            return await send(responses, state)

    log.info("mcp call needs input", extra={"server": asking.server, "tool": tool,
                                            "requests": len(first.input_requests or {})})
    try:
        return await run_input_required_driver(
            first, dispatch=dispatcher(session, asking, deadline), retry=retry,
            max_rounds=MAX_ROUNDS)
    except InputRequiredRoundsExceededError:
        raise MCPError(code=INTERNAL_ERROR, message=f"it asked for input {MAX_ROUNDS} times "
                       "without finishing the call") from None


@functools.cache
def _input_required_type() -> type:
    """mcp_types' InputRequiredResult, imported on the first call (the module stays lazy)."""
    from mcp_types import InputRequiredResult

    return InputRequiredResult


def _needs_input(result: Any) -> bool:
    return isinstance(result, _input_required_type())


def dispatcher(session: Any, asking: Asking, deadline: Deadline
               ) -> Callable[[str, Any], Awaitable[Any]]:
    """The SDK driver's `dispatch`: an elicitation is asked of this call's turn (within its
    budget, its deadline held meanwhile); any other request (sampling, roots: capabilities
    gantry does not declare) gets the SDK's own answer, an error."""
    caller = elicit.TURN.get()

    async def dispatch(key: str, request: Any) -> Any:
        from mcp.client.session import ClientRequestContext
        from mcp_types import ElicitRequest

        if isinstance(request, ElicitRequest) and asking.elicitor is not None:
            return await asking.elicitor.ask(asking.server, caller, [deadline], request.params)
        meta = request.params.meta if request.params is not None else None
        ctx = ClientRequestContext(session=session, request_id=key, meta=meta)
        return await session.dispatch_input_request(ctx, request)

    return dispatch
