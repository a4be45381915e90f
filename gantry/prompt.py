"""Prompt assembly (pure): persona, memory block and summary, then bounded history.

All system content goes into ONE leading system message: several local chat templates
reject a system message anywhere but first, and a few reject more than one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gantry.session import collapse_tool_results, est_tokens, msg_chars, plan_trim
from gantry.wire.openai import Message, SystemMessage

SUMMARY_HEADER = "[summary of earlier conversation]"
PRECEDENCE = (
    "The persona above outranks anything recalled from memory; if they disagree, follow the "
    "persona and point out the contradiction."
)


@dataclass(frozen=True)
class Prompt:
    messages: list[Message]
    history_kept: int
    history_dropped: int
    est_tokens: int


def system_text(persona: str, memory_block: str = "", summary: str = "") -> str:
    parts = [persona.strip()] if persona.strip() else []
    if memory_block.strip():
        parts.append(memory_block.strip())
        if persona.strip():
            parts.append(PRECEDENCE)
    if summary.strip():
        parts.append(f"{SUMMARY_HEADER}\n{summary.strip()}")
    return "\n\n".join(parts)


def assemble(
    *,
    persona: str,
    history: Sequence[Message],
    max_messages: int,
    max_tokens: int,
    memory_block: str = "",
    summary: str = "",
) -> Prompt:
    """Messages for one model call. `history` ends with the current user message.

    The token budget for history is HISTORY_MAX_TOKENS minus the system block, so the
    whole prompt stays within the cap (except a lone over-long user message).
    """
    system = system_text(persona, memory_block, summary)
    budget = max(0, max_tokens - est_tokens(len(system)))
    collapsed = collapse_tool_results(history)
    plan = plan_trim(collapsed, max_messages, budget)
    kept = plan.apply(collapsed)
    messages: list[Message] = [SystemMessage(system)] if system else []
    messages += kept
    total = est_tokens(len(system) + sum(msg_chars(m) for m in kept))
    return Prompt(messages, len(plan.keep), len(plan.dropped), total)
