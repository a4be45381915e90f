"""Prompt assembly (pure): persona and summary, then bounded history, then the turn's context.

All system content goes into ONE leading system message: several local chat templates
reject a system message anywhere but first, and a few reject more than one.

What changes every turn — the current time and the memory recalled for this message — goes
at the END of the newest user message (a footer), never into the system block: providers
cache prompt prefixes, and a timestamp or a recall up front would make every turn a cache
miss. Everything before the newest user message stays byte-identical from one turn to the
next unless the persona or the summary changed (tests/test_prefix.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo

from gantry.model.messages import Message, SystemMessage, UserMessage
from gantry.model.vision import collapse_old_images
from gantry.session import (
    collapse_tool_results,
    current_turn_start,
    est_tokens,
    msg_chars,
    plan_trim,
)

SUMMARY_HEADER = "[summary of earlier conversation]"
PRECEDENCE = (
    "The persona above outranks anything recalled from memory; if they disagree, follow the "
    "persona and point out the contradiction."
)


TIME_MARK = "[gantry context, not from the user]"
"""Starts the time footer; tests/fakes/openai.py strips from it when echoing the user."""
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _offset(moment: datetime) -> str:
    """`UTC+01:00`, `UTC-09:30`, `UTC+00:00`; seconds only for the odd historical zone."""
    delta = moment.utcoffset() or timedelta(0)
    sign = "-" if delta < timedelta(0) else "+"
    secs = abs(int(delta.total_seconds()))
    hh, mm, ss = secs // 3600, secs % 3600 // 60, secs % 60
    return f"UTC{sign}{hh:02d}:{mm:02d}" + (f":{ss:02d}" if ss else "")


def _day(d: date) -> str:
    return f"{_DAYS[d.weekday()][:3]} {d.isoformat()}"


def local_minute(now: float, zone: tzinfo) -> datetime:
    """`now` (unix seconds) in `zone`, cut to the minute: the footer's resolution. (Floored
    first: fromtimestamp rounds microseconds, which could show a minute not yet begun.)"""
    moment = datetime.fromtimestamp(math.floor(now), UTC).astimezone(zone)
    return moment.replace(second=0, microsecond=0)


def time_footer(now: float, zone: tzinfo, scheduled_for: float | None = None,
                context: str = "") -> str:
    """The per-turn time block: local date and time to the minute, weekday, UTC offset and
    zone, then the dates "tomorrow", "Monday" and "next week" mean, so the model needs no
    calendar arithmetic. Dates come from the local calendar (not +24 h), so a DST change day
    is still one day. `scheduled_for` marks a turn the scheduler started; `context` (the
    channel's lines for this turn, a user's reaction) follows the time."""
    moment = local_minute(now, zone)
    today = moment.date()
    monday = today - timedelta(days=today.weekday())
    name = getattr(zone, "key", None) or moment.tzname() or "UTC"
    abbr = moment.tzname() or ""
    where = name if abbr in ("", name) else f"{name}, {abbr}"
    week = ", ".join(
        _day(d) + (" (today)" if d == today else "")
        for d in (monday + timedelta(days=i) for i in range(7))
    )
    lines = [
        f"{TIME_MARK} Now: {_DAYS[today.weekday()]} {today.isoformat()} "
        f"{moment.strftime('%H:%M')}, {_offset(moment)} ({where}).",
        f"Tomorrow: {_day(today + timedelta(days=1))}. This week: {week}. "
        f"Next week: {_day(monday + timedelta(days=7))} to {_day(monday + timedelta(days=13))}.",
    ]
    if scheduled_for is not None:
        due = local_minute(scheduled_for, zone)
        lines.append(
            f"This turn was started by the scheduler, not typed by the user; it was due "
            f"{_day(due.date())} {due.strftime('%H:%M')} {_offset(due)}."
        )
    if context.strip():
        lines.append(context.strip())
    return "\n\n" + "\n".join(lines)


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


def with_memory(footer: str, memory_block: str, persona: bool) -> str:
    """The turn's footer with the memory recalled for its message after the time block
    (and, with a persona, the note that the persona outranks memory)."""
    block = memory_block.strip()
    if not block:
        return footer
    if not footer:
        footer = "\n\n" + TIME_MARK
    return f"{footer}\n\n{block}" + (f"\n\n{PRECEDENCE}" if persona else "")


def assemble(
    *,
    persona: str,
    history: Sequence[Message],
    max_messages: int,
    max_tokens: int,
    memory_block: str = "",
    summary: str = "",
    footer: str = "",
    tail: Sequence[Message] = (),
) -> Prompt:
    """Messages for one model call. `history` ends with the current turn (its user message
    and any tool rounds); `footer` (the time block) is appended to that user message, and
    `tail` (a cap note) follows everything.

    The token budget for history is HISTORY_MAX_TOKENS minus the system block, so the
    whole prompt stays within the cap (except a lone over-long user message).
    """
    system = system_text(persona, "", summary)
    footer = with_memory(footer, memory_block, bool(persona.strip()))
    budget = max(0, max_tokens - est_tokens(len(system) + len(footer)))
    turn = [*history]
    if footer:
        for i in range(len(turn) - 1, -1, -1):
            m = turn[i]
            if isinstance(m, UserMessage):
                turn[i] = m.with_text(m.text + footer)
                break
    turn = collapse_old_images(turn, current_turn_start(turn))  # gantry.model.vision
    collapsed = collapse_tool_results([*turn, *tail])
    plan = plan_trim(collapsed, max_messages, budget)
    kept = plan.apply(collapsed)
    messages: list[Message] = [SystemMessage(system)] if system else []
    messages += kept
    total = est_tokens(len(system) + sum(msg_chars(m) for m in kept))
    return Prompt(messages, len(plan.keep), len(plan.dropped), total)
